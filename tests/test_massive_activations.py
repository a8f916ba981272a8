"""massive_activations (issue 68): the call on peak max|h| (a magnitude), pre over peri, read
on the confirmatory seeds 3-5 only; seeds 0-2 described; the retired max/median ratio a
caveat; Sun-style outliers counted. Hand-made runs whose answers are known."""

import math
import os

import numpy as np

from experiments import analysis as a
from experiments import massive_activations as ma
from transformer import REPO_ROOT
from transformer.report import runs as report_runs
from transformer.sweep import points as sweep_points

T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def _run(overrides, rows, status="finished"):
  metrics = {"train": [{"step": 1, "split": "train", "loss": 5.5}],
             "eval": [{"step": 600, "split": "eval", "loss": 2.0}], "diagnostics": rows}
  return report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                         600, "/nonexistent", metrics, status)


def _rows(peak, median=1.0):
  """3 diagnostics steps over 2 layers; layer 1 reaches max|h| `peak` at step 100 with median
  `median` there, everything else max 2, median 1."""
  return [{"step": step, "split": "diagnostics",
           "decoder/layer_0/residual_max_abs": 2.0,
           "decoder/layer_1/residual_max_abs": peak if step == 100 else 2.0,
           "decoder/layer_0/residual_median_abs": 1.0,
           "decoder/layer_1/residual_median_abs": median if step == 100 else 1.0}
          for step in (50, 100, 150)]


def _runs(pre_peak, seeds=range(6), peri_peak=10.0):
  """Pre and peri at their LRs; peri's peak max|h| `peri_peak` x 1.1 per seed, pre's
  `pre_peak(lr, seed)` x the same factor; each step's median scales with its max, so the
  max/median ratio (the retired statistic) is 10 for every run."""
  runs = []
  for p in ("pre", "peri"):
    for lr in ma.LRS[p]:
      for s in seeds:
        peak = (pre_peak(lr, s) if p == "pre" else peri_peak) * 1.1 ** s
        runs.append(_run({a.PLACEMENT: p, a.LR: lr, "seed": s}, _rows(peak, peak / 10.0)))
  return runs


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def test_the_call_reads_peak_max_abs_on_the_confirmatory_seeds_only():
  """Seeds 3-5: pre's peak 8x peri's; seeds 0-2: the same as peri's. The ratio max/median is
  10 everywhere, so the retired call (and a call over all six seeds) could not agree."""
  lines = ma.analyze(_runs(lambda lr, s: 80.0 if s >= 3 else 10.0))
  assert _verdict(lines).startswith("**Agrees.**")
  assert (f"ln(pre / peri peak max|h|) at LR 0.003: +{math.log(8):.3f} ± 0.000 (3 seeds), "
          "interval above ln 2") in _verdict(lines)
  explore = next(line for line in lines if line.startswith("- Exploratory"))
  assert "less than twice Peri-LN's at LR 0.003, 0.01, 0.03" in explore
  assert "+0.000 ± 0.000 (3 seeds)" in explore


def test_the_robustness_section_describes_only_the_differences_the_verdict_reads():
  """Seeds 3-5's pre-over-peri differences, one per LR; not seeds 0-2's (described above the
  verdict) nor the retired ratio's (the caveat), which it listed until this was fixed."""
  from transformer import study
  from transformer.report import robustness
  runs = _runs(lambda lr, s: 80.0 if s >= 3 else 10.0)
  word, described = robustness.reported_verdict(study.load("experiments/massive_activations.py"),
                                                runs)
  assert word == "agrees" and len(described) == len(ma.LRS["pre"])
  assert all(d.startswith("ln(pre / peri peak max|h|) at LR ") and "(seed 3 +2.079, " in d
             for d in described)


