"""Study 7: activations under training: residual RMS per layer and attention entropy across LRs.

  python launch.py --mode=sweep --sweep=experiments/activations.py:cpu \
      --sweep_dir=runs/studies/activations --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

The cpu preset is exactly lr_sensitivity's points (every placement x the LR grid x 3 seeds,
with warm-up), so with `--reuse_runs_from` every run is linked and nothing trains: this study
reads what those runs' per-layer diagnostics recorded during training (residual-stream RMS after
each block, attention entropy and max logit), at the last diagnostics step.
"""

import math
import os

from experiments import analysis as a
from experiments import lr_sensitivity
from experiments.presets import LRS
from transformer.report.robustness import Threshold

CLAIM = ("Kim et al. 2025 (Peri-LN): Pre-LN is prone to 'massive activations' (hidden-state "
         "variance can grow exponentially during training), while Peri-LN keeps the growth of "
         "hidden-state variance linear and balanced.")
FIGURE = "activations.png"
RMS = "residual_rms"
ENTROPY = "self_attention/attn_entropy"
LOGIT = "self_attention/attn_max_logit"
# Placements whose residual stream after a block is a LayerNorm output (its RMS is set by the
# norm's learned scale, not by the stream's growth): shown, not compared with pre and peri.
NORMED = ("post", "deepnorm", "admin")
# The grid's lowest LRs left out of the call. 0: every LR is judged, as fixed before the runs;
# its neighbours (robustness) leave out lr_sensitivity's under-trained lowest LRs.
LOW = 0


def get_sweep(size: str = "cpu"):
  return lr_sensitivity.get_sweep(size)


def _last(run, metric):
  rows = a.diagnostics_rows(run)
  return a.profile(rows[-1], metric) if rows else {}


def measure(runs):
  placements = list(dict.fromkeys(r.overrides[a.PLACEMENT] for r in runs))
  lrs = sorted({r.overrides[a.LR] for r in runs})
  cells = {}
  for p in placements:
    for lr in lrs:
      mine = a.select(runs, model__norm_placement=p, optim__learning_rate=lr)
      rms = [_last(r, RMS) for r in mine]
      ent = [_last(r, ENTROPY) for r in mine]
      logit = [_last(r, LOGIT) for r in mine]
      cells[(p, lr)] = {
          "last_rms": [q[max(q)] for q in rms if q],
          "growth": [q[max(q)] / q[min(q)] for q in rms if q and q[min(q)] > 0],
          "entropy0": [q[min(q)] for q in ent if q],
          "logit": [max(q.values()) for q in logit if q],
          "status": a.status_counts(mine)}
  return placements, lrs, cells


def _above(x, y):
  """x's 95% interval (over seeds, on the log scale) lies entirely above y's."""
  if len(x) < 2 or len(y) < 2:
    return False
  return a.log_ci(x)[0] > a.log_ci(y)[2]


def _g(values):
  if not values:
    return "-"
  lo, mid, hi = a.log_ci(values)
  return f"{mid:.3g} [{lo:.3g}, {hi:.3g}]" if math.isfinite(lo) else f"{mid:.3g}"


