"""The paired statistic every study's call rests on (experiments/paired.py), against a NumPy
transcription of the t-interval and hand-made runs."""

import math

import numpy as np
import pytest

from experiments import paired
from transformer.report.runs import Run

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


def test_best_lr_needs_every_seed_and_the_left_out_seed_leaves(monkeypatch):
  runs = [_run(1e-3, s, 2.0 + 0.1 * s) for s in range(3)]
  runs += [_run(3e-3, s, 1.9 + 0.1 * s) for s in range(2)]  # lower mean, but seed 2 missing
  runs += [_run(3e-3, 2, float("nan"), "incomplete")]
  assert paired.best_lr(runs) == 1e-3
  lr, losses = paired.read(runs, matched_lr=3e-3)
  assert lr == 1e-3 and losses == {0: 2.0, 1: 2.1, 2: pytest.approx(2.2)}
  monkeypatch.setattr(paired, "LEFT_OUT_SEED", 2)  # now 3e-3 has every (remaining) seed
  assert paired.best_lr(runs) == 3e-3
  monkeypatch.setattr(paired, "AT_MATCHED_LR", True)
  monkeypatch.setattr(paired, "LEFT_OUT_SEED", None)
  assert paired.read(runs, matched_lr=1e-3) == (1e-3, {0: 2.0, 1: 2.1, 2: pytest.approx(2.2)})


def test_a_diverged_run_counts_as_its_initial_loss():
  runs = [_run(1e-2, 0, float("nan"), "diverged")]
  assert paired.seed_losses(runs) == {0: 5.0}


def test_kept_seeds_drops_only_the_seed_left_out(monkeypatch):
  runs = [_run(1e-3, s, 2.0) for s in range(3)]
  assert paired.kept_seeds(runs) == runs
  monkeypatch.setattr(paired, "LEFT_OUT_SEED", 0)  # 0 is a seed, not "none"
  assert [r.seed for r in paired.kept_seeds(runs)] == [1, 2]


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
