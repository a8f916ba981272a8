"""Massive activations over training (issue 46; its call replaced in issue 68): the question
the Peri-LN paper asks.

  python launch.py --mode=sweep --sweep=experiments/massive_activations.py:cpu \
      --sweep_dir=runs/studies/massive_activations --parallel=2

The claim is about *massive* activations: hidden-state entries far larger than the rest. Every
block records the largest |h| of the residual stream after it and the median |h| (over batch,
positions and features; `residual_max_abs`, `residual_median_abs`), every 50 steps. Pre- and
Peri-LN (and post-norm beside them), each from its lr_sensitivity best LR up (pre and peri:
3e-3, 1e-2, 3e-2; post: 1e-3 up), the protocol's model, budget and warm-up.

Seeds 0, 1, 2 (all three placements) are the exploratory set; seeds 3, 4, 5 (pre and peri
only, the judged pair: 18 runs) are the confirmatory set, added in issue 68 because the call
below was chosen after seeing seeds 0-2.

The call (issue 68, `paired.py`'s rule), fixed at 0eff39e before any run of seeds 3-5, read
on them only: per seed and LR, the peak over training and layers of max |h| (a magnitude, as
the claim is); the statistic is ln(pre's peak max|h|) minus ln(peri's), paired by seed, at
every LR both ran. At each LR pre-norm's stream is *more than twice* Peri-LN's when the 95%
interval lies above ln 2, *less than twice* when below, *not resolved* otherwise. The claim
*agrees* when it is more than twice at every LR, *partly agrees* when at some LRs only,
*disagrees* when it is less than twice at every LR, and is *inconclusive* otherwise. Beside it,
as description: the count of Sun et al.'s outliers (max|h| at least 100 x the median |h|, at a
layer and step) and the exploratory seeds' value of the statistic.

The earlier call (issue 46, pre-registered at f4d3bd4): the same difference on the peak ratio
max|h| / median|h|. It is scale-free, so it divides out the magnitude the claim is about, and it
is largest for post-norm runs that collapsed, whose stream is tiny; it stays as description.
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
         "|h| of the residual stream, pre-norm's against Peri-LN's.")
LRS = {"pre": [3e-3, 1e-2, 3e-2], "peri": [3e-3, 1e-2, 3e-2], "post": [1e-3, 3e-3, 1e-2, 3e-2]}
EXPLORATORY_SEEDS = list(PROTOCOL_SEEDS)  # 0, 1, 2: the runs the call's statistic was chosen on
CONFIRMATORY_SEEDS = [3, 4, 5]  # the call's seeds, fixed before their runs (issue 68)
SEEDS = {"pre": EXPLORATORY_SEEDS + CONFIRMATORY_SEEDS,
         "peri": EXPLORATORY_SEEDS + CONFIRMATORY_SEEDS, "post": EXPLORATORY_SEEDS}
DIAGNOSTICS_EVERY = 50
MARGIN = math.log(2.0)  # ln of the ratio of peak max|h|: pre's at least twice peri's
OUTLIER_RATIO = 100.0  # Sun et al. 2024: a massive activation is ~100x+ the median |h|
MAX_ABS, MEDIAN_ABS = "residual_max_abs", "residual_median_abs"
CALL = "ln(pre / peri peak max|h|), seeds 3-5"


def get_sweep(size: str = "cpu"):
  """Pre and peri first (the judged pair, seeds 0-5), then post (seeds 0-2); each from its
  best LR up."""
  base = preset(PROTOCOL_SIZES, size)
  fixed = {**protocol(size), "train.diagnostics_every": DIAGNOSTICS_EVERY}
  return [point for p in ("pre", "peri", "post") for point in product(
      base, [fixed], {"model.norm_placement": [p]}, {"optim.learning_rate": LRS[p]},
      {"seed": SEEDS[p]})]


def _layers(row) -> list[tuple[float, float]]:
  """`[(max|h|, median|h|)]` per layer of one diagnostics row."""
  top, mid = a.profile(row, MAX_ABS), a.profile(row, MEDIAN_ABS)
  return [(top[i], mid[i]) for i in top if i in mid]


def ratios(run) -> list[tuple[int, float]]:
  """`[(step, max over layers of max|h| / median|h|)]` over the run's diagnostics rows."""
  out = []
  for row in a.diagnostics_rows(run):
    values = [top / mid for top, mid in _layers(row) if mid > 0]
    if values:
      out.append((row["step"], max(values)))
  return out


def max_abs(run) -> list[tuple[int, float]]:
  """`[(step, max over layers of max|h|)]` over the run's diagnostics rows."""
  return [(row["step"], max(a.profile(row, MAX_ABS).values()))
          for row in a.diagnostics_rows(run) if a.profile(row, MAX_ABS)]


