"""Reading a workdir: metrics.jsonl (a run killed mid-write), checkpoint steps, light imports."""

import gzip
import json
import subprocess
import sys

import pytest

from transformer.config import ConfigError
from transformer.errors import UserFileError
from transformer.workdir import checkpoint_steps, choose_step, last_eval, read_metrics


def _write_rows(path, rows, tail=""):
  path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_a_torn_last_line_is_skipped(tmp_path):
  rows = [{"step": 5, "split": "train", "loss": 2.0}, {"step": 5, "split": "eval", "loss": 1.9},
          {"step": 10, "split": "train", "loss": 1.5}, {"step": 10, "split": "eval", "loss": 1.4}]
  _write_rows(tmp_path / "metrics.jsonl", rows, tail='{"step": 15, "split": "tr')  # killed here
  got = read_metrics(str(tmp_path))
  assert [r["step"] for r in got["train"]] == [5, 10]
  assert [r["loss"] for r in got["eval"]] == [1.9, 1.4]
  assert last_eval(str(tmp_path))["step"] == 10


def test_a_resumed_run_logs_a_step_twice_and_the_last_line_wins(tmp_path):
  rows = [{"step": 10, "split": "eval", "loss": 1.4}, {"step": 20, "split": "eval", "loss": 1.2},
          {"step": 20, "split": "eval", "loss": 1.1}]  # resumed from step 10, evaluated again
  _write_rows(tmp_path / "metrics.jsonl", rows)
  assert [r["loss"] for r in read_metrics(str(tmp_path))["eval"]] == [1.4, 1.1]
  assert last_eval(str(tmp_path))["loss"] == 1.1


def test_no_metrics_yet(tmp_path):
  assert read_metrics(str(tmp_path)) == {}
  assert last_eval(str(tmp_path)) is None
  _write_rows(tmp_path / "metrics.jsonl", [{"step": 1, "split": "train", "loss": 3.0}])
  assert last_eval(str(tmp_path)) is None


def test_a_committed_run_is_read_from_its_gzipped_metrics(tmp_path):
  rows = [{"step": 10, "split": "eval", "loss": 1.4}, {"step": 20, "split": "eval", "loss": 1.2}]
  text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 30, "spl'
  (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
  assert [r["loss"] for r in read_metrics(str(tmp_path))["eval"]] == [1.4, 1.2]
  _write_rows(tmp_path / "metrics.jsonl", rows[:1])  # a plain file (training again) wins
  assert [r["loss"] for r in read_metrics(str(tmp_path))["eval"]] == [1.4]


def test_a_broken_gzip_is_a_one_line_error_naming_it(tmp_path):
  (tmp_path / "metrics.jsonl.gz").write_bytes(b"not gzip\n")
  with pytest.raises(UserFileError) as e:
    read_metrics(str(tmp_path))
  assert "metrics.jsonl.gz" in str(e.value) and "\n" not in str(e.value)


def test_choose_step_takes_the_latest_or_the_given_one_and_lists_the_others(tmp_path):
  for step in (4, 12, 8):
    (tmp_path / str(step)).mkdir()
  (tmp_path / "12.orbax-checkpoint-tmp-1").mkdir()  # an unfinished save is no step
  steps = checkpoint_steps(str(tmp_path))
  assert steps == [4, 8, 12]
  assert choose_step(steps, None, what="--workdir", directory=str(tmp_path)) == 12
  assert choose_step(steps, 8, what="--workdir", directory=str(tmp_path)) == 8
  with pytest.raises(ConfigError, match=r"--step_flag: .* no checkpoint of step 5; it has "
                                        r"steps \[4, 8, 12\]"):
    choose_step(steps, 5, what="--step_flag", directory=str(tmp_path))
  with pytest.raises(ConfigError, match="holds no checkpoint"):
    choose_step(checkpoint_steps(str(tmp_path / "missing")), None, what="--workdir",
                directory=str(tmp_path / "missing"))


def test_reading_a_workdir_imports_no_jax_or_tensorflow():
  """The sweep runner and report read workdirs; they must stay light (the runner leaves the
  accelerators to its children)."""
  code = ("import sys, transformer.workdir, transformer.report.write, transformer.sweep.points, "
          "transformer.sweep.local, transformer.cli.sweep_and_report, transformer.config\n"
          "print(sorted(m for m in ('jax', 'tensorflow') if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"
