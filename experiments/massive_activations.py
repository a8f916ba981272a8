"""Massive activations over training (issue 46): the question the Peri-LN paper asks.

  python launch.py --mode=sweep --sweep=experiments/massive_activations.py:cpu \
      --sweep_dir=runs/studies/massive_activations --parallel=2

`activations` compared the residual stream's RMS at the end of training; the paper's claim is
about *massive* activations: a few hidden-state entries far larger than the rest. Here every
block records the largest |h| of the residual stream after it and the median |h| (over batch,
positions and features; `residual_max_abs`, `residual_median_abs`), every 50 steps. Pre- and
Peri-LN (and post-norm beside them), each from its lr_sensitivity best LR up (pre and peri:
3e-3, 1e-2, 3e-2; post: 1e-3 up), 3 seeds, the protocol's model, budget and warm-up.

The call (`experiments/paired.py`'s rule, fixed before these runs): per seed and LR, the peak
over training and layers of max |h| / median |h|; the statistic is ln(pre's peak ratio) minus
ln(peri's), paired by seed, at every LR both ran. It *agrees* when at every such LR the 95%
interval lies above ln 2 (pre-norm's peak ratio at least twice Peri-LN's), *disagrees* when at
every LR it lies below ln 2, and is *inconclusive* otherwise.
"""

import math

from experiments import analysis as a
from experiments import paired
from experiments.presets import PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.report.robustness import Threshold
from transformer.sweep import preset, product

CLAIM = ("Kim et al. 2025 (Peri-LN): Pre-LN is prone to 'massive activations' (hidden-state "
         "entries far larger than the rest, growing during training), while Peri-LN keeps the "
         "hidden states balanced. Measured as the peak over training and layers of the largest "
         "|h| against the median |h| (Sun et al. 2024's massive activations).")
LRS = {"pre": [3e-3, 1e-2, 3e-2], "peri": [3e-3, 1e-2, 3e-2], "post": [1e-3, 3e-3, 1e-2, 3e-2]}
DIAGNOSTICS_EVERY = 50
MARGIN = math.log(2.0)  # ln of the ratio of peak ratios: pre's at least twice peri's
MAX_ABS, MEDIAN_ABS = "residual_max_abs", "residual_median_abs"


def get_sweep(size: str = "cpu"):
  """Pre and peri first (the judged pair), then post; each from its best LR up."""
  base = preset(PROTOCOL_SIZES, size)
  fixed = {**protocol(size), "train.diagnostics_every": DIAGNOSTICS_EVERY}
  return [point for p in ("pre", "peri", "post") for point in product(
      base, [fixed], {"model.norm_placement": [p]}, {"optim.learning_rate": LRS[p]},
      {"seed": PROTOCOL_SEEDS})]


def ratios(run) -> list[tuple[int, float]]:
  """`[(step, max over layers of max|h| / median|h|)]` over the run's diagnostics rows."""
  out = []
  for row in a.diagnostics_rows(run):
    top, mid = a.profile(row, MAX_ABS), a.profile(row, MEDIAN_ABS)
    values = [top[i] / mid[i] for i in top if mid.get(i, 0) > 0]
    if values:
      out.append((row["step"], max(values)))
  return out


def peak_log_ratio(runs) -> dict:
  """`{seed: ln(peak ratio over training)}` of one setting's runs (the seed left out dropped)."""
  return {r.seed: math.log(max(v for _, v in ratios(r))) for r in runs
          if ratios(r) and r.seed != paired.LEFT_OUT_SEED}


def measure(runs) -> dict:
  """`{(placement, lr): {seed: ln peak ratio}}` and, at each LR pre and peri share, the call's
  difference."""
  cells = {(p, lr): peak_log_ratio(a.select(runs, model__norm_placement=p,
                                            optim__learning_rate=lr))
           for p in LRS for lr in LRS[p]}
  shared = [lr for lr in LRS["pre"] if cells.get(("pre", lr)) and cells.get(("peri", lr))]
  diffs = {lr: paired.difference(f"ln(pre / peri peak ratio) at LR {lr:g}", cells[("pre", lr)],
                                 cells[("peri", lr)], unit="") for lr in shared}
  return {"cells": cells, "diffs": diffs}


