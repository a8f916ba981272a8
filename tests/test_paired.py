"""The paired statistic every study's call rests on (experiments/paired.py), against a NumPy
transcription of the t-interval and hand-made runs."""

import math
import os
import types

import numpy as np
import pytest

from experiments import analysis as a
from experiments import paired
from transformer.report import robustness, stats
from transformer.report.runs import Run
from transformer.study import check

T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def _run(lr, seed, loss, status="finished"):
  return Run(f"lr={lr},seed={seed}", {"optim.learning_rate": lr, "seed": seed}, 100, "/nowhere",
             {"train": [{"step": 1, "split": "train", "loss": 5.0}],
              "eval": [{"step": 100, "split": "eval", "loss": loss}]}, status)


def test_the_interval_is_students_t_over_the_per_seed_differences():
  a, b = {0: 2.3, 1: 2.5, 2: 2.2}, {0: 2.0, 1: 2.1, 2: 2.05}
  d = paired.difference("a minus b", a, b)
  x = np.array([0.3, 0.4, 0.15])
  half = T_975_2 * x.std(ddof=1) / math.sqrt(3)
  mean, got = d.interval
  assert mean == pytest.approx(x.mean(), abs=1e-12) and got == pytest.approx(half, rel=1e-9)
  assert d.text() == f"a minus b: +{x.mean():.3f} ± {half:.3f} nats/token (3 seeds)"
  # Interval [x.mean() - half, x.mean() + half] = [-0.04, 0.61]: it contains 0.05, so no call;
  # a margin below its low end agrees, above its high end disagrees.
  assert paired.judge(d, 0.05) is None
  assert paired.judge(d, x.mean() - half - 0.01) is True
  assert paired.judge(d, x.mean() + half + 0.01) is False
  assert paired.judge(paired.difference("one seed", {0: 1.0}, {0: 0.0}), 0.05) is None


def test_best_lr_needs_every_seed(monkeypatch):
  runs = [_run(1e-3, s, 2.0 + 0.1 * s) for s in range(3)]
  runs += [_run(3e-3, s, 1.9 + 0.1 * s) for s in range(2)]  # lower mean, but seed 2 missing
  runs += [_run(3e-3, 2, float("nan"), "incomplete")]
  assert paired.best_lr(runs) == 1e-3
  lr, losses = paired.read(runs, matched_lr=3e-3)
  assert lr == 1e-3 and losses == {0: 2.0, 1: 2.1, 2: pytest.approx(2.2)}
  monkeypatch.setattr(paired, "AT_MATCHED_LR", True)
  assert paired.read(runs, matched_lr=1e-3) == (1e-3, {0: 2.0, 1: 2.1, 2: pytest.approx(2.2)})


def test_a_diverged_run_counts_as_its_initial_loss():
  runs = [_run(1e-2, 0, float("nan"), "diverged")]
  assert paired.seed_losses(runs) == {0: 5.0}




def _jackknife_reference(x):
  """A float64 NumPy transcription of the jackknife of the mean (Efron & Tibshirani, eq.
  11.5): the i-th leave-one-out mean, and sqrt((n - 1) / n * sum_i (m_i - m_.)^2)."""
  x = np.asarray(x, np.float64)
  n = len(x)
  loo = np.array([np.delete(x, i).mean() for i in range(n)])
  return loo, np.sqrt((n - 1) / n * np.sum((loo - loo.mean()) ** 2))


@pytest.mark.parametrize("x", [[0.3, 0.4, 0.15], [0.02, -0.01], [0.1, 0.5, -0.2, 0.05, 0.3]])
def test_the_jackknife_of_the_mean_matches_a_numpy_transcription(x):
  loo, se = stats.jackknife_mean(x)
  want_loo, want_se = _jackknife_reference(x)
  np.testing.assert_allclose(loo, want_loo, rtol=1e-12)
  assert se == pytest.approx(want_se, rel=1e-12)
  # For the mean the jackknife SE is the usual standard error of the mean.
  assert se == pytest.approx(np.std(x, ddof=1) / math.sqrt(len(x)), rel=1e-12)
  assert stats.jackknife_mean([1.0]) == ([], pytest.approx(float("nan"), nan_ok=True))


