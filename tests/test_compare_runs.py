"""`--mode=report --runs=W1,W2,... --report_dir=DIR`: a report on workdirs launched by hand
(transformer/report/compare.py), on constructed workdirs (config.json + metrics.jsonl)."""

import csv
import hashlib
import json
import os
import subprocess
import sys

import pytest

from configs.default import get_config
from transformer.cli import flag_checks
from transformer.config import from_config_dict
from transformer.errors import CommandLineError
from transformer.report import compare
from transformer.report import stats as report_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTROPY = 3.5


def _config(lr: float, seed: int) -> dict:
  c = get_config("smoke")
  with c.unlocked():
    c.optim.learning_rate, c.seed = lr, seed
  return from_config_dict(c).to_dict()


def _workdir(path, lr, seed, final, steps=40):
  os.makedirs(path)
  config = _config(lr, seed)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    for step, loss in ((10, 4.0), (20, 3.0), (30, final), (steps, final)):
      f.write(json.dumps({"step": step, "split": "train", "time": 0.0, "loss": loss,
                          "grad_norm": 1.0}) + "\n")
    for step, loss in ((20, 3.0), (steps, final)):
      f.write(json.dumps({"step": step, "split": "eval", "time": 0.0, "loss": loss}) + "\n")
  return str(path), config


@pytest.fixture
def runs(tmp_path):
  """Three hand-launched runs: LR 1e-3 with seeds 0 and 1, LR 1e-2 with seed 0 (in another
  folder, with the same folder name as the first)."""
  a, config = _workdir(tmp_path / "mine" / "lr1e-3", 1e-3, 0, 2.0)
  b, _ = _workdir(tmp_path / "mine" / "lr1e-3_s1", 1e-3, 1, 2.2)
  c, _ = _workdir(tmp_path / "other" / "lr1e-3", 1e-2, 0, 2.5)
  return [a, b, c], config


def _seed_entropy_cache(report_dir, config):
  """The report's unigram-entropy cache, so that no data is built (report_runs.unigram_entropy)."""
  os.makedirs(report_dir, exist_ok=True)
  key = hashlib.sha1(json.dumps(config["data"], sort_keys=True).encode()).hexdigest()[:16]
  with open(os.path.join(report_dir, "unigram_entropy.json"), "w") as f:
    json.dump({key: ENTROPY}, f)


def test_config_differences_lists_only_the_fields_that_differ(runs):
  workdirs, _ = runs
  configs = [json.load(open(os.path.join(w, "config.json"))) for w in workdirs]
  assert compare.config_differences(configs) == ["seed", "optim.learning_rate"]
  assert compare.config_differences(configs[:1]) == []
  # Runs record where and when they started (config.json's "provenance"): not a difference.
  for i, c in enumerate(configs):
    c["provenance"] = {"host": f"node{i}", "time": f"2026-11-23T10:0{i}:00Z"}
  assert compare.config_differences(configs) == ["seed", "optim.learning_rate"]


def test_report_compares_hand_launched_runs(runs, tmp_path, capsys):
  workdirs, config = runs
  out = tmp_path / "cmp"
  _seed_entropy_cache(out, config)
  path = compare.write_runs_report(workdirs, str(out))
  text = open(path).read()
  printed = capsys.readouterr().out

  assert "--mode=report --runs=" in text and "--mode=sweep" not in text
  assert "## Runs and their config differences" in text
  assert "`seed`, `optim.learning_rate`" in text
  # The per-run table: unique names (the two `lr1e-3` folders told apart), values, final loss.
  assert "| mine-lr1e-3 |" in text and "| other-lr1e-3 |" in text and "| lr1e-3_s1 |" in text
  row = next(line for line in text.splitlines() if line.startswith("| other-lr1e-3 |"))
  assert "| 0 | 0.01 | finished | 2.5000 |" in row
  # The sweep report's table: the two LR 1e-3 runs (seeds 0, 1) averaged in one row.
  table = next(line for line in text.splitlines() if line.startswith("| 0.001 | 2 / 2 |"))
  mean, half = report_stats.mean_ci([2.0, 2.2])
  assert f"{mean:.4f} ± {half:.4f}" in table
  assert "## Verdict" not in text and "No verdict" not in text
  assert (out / "curves.webp").exists() and (out / "final_vs_optim_learning_rate.webp").exists()
  with open(out / "results.csv") as f:
    assert len(list(csv.DictReader(f))) == 3
  assert all(os.path.realpath(out / n) == os.path.realpath(w) for n, w in
             zip(("mine-lr1e-3", "lr1e-3_s1", "other-lr1e-3"), workdirs))
  assert "differ in: seed, optim.learning_rate" in printed
  assert "other-lr1e-3" in printed and "2.5000" in printed
  assert "failed" not in printed  # no sweep file, so no study figures to try (issue 31)

  # Run again into the same directory: the links are replaced, the report rewritten.
  assert compare.write_runs_report(workdirs[:2], str(out)) == path
  assert "other-lr1e-3" not in open(path).read()


def test_runs_flags_are_checked(runs, tmp_path):
  workdirs, _ = runs
  flag_checks.check_report(None, workdirs, str(tmp_path / "cmp"))  # fine
  with pytest.raises(CommandLineError, match="does not exist"):
    flag_checks.check_report(None, [workdirs[0], str(tmp_path / "nope")], str(tmp_path / "c"))
  with pytest.raises(CommandLineError, match="holds no config.json"):
    flag_checks.check_report(None, [str(tmp_path)], str(tmp_path / "c"))
  with pytest.raises(CommandLineError, match="needs --report_dir"):
    flag_checks.check_report(None, workdirs, None)
  with pytest.raises(CommandLineError, match="both given"):
    flag_checks.check_report(str(tmp_path), workdirs, str(tmp_path / "c"))
  with pytest.raises(CommandLineError, match="twice"):
    flag_checks.check_report(None, [workdirs[0], workdirs[0]], str(tmp_path / "c"))


def test_report_dir_inside_a_compared_run_is_refused(runs):
  """Issue 31: the report would land in (and overwrite files of) that run's workdir."""
  workdirs, _ = runs
  for inside in (workdirs[1], os.path.join(workdirs[1], "cmp")):
    with pytest.raises(CommandLineError, match="inside the compared run"):
      compare.write_runs_report(workdirs, inside)
    assert not os.path.exists(os.path.join(inside, "report.md"))


def _launch(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


def test_launch_report_runs(runs, tmp_path):
  """The command line end to end: a report and a summary; a missing workdir is one line."""
  workdirs, config = runs
  out = tmp_path / "cmp"
  _seed_entropy_cache(out, config)
  done = _launch("--mode=report", f"--runs={','.join(workdirs)}", f"--report_dir={out}")
  assert done.returncode == 0, done.stderr
  assert "Compared 3 runs" in done.stdout and (out / "report.md").exists()

  missing = str(tmp_path / "gone")
  done = _launch("--mode=report", f"--runs={workdirs[0]},{missing}", f"--report_dir={out}")
  assert done.returncode == 2
  assert done.stderr.strip().count("\n") == 0 and f"{missing} does not exist" in done.stderr
