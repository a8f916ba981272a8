"""Bad input through `launch.py`, as a user meets it: one short paragraph on stderr, exit
status 1, no traceback, and nothing written that would refuse the corrected command (no
config.json; a workdir a failure read is left as it was). Errors in the command line itself,
exit status 2, are in test_command_line.py; each file reader on its own in test_user_files.py.
"""

import json
import os
import subprocess
import sys

import pytest

from configs.default import get_config
from transformer.config import ConfigError, from_config_dict
from transformer.workdir import check_workdir_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _launch(*flags, timeout=300):
  """Runs launch.py with the smoke config (the 8 fake CPU devices of conftest are inherited)."""
  out = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"),
                        "--config=configs/default.py:smoke", *flags], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
  return out.returncode, out.stdout, out.stderr


def _assert_clean_failure(rc, stdout, stderr, *phrases, alone=True):
  """Exit status 1, no traceback, and the error as one paragraph: the last line of stderr
  (its only line if `alone`; a run that got as far as building data has TFDS's progress)."""
  assert rc == 1, (stdout, stderr)
  assert "Traceback" not in stdout + stderr, stderr
  lines = [line for line in stderr.splitlines() if line.strip()]
  assert lines and (len(lines) == 1 or not alone), stderr
  for phrase in phrases:
    assert phrase in lines[-1], stderr


@pytest.mark.parametrize("flags, phrases", [
    (["--workdir=/proc/forbidden"],
     ["--workdir='/proc/forbidden' (its parent /proc) cannot be written"]),
    (["--config.data.tokenizer=sentencepiece", "--config.data.spm_model=/nowhere/x.model"],
     ["--config.data.spm_model='/nowhere/x.model': no such file"]),
    (["--config.data.tokenizer=hf:/nowhere/tokenizer.json"],
     ["--config.data.tokenizer='hf:/nowhere/tokenizer.json': '/nowhere/tokenizer.json' is not "
      "a file"]),
    (["--config.model.attention_impl=cudnn"], ["attention_impl='cudnn' needs a GPU"]),
    (["--config.train.batch_size=12"], ["batch_size=12", "parallel.data x parallel.fsdp = 8"]),
    (["--config.data.source_dir=/nowhere"], ["--config.data.source_dir='/nowhere' is not a"]),
    (["--config.model.d_model=15", "--config.model.num_heads=5"],
     ["sinusoidal needs an even d_model"]),
], ids=["unwritable_workdir", "missing_spm_model", "missing_hf_tokenizer", "cudnn_on_cpu",
        "batch_over_devices", "missing_source_dir", "odd_sinusoidal_width"])
def test_bad_input_is_one_paragraph_before_anything_is_written(tmp_path, flags, phrases):
  workdir = str(tmp_path / "w")
  if not any(f.startswith("--workdir") for f in flags):
    flags = flags + [f"--workdir={workdir}"]
  _assert_clean_failure(*_launch(*flags), *phrases)
  assert not os.path.exists(os.path.join(workdir, "config.json"))


def _snapshot(folder):
  """Every file under `folder` with its bytes and modification time."""
  out = {}
  for root, _, files in os.walk(folder):
    for f in files:
      path = os.path.join(root, f)
      out[path] = (open(path, "rb").read(), os.stat(path).st_mtime_ns)
  return out


def test_a_config_file_with_a_syntax_error_is_one_line_at_its_line(tmp_path):
  config = tmp_path / "mine.py"
  config.write_text("def get_config():\n  return {'model': {'d_model': 32,}\n")
  rc, out, err = _launch(f"--config={config}", f"--workdir={tmp_path / 'w'}")
  _assert_clean_failure(rc, out, err, f"Error: {config}, line 2", "(the --config file)",
                        "Fix that line")
  assert not (tmp_path / "w").exists()


