"""Statistics of a sweep's runs: confidence intervals over seeds, and the learning-rate sweep's
numbers (Wortsman et al.'s clipped final loss and LR sensitivity, the largest stable LR) that the
report prints for every sweep with a learning-rate field. (They stay here, not in
`experiments/analysis.py`, because the report of any sweep uses them and `transformer` does not
import `experiments`; the studies' own maths is in `experiments/analysis.py`.)"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from transformer.report.runs import Run
from transformer.report.seed_sets import SETS_APART, seed_sets


CONFIDENCE = 0.95  # of every interval the reports give; a robustness section moves it


def mean_ci(values: Sequence[float], confidence: Optional[float] = None) -> tuple[float, float]:
  """Mean and the half-width of its `confidence` interval (default CONFIDENCE; Student's t,
  n - 1 degrees of freedom); the half-width is nan for fewer than 2 values."""
  confidence = CONFIDENCE if confidence is None else confidence
  x = np.asarray(values, np.float64)
  if x.size == 0:
    return float("nan"), float("nan")
  if x.size < 2:
    return float(x[0]), float("nan")
  from scipy import stats
  half = stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
  return float(x.mean()), float(half)


def jackknife_mean(values: Sequence[float]) -> tuple[list[float], float]:
  """The leave-one-out means of `values` (n floats; the i-th without values[i]) and the
  jackknife standard error of the mean, sqrt((n - 1) / n * sum_i (m_i - mean_i m_i)^2); for
  the mean it equals std(ddof=1) / sqrt(n), so what it adds is the leave-one-out means: which
  one value moves the mean, and how far. ([], nan) for fewer than 2 values."""
  x = np.asarray(values, np.float64)
  if x.size < 2:
    return [], float("nan")
  loo = (x.sum() - x) / (x.size - 1)
  se = math.sqrt((x.size - 1) / x.size * float(((loo - loo.mean()) ** 2).sum()))
  return [float(m) for m in loo], se


def format_interval(mean: float, half: float) -> str:
  if math.isnan(mean):
    return "-"
  return f"{mean:.4f}" if math.isnan(half) else f"{mean:.4f} ± {half:.4f}"



def initial_loss(run: Run) -> float:
  """The loss at initialization, ln(vocab size) (a model whose outputs are near uniform), from
  the run's config.json; the first logged train loss if there is no config."""
  vocab_size = run.vocab_size()
  if vocab_size is not None:
    return math.log(vocab_size)
  train = run.metrics.get("train", [])
  return train[0]["loss"] if train else float("nan")


def clipped_final_loss(run: Run) -> Optional[float]:
  """Wortsman et al.'s min(final eval loss, initial loss): a diverged run counts as the
  initial loss ln V; None for a run that has not ended."""
  if run.status == "diverged":
    return initial_loss(run)
  if run.status not in ("finished", "collapsed") or "loss" not in run.final:
    return None
  loss = run.final["loss"]
  return initial_loss(run) if not math.isfinite(loss) else min(loss, initial_loss(run))


def mean_clipped_loss_per_lr(runs: Sequence[Run], lr_field: str) -> dict[float, float]:
  """`{lr: mean over seeds of clipped_final_loss}` for the LRs with an ended run."""
  per_lr: dict[float, list[float]] = {}
  for r in runs:
    v = clipped_final_loss(r)
    if v is not None:
      per_lr.setdefault(r.overrides[lr_field], []).append(v)
  return {lr: float(np.mean(v)) for lr, v in sorted(per_lr.items())}


def seeds_every_lr_ran(runs: Sequence[Run], lr_field: str) -> tuple[list[Run], list]:
  """One setting's `runs` (several LRs, each over seeds) cut to the seeds with an ended run at
  every LR that has one, and the seeds left out: a best LR compares means over the same seeds
  (long_runs' pre-norm has seeds 3 and 4 at 3e-3 only; its mean over 5 seeds against another
  LR's over 3 would compare seed sets, not LRs). All of `runs` and no seed left out when every
  LR ran the same seeds, or when no seed ran them all."""
  per_lr: dict[float, set] = {}
  for r in runs:
    if clipped_final_loss(r) is not None:
      per_lr.setdefault(r.overrides[lr_field], set()).add(r.seed)
  common = set.intersection(*per_lr.values()) if per_lr else set()
  extra = sorted(set().union(*per_lr.values()) - common, key=repr) if per_lr else []
  if not common or not extra:
    return list(runs), []
  return [r for r in runs if r.seed in common], extra


