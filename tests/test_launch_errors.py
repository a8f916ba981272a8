"""Bad input through `launch.py`, as a user meets it: one short paragraph on stderr, exit
status 1, no traceback, and nothing written (errors in the command line itself, exit status
2, are in test_command_line.py) (no config.json) that would refuse the corrected
command."""

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
    (["--workdir=/proc/forbidden"], ["--workdir='/proc/forbidden' cannot be used"]),
    (["--config.data.tokenizer=sentencepiece", "--config.data.spm_model=/nowhere/x.model"],
     ["--config.data.spm_model='/nowhere/x.model': no such file"]),
    (["--config.model.attention_impl=cudnn"], ["attention_impl='cudnn' needs a GPU"]),
    (["--config.train.batch_size=12"], ["batch_size=12", "parallel.data x parallel.fsdp = 8"]),
    (["--config.data.source_dir=/nowhere"], ["--config.data.source_dir='/nowhere' is not a"]),
    (["--config.model.d_model=15", "--config.model.num_heads=5"],
     ["sinusoidal needs an even d_model"]),
], ids=["unwritable_workdir", "missing_spm_model", "cudnn_on_cpu", "batch_over_devices",
        "missing_source_dir", "odd_sinusoidal_width"])
def test_bad_input_is_one_paragraph_before_anything_is_written(tmp_path, flags, phrases):
  workdir = str(tmp_path / "w")
  if not any(f.startswith("--workdir") for f in flags):
    flags = flags + [f"--workdir={workdir}"]
  _assert_clean_failure(*_launch(*flags), *phrases)
  assert not os.path.exists(os.path.join(workdir, "config.json"))


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