def test_the_seed_description_counts_each_side_and_gives_the_leave_one_out_means():
  d = paired.difference("a minus b", {0: 2.3, 1: 2.5, 2: 2.2}, {0: 2.0, 1: 2.1, 2: 2.05})
  loo, se = _jackknife_reference([0.3, 0.4, 0.15])  # +0.275, +0.225, +0.350
  assert paired.seed_description(d, 0.2) == (
      "a minus b: 2 of 3 seeds above the margin 0.2, 1 below (seed 0 +0.300, seed 1 +0.400, "
      f"seed 2 +0.150); leave-one-out means +{loo[0]:.3f} without seed 0, +{loo[1]:.3f} "
      f"without seed 1, +{loo[2]:.3f} without seed 2 (jackknife SE {se:.3f}; 3 of 3 above "
      "the margin).")
  one = paired.difference("one seed", {0: 1.0}, {0: 0.0})
  assert paired.seed_description(one, 0.05).endswith("; too few seeds for a jackknife.")


def test_the_margin_thresholds_leave_no_seed_out():
  """A seed left out of 3 leaves t_{0.975,1} = 12.7: the row is gone; the seeds are
  described under the table instead (`judge` hands its difference to the section)."""
  labels = [t.label for t in paired.margin_thresholds()]
  assert labels == [a.CONFIDENCE.label, "loss margin (nats/token)", paired.MATCHED_LR.label]
  assert paired.margin_thresholds(matched_lr=False) == paired.margin_thresholds()[:2]
  module = types.SimpleNamespace(LOSS_MARGIN=0.05, get_sweep=lambda: [{"seed": 0}],
                                 THRESHOLDS=paired.margin_thresholds(matched_lr=False))
  d = paired.difference("a minus b", {0: 2.3, 1: 2.5, 2: 2.2}, {0: 2.0, 1: 2.1, 2: 2.05})
  module.analyze = lambda runs: [a.verdict(paired.judge(d, module.LOSS_MARGIN), "")]
  lines = robustness.section(check(module), [], lambda runs: None)
  assert not any("seed left out" in line for line in lines)
  described = [line for line in lines if line.startswith("- a minus b")]
  # Once, at the margin as reported (0.05), though `analyze` ran at every threshold too.
  assert described == [f"- {paired.seed_description(d, 0.05)}"]
  assert robustness.describe("outside a report") is None  # no section collecting: ignored
  assert paired.judge(d, 0.05) is None  # and the interval [-0.04, 0.61] still holds 0.05




def test_no_other_study_leaves_a_seed_out():
  root = os.path.join(os.path.dirname(__file__), os.pardir, "experiments")
  names = ("LEAVE_ONE_OUT", "LEFT_OUT_SEED", "kept_seeds", "loss_margin_thresholds")
  users = {f[:-3] for f in os.listdir(root) if f.endswith(".py") and f != "paired.py"
           and any(n in open(os.path.join(root, f)).read() for n in names)}
  assert not users, sorted(users)


def _interval(per_seed):
  """(low, high) of the 95% t-interval of `per_seed`'s values, in float64 NumPy."""
  x = np.array(list(per_seed.values()), np.float64)
  half = T_975_2 * x.std(ddof=1) / math.sqrt(len(x))
  return x.mean() - half, x.mean() + half


@pytest.mark.parametrize("values, word", [
    ((-0.30, -0.32, -0.31), "gains"),  # the whole interval below -0.05
    ((0.30, 0.32, 0.31), "loses"),  # above +0.05
    ((0.01, -0.01, 0.0), "neither gains nor loses 0.05"),  # inside (-0.05, 0.05)
    ((-0.1, 0.1, 0.0), "not resolved"),  # across both ends
    ((-0.2, -0.02, -0.1), "not resolved"),  # below +0.05 but across -0.05
])
def test_a_finding_says_where_the_interval_lies_against_the_margin(values, word):
  d = paired.Difference("cost", dict(enumerate(values)))
  lo, hi = _interval(d.per_seed)  # the words checked against an independent interval
  expected = ("gains" if hi < -0.05 else "loses" if lo > 0.05 else
              "neither gains nor loses 0.05" if -0.05 < lo and hi < 0.05 else "not resolved")
  assert word == expected
  assert paired.outcome(d, 0.05) == word
  assert paired.finding("admin", d, 0.05) == f"admin {word} ({d.estimate()})"
  flipped = {"gains": "loses", "loses": "gains"}.get(word, word)  # a higher-is-better statistic
  assert paired.outcome(d, 0.05, lower_gains=False) == flipped


def test_a_finding_of_one_seed_is_not_resolved():
  d = paired.Difference("cost", {0: -1.0})
  assert paired.finding("deepnorm", d, 0.02) == "deepnorm not resolved (-1.000)"
