"""Norm type x placement (issue 49, atlas question 3): do RMSNorm and DyT behave in post- and
peri-norm as they do in pre-norm?

  python launch.py --mode=sweep --sweep=experiments/norm_type_placement.py:cpu \
      --sweep_dir=runs/studies/norm_type_placement --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity,experiments/results/norms

DyT's paper tests pre-norm only; `norms` measured RMSNorm and DyT under pre-norm. Here LayerNorm,
RMSNorm and DyT (alpha_0 0.5, the paper's default outside LLMs) in post-, peri- and pre-norm,
over the protocol's LR grid, 3 seeds. The LayerNorm runs are lr_sensitivity's, pre-norm's
RMSNorm and DyT runs are norms' (linked): 60 runs are new (RMSNorm and DyT x post and peri).

The call (`experiments/paired.py`), fixed before the new runs. A norm's cost in a placement is
its clipped final eval loss minus LayerNorm's in that placement, each at its own best LR,
paired by seed. The statistic is the interaction: per seed, the cost in post- (or peri-) norm
minus the cost in pre-norm, for RMSNorm and DyT in post and peri (4 differences). The study
*agrees* that a norm type's cost does not depend on the placement when all four 95% intervals
lie within +- `LOSS_MARGIN` (0.05 nats/token), *disagrees* when any lies wholly outside it, and
is *inconclusive* otherwise. The verdict sentence gives each interaction's interval (issue 68).
"""

from __future__ import annotations

import math
from typing import Optional

from experiments import analysis as a
from experiments import atlas, paired
from experiments.presets import (PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS,
                                 PROTOCOL_SIZES, protocol)
from transformer.sweep import preset, product

CLAIM = ("Open question (issue 49): a norm type's cost against LayerNorm is the same in post- "
         "and peri-norm as in pre-norm, for RMSNorm and DyT. Zhu et al. 2025 (DyT) test DyT "
         "under pre-norm only.")
ATLAS = "Does a norm type's cost against LayerNorm depend on the placement?"
PLACEMENTS = ["post", "peri", "pre"]
NORMS = {"layernorm": {}, "rmsnorm": {"model.norm": "rmsnorm"},
         "dyt": {"model.norm": "dyt", "model.dyt_alpha_init": 0.5}}
LOSS_MARGIN = 0.05  # nats/token: an interaction smaller than this is no interaction
FIGURE = "loss_heatmap.webp"
NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "dyt": "DyT"}


def get_sweep(size: str = "cpu"):
  """The new runs first (RMSNorm and DyT in post and peri), then the linked ones (LayerNorm
  everywhere, RMSNorm and DyT in pre-norm)."""
  base = preset(PROTOCOL_SIZES, size)
  order = [(p, n) for p in ("post", "peri") for n in ("rmsnorm", "dyt")]
  order += [(p, "layernorm") for p in PLACEMENTS] + [("pre", "rmsnorm"), ("pre", "dyt")]
  return [point for p, n in order for point in product(
      base, [protocol(size)], [{"model.norm_placement": p, **NORMS[n]}],
      {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})]


def norm_of(run) -> str:
  return run.overrides.get("model.norm", "layernorm")


def within(d: paired.Difference, margin: float) -> Optional[bool]:
  """True when the interval lies within +- margin, False when wholly outside it, None when it
  crosses an edge or has fewer than 2 seeds."""
  mean, half = d.interval
  if len(d.per_seed) < 2 or math.isnan(half):
    return None
  if abs(mean) + half <= margin:
    return True
  if mean - half > margin or mean + half < -margin:
    return False
  return None


def measure(runs) -> dict:
  """Per (placement, norm) the LR read and `{seed: loss}`; per (placement, norm) the cost
  against LayerNorm; per (norm, placement) the interaction against pre-norm."""
  lrs = {r.overrides[a.LR] for r in runs}
  matched = next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None)
  read = {(p, n): paired.read([r for r in runs if r.overrides[a.PLACEMENT] == p
                               and norm_of(r) == n], matched)
          for p in PLACEMENTS for n in NORMS}
  cost = {(p, n): paired.difference(f"{n} minus LayerNorm in {p}-norm", read[(p, n)][1],
                                    read[(p, "layernorm")][1])
          for p in PLACEMENTS for n in NORMS if n != "layernorm"}
  inter = {(n, p): paired.difference(f"{n}'s cost in {p}-norm minus in pre-norm",
                                     cost[(p, n)].per_seed, cost[("pre", n)].per_seed)
           for n in ("rmsnorm", "dyt") for p in ("post", "peri")}
  return {"read": read, "cost": cost, "inter": inter}