def test_a_sweep_file_with_a_syntax_error_is_one_line_at_its_line(tmp_path):
  sweep = tmp_path / "mine.py"
  sweep.write_text("def get_sweep():\n  return [{'seed': 0}\n\nx = (\n")
  rc, out, err = _launch("--mode=sweep", f"--sweep={sweep}", f"--sweep_dir={tmp_path / 's'}")
  _assert_clean_failure(rc, out, err, f"Error: {sweep}, line 2", "(the --sweep file)")
  assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("mode, text, phrases", [
    ("sample", '{"model": {"d_model": 32,}}',
     ["config.json, line 1, column 26 (the run's saved config): not valid JSON"]),
    ("eval", '{"model":\n', ["config.json, line 2, column 1", "not valid JSON"]),
    ("sample", "[]", ["holds a JSON array, not an object"]),
    ("sample", "SMOKE with model.norm_placement=middle",
     ["its config is not valid", "norm_placement='middle' is not supported"]),
    ("eval", '{"modle": {}}', ["its config is not valid", "Unknown top-level config key"]),
    ("train", '{"model": {}', ["config.json, line 1, column 13", "not valid JSON"]),
    ("diagnose", '"smoke"', ["holds a JSON string, not an object"]),
], ids=["sample_bad_json", "eval_torn_json", "sample_not_an_object", "sample_bad_field",
        "eval_unknown_section", "train_resume_bad_json", "diagnose_not_an_object"])
def test_a_workdir_whose_config_json_is_bad_is_one_line_and_left_as_it_was(tmp_path, mode,
                                                                          text, phrases):
  workdir = tmp_path / "w"
  (workdir / "checkpoints" / "10").mkdir(parents=True)
  if text.startswith("SMOKE"):  # a whole saved config, one field changed by hand
    saved = from_config_dict(get_config("smoke")).to_dict()
    saved["model"]["norm_placement"] = "middle"
    text = json.dumps(saved, indent=1)
  (workdir / "config.json").write_text(text)
  before = _snapshot(workdir)
  rc, out, err = _launch(f"--workdir={workdir}", f"--mode={mode}",
                         *(["--prompt=def "] if mode == "sample" else []))
  _assert_clean_failure(rc, out, err, f"{workdir}/config.json", "--mode=train writes this file",
                        *phrases)
  assert _snapshot(workdir) == before


def test_a_bad_config_json_is_refused_only_where_a_run_would_read_it(tmp_path):
  from transformer.cli.preflight import check_saved_config
  from transformer.errors import UserFileError
  (tmp_path / "config.json").write_text("{")
  check_saved_config(str(tmp_path))  # no checkpoint: no run yet, the file will be replaced
  (tmp_path / "checkpoints" / "10").mkdir(parents=True)
  with pytest.raises(UserFileError, match=r"config.json, line 1, column 2 \(the run's saved"):
    check_saved_config(str(tmp_path))


def test_sample_without_a_checkpoint_says_so(tmp_path):
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "config.json").write_text(from_config_dict(get_config("smoke")).to_json())
  rc, out, err = _launch(f"--workdir={workdir}", "--mode=sample", "--prompt=def ")
  _assert_clean_failure(rc, out, err, "holds a config.json but no checkpoint yet")
  assert "init_from" not in err


def test_a_workdir_without_a_checkpoint_is_not_a_different_run(tmp_path):
  """A refused or crashed first attempt may have left config.json; the corrected command
  must not be refused for it. Once a checkpoint exists, the config is compared."""
  saved = from_config_dict(get_config("smoke"))
  c = get_config("smoke")
  c.model.norm_placement = "post"
  now = from_config_dict(c)
  (tmp_path / "config.json").write_text(saved.to_json())
  check_workdir_config(str(tmp_path), now)  # no checkpoint: no run yet
  (tmp_path / "checkpoints" / "10").mkdir(parents=True)
  with pytest.raises(ConfigError, match="norm_placement"):
    check_workdir_config(str(tmp_path), now)


@pytest.mark.slow  # ~30 s of CPU: builds a dataset and trains a few steps
def test_a_diverging_run_stops_with_a_message_and_saves_nothing_nonfinite(tiny_corpus, tmp_path):
  workdir = tmp_path / "w"
  rc, out, err = _launch(
      f"--workdir={workdir}", f"--config.data.source_dir={tiny_corpus['source_dir']}",
      f"--config.data.data_dir={tiny_corpus['data_dir']}", "--config.data.validation_percent=20",
      "--config.data.seq_len=32", "--config.data.shuffle_buffer=64", "--config.model.d_model=32",
      "--config.train.log_every=1", "--config.checkpoint.every_steps=1",
      "--config.optim.learning_rate=1e6")
  _assert_clean_failure(rc, out, err, "Training stopped: step", "non-finite",
                        "--config.train.nonfinite=skip", alone=False)
  bad = int(err.split("Training stopped: step ")[1].split()[0])
  steps = sorted(int(p) for p in os.listdir(workdir / "checkpoints") if p.isdigit())
  assert steps and max(steps) == bad - 1  # every step before the bad one was saved, not it
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  assert all(r["loss"] == r["loss"] for r in rows)  # no NaN in the logged metrics either
