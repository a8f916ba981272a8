"""Files a run leaves that a later command reads (another run's config.json and checkpoints
for init_from and sample, a sweep's manifest and caches, the CPU-peak cache), broken or
half-written: one-line errors naming the file, or a cache measured again; the workdir is left
as it was."""

import json
import os

import numpy as np
import pytest

from tests.test_launch_errors import _snapshot  # every file's bytes and mtime
from transformer.errors import CommandLineError, RunError, UserFileError
from transformer.report import write as report
from transformer.report import stats as report_stats
from transformer.report import runs as report_runs
from transformer.sweep.points import MANIFEST, read_manifest
from transformer.workdir import read_metrics


def _one_line(e):
  text = str(e.value)
  assert "\n" not in text, text
  return text


# --- another run's checkpoints (model.init_from, --mode=sample) -----------------------------

@pytest.fixture
def saved_run(tmp_path):
  """A workdir with config.json and checkpoints of steps 3 and 7 (params only)."""
  import orbax.checkpoint as ocp
  workdir = tmp_path / "run"
  manager = ocp.CheckpointManager(str(workdir / "checkpoints"), item_names=("state",))
  for step in (3, 7):
    params = {"params": {"w": np.full((2, 3), step, np.float32)}}
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(params)))
  manager.wait_until_finished()
  manager.close()
  (workdir / "config.json").write_text(json.dumps({"model": {"kind": "decoder_lm"}}))
  return str(workdir)


def test_init_from_reads_a_whole_run(saved_run):
  from transformer.weights.init_from import load_params
  params, config, step = load_params(saved_run)
  assert step == 7 and config["model"]["kind"] == "decoder_lm"
  np.testing.assert_array_equal(params["w"], 7.0)


def test_init_from_a_run_whose_config_json_is_torn_is_one_line(saved_run):
  from transformer.weights.init_from import load_params
  path = os.path.join(saved_run, "config.json")
  with open(path, "w") as f:
    f.write('{"model": {"kind": "decod')
  before = _snapshot(saved_run)
  with pytest.raises(UserFileError) as e:
    load_params(saved_run)
  line = _one_line(e)
  assert line.startswith(f"{path}, line 1, column ") and "not valid JSON" in line
  assert "train into a new --workdir" in line
  assert _snapshot(saved_run) == before


def test_a_checkpoint_with_corrupt_files_is_one_line_naming_the_other_steps(saved_run):
  from transformer.weights.init_from import load_params
  state = os.path.join(saved_run, "checkpoints", "7", "state")
  for root, _, files in os.walk(state):
    for f in files:
      with open(os.path.join(root, f), "wb") as out:
        out.write(b"\x00garbage")
  before = _snapshot(saved_run)
  with pytest.raises(RunError) as e:
    load_params(saved_run, what="--workdir")
  line = _one_line(e)
  assert line.startswith(f"--workdir={saved_run!r}: checkpoint ")
  assert "checkpoints/7 cannot be read (" in line and "partial or corrupt" in line
  assert "Nothing was changed. Give another of its steps (3)" in line
  assert _snapshot(saved_run) == before
  params, _, step = load_params(saved_run, 3)  # the other step still reads
  assert step == 3 and float(params["w"][0, 0]) == 3.0


def test_a_half_written_step_folder_is_not_a_checkpoint(saved_run):
  from transformer.weights.init_from import load_params
  checkpoints = os.path.join(saved_run, "checkpoints")
  os.makedirs(os.path.join(checkpoints, "9.orbax-checkpoint-tmp-123", "state"))
  _, _, step = load_params(saved_run)
  assert step == 7
  assert os.path.isdir(os.path.join(checkpoints, "9.orbax-checkpoint-tmp-123"))


# --- a sweep's files (--mode=report, --reuse_runs_from) -------------------------------------