def init_rms(runs) -> str:
  """The per-layer residual RMS at the first diagnostics step (initialization), mean over
  `runs`, as '0.288, 0.094, ...' from layer 0 up; 'not recorded' without diagnostics."""
  profiles = [a.at_init(r, "residual_rms") for r in runs]
  profiles = [q for q in profiles if q]
  if not profiles:
    return "not recorded"
  return ", ".join(f"{sum(q[i] for q in profiles) / len(profiles):.3g}"
                   for i in sorted(profiles[0]))


def notes(runs, m) -> list[str]:
  """Bullets for the settings the grid does not locate: the LR read at the grid's edge, and
  the settings where every run collapsed (their cost is the cost of not training)."""
  out = []
  for p in PLACEMENTS:
    layernorm = [r for r in runs if r.overrides[a.PLACEMENT] == p and norm_of(r) == "layernorm"]
    for n in NORMS:
      mine = [r for r in runs if r.overrides[a.PLACEMENT] == p and norm_of(r) == n]
      if mine and all(r.status == "collapsed" for r in mine):
        out.append(f"- {p}, {n}: every run collapsed, at every LR of the grid (final eval "
                   "loss at the unigram level), so its cost is the cost of not training. At "
                   f"initialization its residual stream's RMS after each layer is "
                   f"{init_rms(mine)}; with LayerNorm in {p}-norm, {init_rms(layernorm)} "
                   "(mean over its runs).")
      elif note := a.edge_note(f"{p}, {n}: the LR read", m["read"][(p, n)][0], mine):
        out.append(f"- {note}")
  return out + [""] if out else []


def analyze(runs):
  m = measure(runs)
  rows = [[p, n, a.fmt_lr(m["read"][(p, n)][0]), a.ci(list(m["read"][(p, n)][1].values())),
           "-" if n == "layernorm" else m["cost"][(p, n)].text().split(": ", 1)[1]]
          for p in PLACEMENTS for n in NORMS]
  lines = [a.protocol(runs), "",
           "Per placement and norm: the LR read (its own best LR of the grid), the clipped final "
           "eval loss there (nats/token, mean ± 95% CI over seeds) and its cost against "
           "LayerNorm in the same placement (paired by seed):", "",
           *a.table(["placement", "norm", "LR read", "loss there", "minus LayerNorm"], rows),
           "", *notes(runs, m), "The interaction, paired by seed:", ""]
  words = {}
  for (n, p), d in m["inter"].items():
    words[(n, p)] = within(d, LOSS_MARGIN)
    where = {True: "within", False: "outside", None: "across the edge of"}[words[(n, p)]]
    lines.append(f"- {d.text()}; its 95% interval lies {where} ± {LOSS_MARGIN:g}")
  values = list(words.values())
  agrees = (True if all(w is True for w in values) else
            False if any(w is False for w in values) else None)
  return lines + ["", a.verdict(agrees, answer(words, m["inter"]))]


def answer(words: dict, inter: dict) -> str:
  """The one-sentence answer, from the numbers: per norm type, the placements where its cost
  against LayerNorm is pre-norm's (interaction within the margin), differs (outside) or is not
  resolved, each with its interaction's interval (`inter`: `{(norm, placement): Difference}`)."""
  parts = []
  for n in ("rmsnorm", "dyt"):
    by = {w: [p for (m, p), v in words.items() if m == n and v is w] for w in (True, False, None)}
    where = lambda ps, n=n: " and ".join(f"{p}-norm ({inter[(n, p)].estimate()})" for p in ps)
    said = [f"the same as in pre-norm in {where(by[True])}"] if by[True] else []
    said += [f"different in {where(by[False])}"] if by[False] else []
    said += [f"not resolved in {where(by[None])}"] if by[None] else []
    parts.append(f"{NAMES[n]}'s cost against LayerNorm is " + ", ".join(said))
  return ("; ".join(parts) + f" (the interaction: the cost there minus in pre-norm, nats/token, "
          f"paired by seed, against ± {LOSS_MARGIN:g}).")


def figures(runs, sweep_dir):
  """`loss_heatmap.webp`: (placement, norm) x LR, the mean clipped final loss."""
  keys = [(p, n) for p in PLACEMENTS for n in NORMS]
  return atlas.loss_heatmap_figure(runs, sweep_dir, FIGURE,
                                   lambda r: (r.overrides[a.PLACEMENT], norm_of(r)), keys,
                                   [f"{p}, {n}" for p, n in keys])


def summarize(runs):
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS, "figure": FIGURE, "placements": {},
          "numbers": [d.text() for d in m["inter"].values()]}


THRESHOLDS = paired.margin_thresholds((0.03, 0.1))
THRESHOLDS_NOT_READ = paired.NOT_READ

REGISTRATION = {
    "the four interactions (a norm's cost in post- or peri-norm minus in pre-norm) within "
    "± 0.05 nats/token": "pre-registered at 229ef57, the commit that added this file, before "
                         "its 60 new runs"}
