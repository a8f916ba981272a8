"""What the studies measure on their runs: the pieces their `analyze(runs)` verdicts share.

A study's sweep file defines `analyze(runs)` (runs: `transformer.sweep.report.Run`, one per point);
the report puts the Markdown lines it returns under `## Verdict`. Every number in a verdict is
computed here from the runs' `metrics.jsonl`; the thresholds that turn numbers into "agrees"
are stated in the verdict text next to the numbers.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from experiments.presets import DEFAULT_ACTIVATION, PAPER_ACTIVATION  # noqa: F401
from transformer.sweep.report import (Run, clipped_final_loss, layer_profiles, mean_ci,  # noqa: F401
                                mean_clipped_loss_per_lr)
from transformer.sweep.report import largest_stable_lr as report_largest_stable_lr

PLACEMENT = "model.norm_placement"
LR = "optim.learning_rate"


def activation(run: Run) -> str:
  """The run's `model.activation` (`DEFAULT_ACTIVATION` when its point leaves it unset)."""
  return run.overrides.get("model.activation", DEFAULT_ACTIVATION)


def activation_name(activation: str) -> str:
  """How a paper writes `model.activation`: ReLU, GELU, SwiGLU."""
  return {"relu": "ReLU", "gelu": "GELU", "swiglu": "SwiGLU"}.get(activation, activation)


def fmt(mean: float, half: float, digits: int = 3) -> str:
  """`mean ± half` (the half-width of a 95% interval), `-` for no value."""
  if mean is None or not math.isfinite(mean):
    return "-"
  if half is None or not math.isfinite(half):
    return f"{mean:.{digits}g}"
  return f"{mean:.{digits}g} ± {half:.2g}"


def ci(values: Iterable[float]) -> str:
  return fmt(*mean_ci(list(values)))


def diagnostics_rows(run: Run) -> list[dict]:
  return run.metrics.get("diagnostics", [])


def profile(row: dict, metric: str) -> dict[int, float]:
  """`{layer: value}` of the per-layer metric `metric` (e.g. "feed_forward/wo/grad_norm",
  "residual_rms", "self_attention/attn_max_logit") in a diagnostics row; {} if absent."""
  for name, values in layer_profiles(row).items():
    if name.endswith("*/" + metric):
      return values
  return {}


def at_init(run: Run, metric: str) -> dict[int, float]:
  """The per-layer profile of `metric` at the run's first diagnostics step (initialization
  for the one-step studies)."""
  rows = diagnostics_rows(run)
  return profile(rows[0], metric) if rows else {}


def slope_ci(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
  """Least-squares slope of y on x and the half-width of its 95% interval (Student's t with
  n - 2 degrees of freedom); half-width nan for fewer than 3 points."""
  from scipy import stats  # noqa: PLC0415
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2 or np.ptp(x) == 0:
    return float("nan"), float("nan")
  fit = stats.linregress(x, y)
  if x.size < 3:
    return float(fit.slope), float("nan")
  return float(fit.slope), float(stats.t.ppf(0.975, x.size - 2) * fit.stderr)


def r_squared(x: Sequence[float], y: Sequence[float]) -> float:
  from scipy import stats  # noqa: PLC0415
  return float(stats.linregress(np.asarray(x, float), np.asarray(y, float)).rvalue ** 2)


def contains(mean: float, half: float, value: float) -> bool:
  return math.isfinite(half) and abs(mean - value) <= half


def select(runs: Sequence[Run], **fields) -> list[Run]:
  """Runs whose overrides have every `field=value` (dots in field names written as `__`)."""
  want = {k.replace("__", "."): v for k, v in fields.items()}
  return [r for r in runs if all(r.overrides.get(k) == v for k, v in want.items())]


def lr_sensitivity(runs: Sequence[Run]) -> Optional[float]:
  """Wortsman et al.'s LR sensitivity of runs that differ only in the learning rate: the mean
  over the grid of the clipped final loss minus the best grid point's."""
  means = list(mean_clipped_loss_per_lr(runs, LR).values())
  return float(np.mean(means) - min(means)) if means else None


def by_seed(runs: Sequence[Run], statistic: Callable[[Sequence[Run]], Optional[float]]):
  """`{seed: statistic of that seed's runs alone}` (each seed a replicate of the whole grid),
  leaving out seeds where it is None: for comparisons paired by seed."""
  seeds = sorted({r.overrides.get("seed") for r in runs}, key=str)
  out = {s: statistic([r for r in runs if r.overrides.get("seed") == s]) for s in seeds}
  return {s: v for s, v in out.items() if v is not None}


def per_seed(runs: Sequence[Run], statistic: Callable[[Sequence[Run]], Optional[float]]):
  """`by_seed`'s values, as a list over seeds."""
  return list(by_seed(runs, statistic).values())


def largest_stable_lr(runs: Sequence[Run]) -> Optional[float]:
  """The largest learning rate up to which every run (seed) finished healthily, counted up
  from the best one (`transformer.sweep.report.largest_stable_lr`)."""
  return report_largest_stable_lr(runs, LR)


def status_counts(runs: Sequence[Run]) -> str:
  counts = {}
  for r in runs:
    counts[r.status] = counts.get(r.status, 0) + 1
  return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
          + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def verdict_word(agrees) -> str:
  """`verdict`'s outcome as words inside a sentence: "agrees", "partly agrees", ..."""
  return {True: "agrees", "partly": "partly agrees", False: "disagrees",
          None: "is inconclusive"}[agrees]


def verdict(agrees, why: str) -> str:
  """`agrees`: True, "partly" (the direction holds, the size does not), False, or None
  (the data cannot tell)."""
  word = {True: "**Agrees.**", "partly": "**Partly agrees.**", False: "**Disagrees.**",
          None: "**Inconclusive.**"}[agrees]
  return f"{word} {why}"