def analyze(runs):
  placements, lrs, cells = measure(runs)
  step = max((a.diagnostics_rows(r)[-1]["step"] for r in runs if a.diagnostics_rows(r)),
             default=None)
  lines = [a.protocol(runs), "",
           f"Read at the last diagnostics step (step {step}). RMS of the residual stream after "
           "the last block (geometric mean over seeds [95% interval over seeds, log scale]), "
           "at each LR:", "",
           *a.table(["placement", *(f"LR {lr:g}" for lr in lrs)],
                    [[p, *(_g(cells[(p, lr)]["last_rms"]) for lr in lrs)] for p in placements]),
           "", "Growth through depth, last-block / first-block residual RMS:", "",
           *a.table(["placement", *(f"LR {lr:g}" for lr in lrs)],
                    [[p, *(_g(cells[(p, lr)]["growth"]) for lr in lrs)] for p in placements]),
           "", "Attention entropy of layer 0 (nats, mean ± 95% CI over seeds) / largest "
           "attention logit over layers:", "",
           *a.table(["placement", *(f"LR {lr:g}" for lr in lrs)],
                    [[p, *(f"{a.ci(cells[(p, lr)]['entropy0'])} / "
                           f"{_g(cells[(p, lr)]['logit'])}" for lr in lrs)]
                     for p in placements]), "",
           f"For {', '.join(p for p in NORMED if p in placements)} the stream after a block is a "
           "LayerNorm output, so its RMS is the norm's learned scale, not a growing stream: "
           "they are shown, not judged. The claim is judged on pre against peri.", ""]
  if not {"pre", "peri"} <= set(placements):
    lines.append(a.verdict(None, "pre-norm or Peri-LN runs are missing."))
    return lines
  judged = lrs[LOW:]
  larger = [lr for lr in judged if _above(cells[("pre", lr)]["last_rms"],
                                          cells[("peri", lr)]["last_rms"])]
  smaller = [lr for lr in judged if _above(cells[("peri", lr)]["last_rms"],
                                           cells[("pre", lr)]["last_rms"])]
  top = lrs[-1]
  pre, peri = cells[("pre", top)]["last_rms"], cells[("peri", top)]["last_rms"]
  why = (f"At LR {top:g} the last block's residual RMS is {_g(pre)} for pre-norm against "
         f"{_g(peri)} for Peri-LN. Pre-norm's is larger with disjoint 95% intervals at LR "
         + (", ".join(f"{lr:g}" for lr in larger) or "none")
         + (f"; smaller at {', '.join(f'{lr:g}' for lr in smaller)}" if smaller else "")
         + (f" (the {LOW} lowest LRs not judged)" if LOW else "") + ". ")
  if top in larger and not smaller:
    ok = True if len(larger) >= len(judged) // 2 else "partly"
    steps = max(r.num_steps for r in runs)
    reads = max(len(a.diagnostics_rows(r)) for r in runs)
    why += ("Whether the growth is exponential in training time is not tested: the runs are "
            f"{steps} steps and the diagnostics {reads} points.")
  else:
    ok = False if smaller else None
    if smaller and larger:
      why += ("The rule, fixed before the runs, reads pre-norm's stream being the smaller at any "
              "judged LR as against the claim; `## Robustness` gives the call without the lowest "
              "LRs.")
  lines.append(a.verdict(ok, why))
  lines += ["", f"LR {top:g} is the grid's largest and pre-norm still trains there: how the "
            "activations behave where pre-norm fails is not measured (add LR 0.3, see "
            "lr_sensitivity)."]
  return lines


def figures(runs, sweep_dir):
  """`activations.png`: the last block's residual RMS and layer 0's attention entropy against
  the LR, one line per placement, every seed's value drawn."""
  from transformer.report import figures as report_figures
  placements, lrs, cells = measure(runs)
  plt = report_figures.load_pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.6))
  colors = plt.get_cmap("tab10").colors
  for i, p in enumerate(placements):
    c = colors[i % len(colors)]
    for ax, key in ((axes[0], "last_rms"), (axes[1], "entropy0")):
      xs, ms = [], []
      for lr in lrs:
        vals = cells[(p, lr)][key]
        ax.plot([lr] * len(vals), vals, "o", ms=3, color=c, alpha=0.5)
        if vals:
          xs.append(lr)
          ms.append(math.exp(sum(map(math.log, vals)) / len(vals)) if key == "last_rms"
                    else sum(vals) / len(vals))
      ax.plot(xs, ms, "-", color=c, label=p + (" (normed stream)" if p in NORMED else ""))
  axes[0].set(xscale="log", yscale="log", xlabel="peak LR", ylabel="RMS",
              title="residual RMS after the last block")
  axes[1].set(xscale="log", xlabel="peak LR", ylabel="nats", title="attention entropy, layer 0")
  for ax in axes:
    ax.grid(alpha=0.3, which="both")
  axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
  fig.tight_layout()
  report_figures.save_png(plt, fig, os.path.join(sweep_dir, FIGURE), dpi=90)
  return [("Residual RMS after the last block and layer-0 attention entropy at the last "
           "diagnostics step against the LR (dots: seeds; lines: geometric / arithmetic mean)",
           FIGURE)]


def summarize(runs):
  placements, lrs, cells = measure(runs)
  lines = analyze(runs)
  word, said = a.verdict_of(lines)
  top = lrs[-1]
  return {"verdict": word,
          "numbers": [said.split(". Whether")[0].rstrip(".") + "."],
          "figure": FIGURE,
          "placements": {p: {f"last-block residual RMS @ LR {top:g}":
                                 _g(cells[(p, top)]["last_rms"]),
                             f"max attention logit @ LR {top:g}": _g(cells[(p, top)]["logit"]),
                             f"layer-0 attention entropy @ LR {top:g}":
                                 a.ci(cells[(p, top)]["entropy0"])}
                         for p in placements}}


assert LRS  # the grid is lr_sensitivity's (presets.LRS)

# What the verdict's call depends on, recomputed at its neighbours in the report's `## Robustness`
# (transformer/report/robustness.py; the shared ones are defined in experiments/analysis.py).
THRESHOLDS = (a.CONFIDENCE,
              Threshold("lowest LRs left out of the call", None, "LOW", (1, 2)))
THRESHOLDS_NOT_READ = {a.COLLAPSE.label: "the call reads diagnostics of every run, "
                       "whatever its status"}