def outliers(run) -> int:
  """How many (layer, diagnostics step) pairs have max|h| >= OUTLIER_RATIO x median|h|."""
  return sum(1 for row in a.diagnostics_rows(run) for top, mid in _layers(row)
             if top >= OUTLIER_RATIO * mid)


def peak_log(runs, series, seeds) -> dict:
  """`{seed: ln(peak over training of series(run))}` of one setting's runs whose seed is in
  `seeds`."""
  return {r.seed: math.log(max(v for _, v in series(r))) for r in runs
          if r.seed in seeds and series(r)}


def _cell(runs, p, lr):
  return a.select(runs, model__norm_placement=p, optim__learning_rate=lr)


def _pairs(runs, series, seeds, label) -> dict:
  """`{lr: pre minus peri of ln peak series, paired by seed}` at each LR both have seeds of
  `seeds` at."""
  out = {}
  for lr in LRS["pre"]:
    pre, peri = (peak_log(_cell(runs, p, lr), series, seeds) for p in ("pre", "peri"))
    if set(pre) & set(peri):
      out[lr] = paired.difference(f"{label} at LR {lr:g}", pre, peri, unit="")
  return out


def measure(runs) -> dict:
  """The call (`call`: on the confirmatory seeds), the same statistic on the exploratory seeds
  (`explore`), and the retired ratio's on them (`old`), each `{lr: Difference}`."""
  return {"call": _pairs(runs, max_abs, CONFIRMATORY_SEEDS, "ln(pre / peri peak max|h|)"),
          "explore": _pairs(runs, max_abs, EXPLORATORY_SEEDS, "ln(pre / peri peak max|h|)"),
          "old": _pairs(runs, ratios, EXPLORATORY_SEEDS,
                        "ln(pre / peri peak max|h| / median|h|)")}


WORDS = {True: "more than twice", False: "less than twice", None: "not resolved against twice"}


def found(diffs: dict, describe: bool = True) -> tuple:
  """(the call, the sentence saying per LR what was found) of `{lr: Difference}`; `describe`
  False for differences the verdict does not read (`paired.judge`)."""
  words = {lr: paired.judge(d, MARGIN, describe) for lr, d in diffs.items()}
  values = list(words.values())
  agrees = (True if all(w is True for w in values) else
            False if all(w is False for w in values) else
            "partly" if any(w is True for w in values) else None)
  groups = [f"{WORDS[w]} Peri-LN's at LR "
            + ", ".join(a.fmt_lr(lr) for lr in words if words[lr] is w)
            for w in (True, False, None) if w in values]
  said = "; ".join(f"{d.text()}, interval {_where(d)} ln 2" for d in diffs.values())
  return agrees, f"pre-norm's peak max|h| is {'; '.join(groups)} ({said})"


def _where(d) -> str:
  """Where `d`'s interval lies against ln 2 (read, not described: `found` describes the
  differences the verdict reads)."""
  return {True: "above", False: "below", None: "across"}[paired.judge(d, MARGIN, False)]


def table_rows(runs) -> list[list]:
  """Per placement and LR: seeds, peak max|h| and peak max/median (mean ± 95% CI over seeds),
  runs with a Sun-style outlier, and the runs' statuses."""
  rows = []
  for p in LRS:
    for lr in LRS[p]:
      cell = [r for r in _cell(runs, p, lr) if max_abs(r)]
      if cell:
        rows.append([p, a.fmt_lr(lr), ", ".join(str(r.seed) for r in cell),
                     a.ci(max(v for _, v in max_abs(r)) for r in cell),
                     a.ci(max(v for _, v in ratios(r)) for r in cell),
                     f"{sum(outliers(r) > 0 for r in cell)} of {len(cell)}",
                     a.status_counts(cell)])
  return rows


def _collapsed(runs) -> str:
  """`post-norm at LR 0.01, 0.03`: the cells where every run collapsed, or ''."""
  cells = [(p, lr) for p in LRS for lr in LRS[p]
           if _cell(runs, p, lr) and all(r.status == "collapsed" for r in _cell(runs, p, lr))]
  return "; ".join(f"{p}-norm at LR {', '.join(a.fmt_lr(lr) for q, lr in cells if q == p)}"
                   for p in dict(cells))


def _caveat(runs, m) -> str:
  """The retired ratio, as description."""
  said = "; ".join(f"{d.text()}, interval {_where(d)} ln 2" for d in m["old"].values())
  collapsed = _collapsed(runs)
  return ("Caveat, the earlier call (issue 46, pre-registered at f4d3bd4, retired in issue 68): "
          "pre's peak max|h| / median|h| over peri's on seeds 0-2"
          + (f": {said}." if said else ": no runs.") + " The ratio is scale-free: it divides "
          "out the magnitude the claim is about"
          + (f", and it is largest where every run collapsed ({collapsed}), whose stream is "
             "tiny (its peak max|h| in the table)." if collapsed else "."))