def test_the_interval_is_a_paired_t_interval_of_the_log_ratio():
  """pre / peri peak max|h| per confirmatory seed 3, 6, 4 at every LR: the mean and half-width
  against a float64 NumPy transcription of the paired t-interval."""
  factor = {3: 3.0, 4: 6.0, 5: 4.0}
  diffs = ma.measure(_runs(lambda lr, s: 10.0 * factor.get(s, 1.0)))["call"]
  logs = np.log(np.array([3.0, 6.0, 4.0], dtype=np.float64))
  half = T_975_2 * logs.std(ddof=1) / math.sqrt(3)
  assert list(diffs) == ma.LRS["pre"]
  for d in diffs.values():
    mean, got = d.interval
    assert math.isclose(mean, logs.mean(), rel_tol=1e-12)
    assert math.isclose(got, half, rel_tol=1e-9)


def test_partly_when_more_than_twice_at_some_lrs_only():
  lines = ma.analyze(_runs(lambda lr, s: 40.0 if lr > 3e-3 else 11.0))
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert ("pre-norm's peak max|h| is more than twice Peri-LN's at LR 0.01, 0.03; less than "
          "twice Peri-LN's at LR 0.003") in _verdict(lines)
  assert _verdict(ma.analyze(_runs(lambda lr, s: 12.0))).startswith("**Disagrees.**")


def test_not_run_yet_without_the_confirmatory_seeds():
  """The committed runs are seeds 0-2: the call says it has not run, and the exploratory
  seeds' value is described."""
  lines = ma.analyze(_runs(lambda lr, s: 80.0, seeds=range(3)))
  assert _verdict(lines) == ("**Inconclusive.** The call on the confirmatory seeds 3-5 is not "
                             "run yet: no LR has pre- and peri-norm runs of seeds 3, 4 or 5.")
  assert any("more than twice Peri-LN's at LR 0.003, 0.01, 0.03" in line for line in lines)
  assert ma.summarize(_runs(lambda lr, s: 80.0, seeds=range(3)))["numbers"][0].startswith(
      "not run yet; exploratory (seeds 0-2)")


def test_outliers_count_layer_steps_at_least_100_times_the_median():
  run = _run({a.PLACEMENT: "post", a.LR: 1e-2, "seed": 0}, _rows(5.0, 0.05))  # 100x at step 100
  assert ma.outliers(run) == 1
  assert ma.outliers(_run({}, _rows(5.0, 0.0501))) == 0
  rows = _rows(150.0)
  rows[0]["decoder/layer_0/residual_max_abs"] = 100.0  # a second one, at step 50 layer 0
  assert ma.outliers(_run({}, rows)) == 2
  assert ma.max_abs(_run({}, rows)) == [(50, 100.0), (100, 150.0), (150, 2.0)]


def test_the_caveat_names_the_collapsed_cells_where_the_ratio_is_largest():
  runs = _runs(lambda lr, s: 80.0, seeds=range(3))
  runs += [_run({a.PLACEMENT: "post", a.LR: lr, "seed": s}, _rows(4.0, 0.01),
                "collapsed" if lr >= 1e-2 else "finished")
           for lr in ma.LRS["post"] for s in range(3)]
  caveat = next(line for line in ma.analyze(runs) if line.startswith("- Caveat"))
  assert "largest where every run collapsed (post-norm at LR 0.01, 0.03)" in caveat
  assert "+0.000 ± 0.000 (3 seeds), interval below ln 2" in caveat


def test_the_committed_runs_are_the_sweeps_points_seeds_3_to_5_for_pre_and_peri_only():
  """Every point of the sweep is committed under its name and overrides (seeds 0-2 from issue
  46, then issue 68's confirmatory seeds); seeds 3-5 are pre and peri's only, 18 runs."""
  committed = sweep_points.read_manifest(
      os.path.join(REPO_ROOT, "experiments", "results", "massive_activations"))["points"]
  points = ma.get_sweep("cpu")
  by_name = dict(zip(sweep_points.point_names(points), points))
  assert {c["name"]: c["overrides"] for c in committed} == by_name
  confirmatory = [p for p in points if p["seed"] in ma.CONFIRMATORY_SEEDS]
  assert len(points) == 48 and len(confirmatory) == 18
  assert {p[a.PLACEMENT] for p in confirmatory} == {"pre", "peri"}