def largest_stable_lr(runs: Sequence[Run], lr_field: str) -> Optional[float]:
  """The largest LR of the grid up to which training is stable: every run (seed) finished
  healthily at it and at every grid LR from the best one (lowest mean clipped final loss) up
  to it; None when the best LR's runs already fail. Counted up from the best LR, not from the
  grid's smallest: below it a short run learns slowly, and one that ends near the unigram
  entropy there is slow, not unstable; and a lucky set of seeds above an LR where training
  failed does not count as stable."""
  means = mean_clipped_loss_per_lr(runs, lr_field)
  if not means:
    return None
  best = min(means, key=means.get)
  largest = None
  for lr in sorted(lr for lr in means if lr >= best):
    if not all(r.status == "finished" for r in runs if r.overrides[lr_field] == lr):
      break
    largest = lr
  return largest


def lr_sensitivity_table(runs: Sequence[Run], lr_field: str, fields: Sequence[str],
                         confirmatory: Sequence[int] = ()) -> list[str]:
  """Markdown lines: per value of the other swept fields, the best learning rate, the largest
  one at which every seed trained healthily, and the LR sensitivity of Wortsman et al. (2023):
  the mean over the grid of (final eval loss, clipped at the initial loss; a diverged run
  counts as the initial loss) minus the best grid point's, each grid point a mean over seeds.
  Incomplete or missing runs are left out, and a setting's LRs are compared over the seeds
  that ended at every one of them (`seeds_every_lr_ran`; a line names any seed left out). With
  `confirmatory` seeds in, each setting's row per seed set (`seed_sets`), the verdict's
  first."""
  others = [f for f in fields if f != lr_field]
  sets = seed_sets(runs, confirmatory)
  split = len(sets) > 1
  apart = SETS_APART if split else ""
  lines = ["## Learning-rate sweep", "",
           "LR sensitivity (Wortsman et al. 2023): mean over the LR grid of min(final eval loss, "
           "initial loss ln V) minus the best LR's; diverged runs count as the initial loss. "
           "Largest stable LR: the largest such that at it and at every grid LR from the best "
           f"one up to it every seed finished (neither diverged nor collapsed).{apart}", "",
           "| " + " | ".join((["seeds"] if split else []) + others + [
               "best LR", "best eval loss", "largest stable LR", "LR sensitivity",
               "grid points"]) + " |",
           "|" + "---|" * (len(others) + 5 + split)]
  by_set = [(label, _by_other(members, others)) for label, members in sets]
  edges, partial, gridded = [], [], 0
  for key in _by_other(runs, others):
    for label, settings in by_set:
      row = _lr_row(settings.get(key, []), lr_field)
      if row is None:
        continue
      cells, best_lr, grid, extra = row
      where = " / ".join(str(v) for v in key) or "all runs"
      if extra:
        partial.append(f"{where}{f', seeds {label}' if split else ''} (seed"
                       f"{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} left out)")
      lines.append("| " + " | ".join(([label] if split else []) + [str(v) for v in key] + cells)
                   + " |")
      if len(grid) >= 3:  # an optimum among two LRs is at an edge by construction
        gridded += 1
        if best_lr in (min(grid), max(grid)):
          side = "smallest" if best_lr == min(grid) else "largest"
          edges.append(f"{where}{f', seeds {label}' if split else ''} ({best_lr:g}, its "
                       f"{side})")
  if partial:
    lines += ["", "Compared over the seeds that ran every LR of the setting (a seed run at some "
              "of its LRs only would compare seed sets, not LRs): " + "; ".join(partial) + "."]
  if edges:
    lines += ["", "Best LR at the edge of the LR values that setting ran, so not located (a "
              "wider grid could find a better one): " + "; ".join(edges) + "."]
  elif gridded:
    what = "row" if split else "setting"  # split: a setting's seed set each
    lines += ["", f"Every best LR lies inside the LR values its {what} ran ({gridded} "
              f"{what}{'s' if gridded > 1 else ''} of 3 LRs or more)."]
  return lines


def _by_other(runs: Sequence[Run], others: Sequence[str]) -> dict[tuple, list[Run]]:
  """The runs by their values of the swept fields but the LR, in first-seen order."""
  out: dict[tuple, list[Run]] = {}
  for r in runs:
    out.setdefault(tuple(r.overrides.get(f) for f in others), []).append(r)
  return out


def _lr_row(members: Sequence[Run], lr_field: str):
  """(the row's cells after the setting, its best LR, its grid {LR: mean clipped loss}, the
  seeds left out as `seeds_every_lr_ran` says) of one setting's runs; None when none of them
  has a final loss."""
  members, extra = seeds_every_lr_ran(members, lr_field)
  means = mean_clipped_loss_per_lr(members, lr_field)
  if not means:
    return None
  stable = largest_stable_lr(members, lr_field)
  best_lr = min(means, key=means.get)
  sensitivity = float(np.mean([m - means[best_lr] for m in means.values()]))
  cells = [f"{best_lr:g}", f"{means[best_lr]:.4f}", f"{stable:g}" if stable else "none",
           f"{sensitivity:.4f}", str(len(means))]
  return cells, best_lr, means, extra