def _sweep(tmp_path, metrics=("loss", "accuracy")):
  d = tmp_path / "sweep"
  (d / "a").mkdir(parents=True)
  rows = [{"step": 10, "split": "train", "loss": 3.0, "grad_norm": 1.0},
          {"step": 10, "split": "eval", **{m: 2.0 for m in metrics}}]
  (d / "a" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  (d / MANIFEST).write_text(json.dumps({
      "sweep_file": "s.py", "config": "configs/default.py:smoke", "overrides": [],
      "points": [{"name": "a", "overrides": {"seed": 0}, "num_steps": 10}]}))
  return str(d)


def test_report_metric_no_run_logged_lists_the_logged_ones(tmp_path):
  sweep_dir = _sweep(tmp_path)
  before = _snapshot(sweep_dir)
  with pytest.raises(CommandLineError) as e:
    report.write_report(sweep_dir, "bleu")
  assert _one_line(e) == (f"--report_metric=bleu: no run of {sweep_dir} logged an eval metric "
                          "of that name; they logged loss, accuracy.")
  assert _snapshot(sweep_dir) == before
  assert os.path.exists(report.write_report(sweep_dir, "accuracy"))


@pytest.mark.parametrize("manifest, problem", [
    ({"sweep_file": "s.py", "config": "c.py", "overrides": []}, "its 'points' is missing"),
    ({"sweep_file": "s.py", "config": "c.py", "overrides": [], "points": [{"name": "a"}]},
     "point 0 of 'points' has no 'overrides' of type dict"),
    ({"sweep_file": "s.py", "config": "c.py", "overrides": [],
      "points": [{"name": "../x", "overrides": {}, "num_steps": 1}]},
     "has the name '../x', which is not a folder name"),
])
def test_a_manifest_missing_fields_is_one_line(tmp_path, manifest, problem):
  (tmp_path / MANIFEST).write_text(json.dumps(manifest))
  with pytest.raises(UserFileError) as e:
    read_manifest(str(tmp_path))
  line = _one_line(e)
  assert line.startswith(f"{tmp_path / MANIFEST} (the sweep's manifest")
  assert problem in line and "Run the --mode=sweep command again" in line


def test_a_points_torn_config_json_leaves_the_report_without_collapse_marks(tmp_path, capsys):
  sweep_dir = _sweep(tmp_path)
  config = os.path.join(sweep_dir, "a", "config.json")
  with open(config, "w") as f:
    f.write('{"model": ')
  report.write_report(sweep_dir)
  out = capsys.readouterr().out
  assert (f"not computed ({config}, line 1, column 11 (the run's saved config): "
          "not valid JSON") in out
  with open(config, "w") as f:
    f.write('["a list"]')
  run = report_runs.load_runs(sweep_dir, entropy=False)[0]
  with pytest.raises(UserFileError, match="holds a JSON array, not an object"):
    report_stats.initial_loss(run)


def test_a_corrupt_entropy_cache_reads_as_no_value_and_is_left_alone(tmp_path, monkeypatch):
  """The report reads the unigram entropy (never rebuilds the data, issue 29): a torn cache,
  one that is not an object, or an entry that is not a number gives no value (collapse is not
  checked) and the file is left as it was."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.data import pipeline

  def rebuilt(*args, **kwargs):
    raise AssertionError("the report must not build the data pipeline")
  monkeypatch.setattr(pipeline, "lm_data", rebuilt)
  workdir = tmp_path / "run"
  workdir.mkdir()
  saved = json.loads(from_config_dict(get_config()).to_json())
  (workdir / "config.json").write_text(json.dumps(saved))
  cache = tmp_path / "unigram_entropy.json"
  key = report_runs.entropy_key(saved["data"], None)
  for torn in ('{"ab', "[1, 2]", json.dumps({key: "not a number"})):
    cache.write_text(torn)
    assert report_runs.unigram_entropy(str(workdir), str(tmp_path)) is None
    assert cache.read_text() == torn
  cache.write_text(json.dumps({key: 1.25}))
  assert report_runs.unigram_entropy(str(workdir), str(tmp_path)) == 1.25


# --- metrics.jsonl and the CPU-peak cache ----------------------------------------------------

def test_metrics_rows_without_a_number_step_are_skipped(tmp_path):
  (tmp_path / "metrics.jsonl").write_text(
      '{"step": "x", "split": "eval"}\n{"step": [1], "split": "eval"}\n'
      '{"step": 2, "split": ["eval"]}\n{"step": 3, "split": "eval", "loss": 1.0}\n')
  assert read_metrics(str(tmp_path)) == {"eval": [{"step": 3, "split": "eval", "loss": 1.0}]}


@pytest.mark.parametrize("cache", ['{"a": 1', "[1, 2]", "\xff\xfe", None])
def test_a_corrupt_cpu_peak_cache_is_measured_again(tmp_path, monkeypatch, cache):
  from transformer.train import peaks
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda: 123e9)
  path = tmp_path / "cpu_peak.json"
  if cache is not None:
    path.write_text(cache, encoding="latin-1")
  else:  # this machine's entry, with a figure that is not a number
    key = f"{peaks._cpu_model()} | {peaks._cpu_cores()} cores | jax {peaks.jax.__version__}"
    path.write_text(json.dumps({key: {"flops_per_sec": "fast", "measured": "today"}}))
  flops, how = peaks.cpu_peak_flops(str(tmp_path))
  assert flops == 123e9 and "123 GFLOP/s" in how
  assert [e["flops_per_sec"] for e in json.loads(path.read_text()).values()] == [123e9]


# --- --mode=eval on a trained run -----------------------------------------------------------

from tests.test_kinds import lm_run  # noqa: E402, F401 -- a module-scoped fixture
from tests.test_tasks import package_corpus  # noqa: E402, F401 -- lm_run's data


def test_eval_split_the_data_lacks_is_a_command_line_error_listing_the_splits(lm_run):
  from transformer.evaluation.evaluate import evaluate_workdir
  _, workdir, _ = lm_run
  before = _snapshot(workdir)
  with pytest.raises(CommandLineError) as e:
    evaluate_workdir(workdir, split="dev", log=lambda m: None)
  line = _one_line(e)
  assert line.startswith("--eval_split='dev' is not a split of ") and "; it has [" in line
  assert line.endswith("Leave --eval_split out for the run's own.")
  assert _snapshot(workdir) == before


def test_eval_of_a_corrupt_checkpoint_is_one_line_and_changes_nothing(lm_run, tmp_path):
  import shutil
  from transformer.evaluation.evaluate import evaluate_workdir
  workdir = str(tmp_path / "copy")
  shutil.copytree(lm_run[1], workdir)
  for root, _, files in os.walk(os.path.join(workdir, "checkpoints", "4", "state")):
    for f in files:
      with open(os.path.join(root, f), "wb") as out:
        out.write(b"\x00garbage")
  before = _snapshot(workdir)
  with pytest.raises(RunError) as e:
    evaluate_workdir(workdir, log=lambda m: None)
  line = _one_line(e)
  assert line.startswith(f"--workdir={workdir!r}: checkpoint {workdir}/checkpoints/4 cannot be")
  assert "Give another of its steps (2)" in line
  assert _snapshot(workdir) == before


def test_report_metric_through_launch_is_one_line_with_exit_status_2(tmp_path):
  import subprocess
  import sys
  sweep_dir = _sweep(tmp_path)
  before = _snapshot(sweep_dir)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, "launch.py", "--mode=report", f"--sweep_dir={sweep_dir}",
                        "--report_metric=bleu"], cwd=root, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 2, out.stderr
  assert out.stderr.strip().splitlines() == [
      f"Error: --report_metric=bleu: no run of {sweep_dir} logged an eval metric of that name; "
      "they logged loss, accuracy."]
  assert _snapshot(sweep_dir) == before