def _call(m):
  words = [paired.judge(d, MARGIN) for d in m["diffs"].values()]
  if not words:
    return None, "no LR has both pre- and peri-norm runs with the diagnostics."
  agrees = True if all(w is True for w in words) else (
      False if all(w is False for w in words) else None)
  said = "; ".join(paired.call_text(d, round(MARGIN, 3)) for d in m["diffs"].values())
  return agrees, said


def analyze(runs):
  m = measure(runs)
  rows = [[p, a.fmt_lr(lr), a.ci(math.exp(v) for v in cell.values()), len(cell)]
          for (p, lr), cell in m["cells"].items() if cell]
  lines = [a.protocol(runs), "",
           "Peak over training (every 50 steps) and layers of max |h| / median |h| of the "
           "residual stream after each block, mean ± 95% CI over seeds:", "",
           *a.table(["placement", "LR", "peak max/median", "seeds"], rows), ""]
  agrees, said = _call(m)
  return lines + [a.verdict(agrees, f"The call, fixed before the runs (pre's peak ratio at least "
                            f"twice peri's at every LR from the best up): {said}.")]


FIGURE = "ratio_over_training.png"


def _ratio_figure(plt, runs):
  """One panel per LR pre and peri share: per placement the mean over seeds of the largest
  max|h| / median|h| over layers at each diagnostics step (log scale), each seed faint."""
  lrs = LRS["pre"]
  fig, axes = plt.subplots(1, len(lrs), figsize=(4.0 * len(lrs), 3.2), sharey=True,
                           squeeze=False)
  for ax, lr in zip(axes[0], lrs):
    for i, p in enumerate(("pre", "peri", "post")):
      series = [dict(ratios(r)) for r in a.select(runs, model__norm_placement=p,
                                                  optim__learning_rate=lr)]
      series = [s for s in series if s]
      for s in series:
        ax.plot(list(s), list(s.values()), color=f"C{i}", alpha=0.25, lw=0.8)
      steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
      if steps:
        ax.plot(steps, [math.exp(sum(math.log(s[t]) for s in series) / len(series))
                        for t in steps], color=f"C{i}", lw=1.8, label=p)
    ax.set_yscale("log")
    ax.set_title(f"LR {lr:g}")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("max |h| / median |h| (largest layer)")
  axes[0][-1].legend(fontsize=8)
  fig.tight_layout()
  return fig


def figures(runs, sweep_dir):
  """`ratio_over_training.png`: the ratio the call reads, over training."""
  import os
  from transformer.report import figures as report_figures
  if not runs:
    return []
  plt = report_figures.load_pyplot()
  report_figures.save_png(plt, _ratio_figure(plt, runs), os.path.join(sweep_dir, FIGURE),
                          dpi=90)
  return [("Largest max |h| / median |h| over layers at each diagnostics step (thick: geometric "
           "mean over seeds; faint: each seed)", FIGURE)]


def summarize(runs):
  lines = analyze(runs)
  word, _ = a.verdict_of(lines)
  m = measure(runs)
  return {"verdict": word, "numbers": [d.text() for d in m["diffs"].values()],
          "figure": FIGURE, "placements": {}}


THRESHOLDS = (a.CONFIDENCE,
              Threshold("margin (ln of the ratio)", None, "MARGIN",
                        (math.log(1.5), math.log(4.0)), shown=("ln 1.5", "ln 4", "ln 2")),
              paired.LEAVE_ONE_OUT)
THRESHOLDS_NOT_READ = {a.COLLAPSE.label: "the call reads activations of every run, not its "
                       "status"}