def analyze(runs):
  """The table, the exploratory value, the caveat and the verdict on seeds 3-5."""
  m = measure(runs)
  explore = found(m["explore"], describe=False)[1] if m["explore"] else "no runs"
  lines = [a.protocol(runs), "",
           "Per placement and LR, the peak over training (every 50 steps) and layers of the "
           "residual stream's max |h| and of max |h| / median |h| (mean ± 95% CI over seeds), "
           f"and the runs with a Sun-style outlier (max |h| at least {OUTLIER_RATIO:g} x the "
           "median at some layer and step):", "",
           *a.table(["placement", "LR", "seeds", r"peak max \|h\|", "peak max/median",
                     "outlier runs", "runs"], table_rows(runs)), "",
           f"- Exploratory (seeds 0-2, on which the statistic was chosen; not the call): "
           f"{explore}.", f"- {_caveat(runs, m)}", ""]
  if not m["call"]:
    return lines + [a.verdict(None, "The call on the confirmatory seeds 3-5 is not run yet: no "
                              "LR has pre- and peri-norm runs of seeds 3, 4 or 5.")]
  agrees, said = found(m["call"])
  return lines + [a.verdict(agrees, f"On the confirmatory seeds 3-5, {said}.")]


MAX_FIGURE, RATIO_FIGURE = "max_abs_over_training.webp", "ratio_over_training.webp"


def _series_figure(plt, runs, series, ylabel):
  """One panel per LR pre and peri share: per placement the geometric mean over seeds of
  `series(run)` (a value per diagnostics step) on a log scale, each seed faint."""
  lrs = LRS["pre"]
  fig, axes = plt.subplots(1, len(lrs), figsize=(4.0 * len(lrs), 3.2), sharey=True,
                           squeeze=False)
  for ax, lr in zip(axes[0], lrs):
    for i, p in enumerate(("pre", "peri", "post")):
      curves = [s for s in (dict(series(r)) for r in _cell(runs, p, lr)) if s]
      for s in curves:
        ax.plot(list(s), list(s.values()), color=f"C{i}", alpha=0.25, lw=0.8)
      steps = sorted(set.intersection(*(set(s) for s in curves))) if curves else []
      if steps:
        ax.plot(steps, [math.exp(sum(math.log(s[t]) for s in curves) / len(curves))
                        for t in steps], color=f"C{i}", lw=1.8, label=p)
    ax.set_yscale("log")
    ax.set_title(f"LR {lr:g}")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel(ylabel)
  axes[0][-1].legend(fontsize=8)
  fig.tight_layout()
  return fig


def figures(runs, sweep_dir):
  """`max_abs_over_training.webp` (what the call reads) and `ratio_over_training.webp` (the
  retired ratio), over training."""
  import os
  from transformer.report import figures as report_figures
  if not runs:
    return []
  plt = report_figures.load_pyplot()
  out = []
  for name, series, label, what in (
      (MAX_FIGURE, max_abs, "max |h| (largest layer)", "Largest max |h| (the call's)"),
      (RATIO_FIGURE, ratios, "max |h| / median |h| (largest layer)",
       "Largest max |h| / median |h| (the retired call's)")):
    report_figures.save_figure(plt, _series_figure(plt, runs, series, label),
                            os.path.join(sweep_dir, name), dpi=90)
    out.append((f"{what} over layers at each diagnostics step (thick: geometric mean over "
                "seeds; faint: each seed)", name))
  return out


def summarize(runs):
  lines = analyze(runs)
  word, _ = a.verdict_of(lines)
  m = measure(runs)
  numbers = ([d.text() for d in m["call"].values()] or
             [f"not run yet; exploratory (seeds 0-2) {d.text()}" for d in m["explore"].values()])
  return {"verdict": word, "numbers": numbers, "figure": MAX_FIGURE, "placements": {}}


THRESHOLDS = (a.CONFIDENCE,
              Threshold("margin (ln of the ratio)", None, "MARGIN",
                        (math.log(1.5), math.log(4.0)), shown=("ln 1.5", "ln 4", "ln 2")))
THRESHOLDS_NOT_READ = {a.COLLAPSE.label: "the call reads activations of every run, not its "
                       "status"}
REGISTRATION = {
    CALL: "post hoc: chosen on seeds 0-2 in issue 68, replacing the call pre-registered at "
          "f4d3bd4 (the same difference on the peak max|h| / median|h| ratio, which divides "
          "out the magnitude the claim is about; kept as a caveat, no longer a call); "
          "confirmatory on seeds 3-5, fixed before their runs at 0eff39e, the commit that adds "
          "them to the sweep"}
