"""Is DyT's cost in post-norm an init fact? DyT's alpha_0 in post- and peri-norm (issue 68).

  python launch.py --mode=sweep --sweep=experiments/dyt_alpha.py:cpu \
      --sweep_dir=runs/studies/dyt_alpha --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity,experiments/results/norms,experiments/results/norm_type_placement

norm_type_placement found DyT's cost against LayerNorm larger in post-norm than in pre-norm
(every post-norm DyT run collapsed). With alpha_0 = 0.5 each post-placed DyT, gamma *
tanh(alpha x) + beta with gamma 1 and beta 0 at init, shrinks the stream about 3x per layer
(its residual RMS at init: 0.288 after layer 0 down to 0.0023 after layer 5), so the logits
start near zero: the result may be a fact of the init, not of the placement. Here DyT in post-
and peri-norm at alpha_0 (`model.dyt_alpha_init`) 0.5, 1 and 2, over the protocol's LR grid, 3
seeds, beside LayerNorm in post-, peri- and pre-norm and DyT at 0.5 in pre-norm. New runs: DyT
at alpha_0 1 and 2 in post and peri, 60, post-norm's first (the call reads them: a sweep cut
short has them whole); the other 90 are norm_type_placement's, norms' and lr_sensitivity's
(linked).

The call (`experiments/paired.py`), fixed at c678e28 before any of its new runs (pre-registered;
see REGISTRATION): DyT's cost in a placement is its clipped final eval loss minus LayerNorm's in
that placement, each at its own best LR of the grid, paired by seed. DyT in post-norm is read at
its best alpha_0: the one of 0.5, 1, 2 whose loss at its best LR has the lowest mean over seeds
(every seed ended). The statistic is DyT's cost in post-norm at that alpha_0 minus its cost in
pre-norm (alpha_0 0.5, norms' runs), per seed: norm_type_placement's interaction re-read at the
best init. The claim "the post-norm interaction is an init fact" *agrees* when the 95% interval
lies below `LOSS_MARGIN` (0.05 nats/token, norm_type_placement's margin), *disagrees* when it
lies above it, and is *inconclusive* otherwise; it is not run while DyT in post-norm lacks, at
some alpha_0, an ended run of some LR and seed (a sweep cut short would otherwise read that
alpha_0's best LR from part of the grid). Described beside it: each alpha_0's cost in post- and
peri-norm, the same statistic in peri-norm, and the residual RMS per layer at init for
post-norm DyT per alpha_0.

Caveats: the best alpha_0 is picked on the seeds it is judged on (a mild selection bias towards
"agrees", three choices); pre-norm's DyT is read at 0.5 only (norms found 0.5 its best of 0.05
to 0.5). Not tested: alpha_0 above 2, or a learnable gamma init other than 1.
"""

from __future__ import annotations

from typing import Optional

from experiments import analysis as a
from experiments import atlas, paired
from experiments.norm_type_placement import init_rms
from experiments.presets import (PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS,
                                 PROTOCOL_SIZES, protocol)
from transformer.sweep import preset, product

CLAIM = ("Open question (issue 68): DyT's cost against LayerNorm in post-norm, larger than in "
         "pre-norm at alpha_0 0.5 (norm_type_placement), is an init fact: at its best alpha_0 "
         "of 0.5, 1 and 2, DyT costs no more in post-norm than in pre-norm, within 0.05 "
         "nats/token.")
ATLAS = "Is DyT's post-norm cost an init fact (its alpha_0)?"
ALPHA = "model.dyt_alpha_init"
ALPHAS = [1.0, 2.0, 0.5]  # the new runs first; 0.5 is norm_type_placement's
SWEPT = ["post", "peri"]  # DyT's alpha_0 swept here; pre-norm's DyT at 0.5 (norms')
PLACEMENTS = ["post", "peri", "pre"]
LOSS_MARGIN = 0.05  # nats/token: norm_type_placement's interaction margin
FIGURE = "loss_heatmap.webp"


def _dyt(alpha: float) -> dict:
  return {"model.norm": "dyt", ALPHA: alpha}


def settings() -> list[tuple[str, Optional[float]]]:
  """(placement, alpha_0) of every setting, new first, post-norm's before peri-norm's (the call
  reads post-norm's); alpha_0 None: LayerNorm."""
  return ([(p, x) for p in SWEPT for x in ALPHAS[:-1]] + [(p, 0.5) for p in PLACEMENTS]
          + [(p, None) for p in PLACEMENTS])


def get_sweep(size: str = "cpu"):
  """The protocol's model, budget, warm-up, LR grid and seeds, per setting (`settings`)."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  return [point for p, x in settings() for point in product(
      base, [protocol(size)], [{a.PLACEMENT: p, **({} if x is None else _dyt(x))}],
      {a.LR: PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})]


def setting_of(run) -> tuple[str, Optional[float]]:
  """(placement, alpha_0) of a run; alpha_0 None for LayerNorm."""
  if run.overrides.get("model.norm", "layernorm") != "dyt":
    return run.overrides[a.PLACEMENT], None
  return run.overrides[a.PLACEMENT], float(run.overrides.get(ALPHA, 0.5))


def ended(runs) -> dict:
  """`{setting: {(LR, seed) of each run of it that ended}}` (finished, collapsed or diverged:
  the runs with a clipped final loss)."""
  out: dict = {}
  for r in runs:
    if a.clipped_final_loss(r) is not None:
      out.setdefault(setting_of(r), set()).add((r.overrides[a.LR], r.seed))
  return out


def missing(grid: dict, placement: str) -> list[float]:
  """The alpha_0s of `ALPHAS` at which the placement's DyT lacks an ended run of some (LR,
  seed) that another alpha_0 has (all of them when none has any; `grid`: `ended`'s). A
  partly run alpha_0 counts as missing: its best LR would be read from part of the grid."""
  grids = {x: grid.get((placement, x), set()) for x in ALPHAS}
  union = set().union(*grids.values())
  return [x for x in ALPHAS if not union or grids[x] != union]


def best_alpha(read: dict, grid: dict, placement: str) -> Optional[float]:
  """The alpha_0 of `ALPHAS` whose loss at its LR read has the lowest mean over seeds (ties:
  the smaller); None while some alpha_0 is `missing` from `grid` (`ended`'s)."""
  if missing(grid, placement):
    return None
  reads = {x: read[(placement, x)][1] for x in ALPHAS}
  return min(ALPHAS, key=lambda x: (sum(reads[x].values()) / len(reads[x]), x))


def measure(runs) -> dict:
  """Per setting the LR read and `{seed: loss}` (none for a setting run over part of the grid:
  its best LR would be read from part of it); per DyT setting its cost against LayerNorm in
  its placement; per swept placement the best alpha_0 and its cost minus pre-norm's."""
  lrs = {r.overrides[a.LR] for r in runs}
  matched = next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None)
  grid = ended(runs)
  full = set().union(*grid.values())
  read = {s: paired.read([r for r in runs if setting_of(r) == s], matched)
          if grid.get(s) == full else (None, {}) for s in settings()}
  cost = {(p, x): paired.difference(f"DyT (alpha_0 {x:g}) minus LayerNorm in {p}-norm",
                                    read[(p, x)][1], read[(p, None)][1])
          for p, x in settings() if x is not None}
  best = {p: best_alpha(read, grid, p) for p in SWEPT}
  inter = {p: paired.difference(f"DyT's cost in {p}-norm at its best alpha_0 ({best[p]:g}) "
                                "minus in pre-norm", cost[(p, best[p])].per_seed,
                                cost[("pre", 0.5)].per_seed)
           for p in SWEPT if best[p] is not None}
  return {"read": read, "cost": cost, "best": best, "inter": inter, "ended": grid}


def _found(d: paired.Difference) -> tuple:
  """(the call, what was found) of the post-norm interaction at the best alpha_0."""
  above = paired.judge(d, LOSS_MARGIN)
  word = {True: "above", False: "below", None: "across"}[above]
  what = {True: "DyT still costs more in post-norm than in pre-norm at its best init: the "
                "interaction is not an init fact",
          False: "at its best init DyT costs no more in post-norm than in pre-norm: the "
                 "interaction is an init fact",
          None: "not resolved whether the interaction is an init fact"}[above]
  return {True: False, False: True, None: None}[above], (
      f"{d.text()}; its 95% interval lies {word} the margin {LOSS_MARGIN:g}: {what}")


def _rows(runs, m) -> list[list]:
  out = []
  for p, x in sorted(settings(), key=lambda s: (PLACEMENTS.index(s[0]), s[1] or 0.0)):
    lr, losses = m["read"][(p, x)]
    d = m["cost"].get((p, x))
    cost = d.estimate() if d is not None and d.per_seed else "-"
    out.append([p, "LayerNorm" if x is None else f"DyT, alpha_0 {x:g}", a.fmt_lr(lr),
                a.ci(losses.values()), cost,
                a.status_counts([r for r in runs if setting_of(r) == (p, x)]) or "not run"])
  return out


def _described(runs, m) -> list[str]:
  """Bullets: the peri-norm interaction at its best alpha_0, and post-norm DyT's residual RMS
  per layer at init per alpha_0."""
  lines = [f"- {d.text()} (described, not the call)" for p, d in m["inter"].items()
           if p != "post"]
  for x in sorted(ALPHAS):
    mine = [r for r in runs if setting_of(r) == ("post", x) and r.status != "missing"]
    if mine:
      lines.append(f"- Post-norm DyT at alpha_0 {x:g}: residual RMS after each layer at "
                   f"initialization {init_rms(mine)} (mean over its runs).")
  return lines + ([""] if lines else [])


def analyze(runs):
  """The table of settings, the described numbers, the call."""
  m = measure(runs)
  lines = [a.protocol(runs), "",
           "Per placement and norm: the LR read (its own best LR of the grid), the clipped "
           "final eval loss there (nats/token, mean ± 95% CI over seeds) and its cost against "
           "LayerNorm in the same placement (paired by seed, nats/token):", "",
           *a.table(["placement", "norm", "LR read", "loss there", "minus LayerNorm", "runs"],
                    _rows(runs, m)), "", *_described(runs, m)]
  if "post" not in m["inter"]:
    lack = ", ".join(f"{x:g}" for x in sorted(missing(m["ended"], "post")))
    return lines + [a.verdict(None, "The call is not run yet: DyT in post-norm lacks finished "
                              f"runs of its grid and seeds at alpha_0 {lack}.")]
  agrees, said = _found(m["inter"]["post"])
  costs = "; ".join(f"alpha_0 {x:g} {m['cost'][('post', x)].estimate()}" for x in sorted(ALPHAS))
  return lines + [a.verdict(agrees, f"{said} (DyT's cost against LayerNorm in post-norm: "
                            f"{costs} nats/token).")]


def figures(runs, sweep_dir):
  """`loss_heatmap.webp`: (placement, norm) x LR, the mean clipped final loss."""
  keys = sorted(settings(), key=lambda s: (PLACEMENTS.index(s[0]), s[1] or 0.0))
  return atlas.loss_heatmap_figure(
      runs, sweep_dir, FIGURE, setting_of, keys,
      [f"{p}, {'LayerNorm' if x is None else f'DyT {x:g}'}" for p, x in keys])


def summarize(runs):
  """The study's entry in experiments/results/README.md."""
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS, "figure": FIGURE, "placements": {},
          "numbers": [*(d.text() for d in m["inter"].values()),
                      *(m["cost"][("post", x)].text() for x in sorted(ALPHAS))]}


THRESHOLDS = paired.margin_thresholds((0.03, 0.1))
THRESHOLDS_NOT_READ = paired.NOT_READ
REGISTRATION = {
    "DyT's cost in post-norm at its best alpha_0 minus in pre-norm":
        "pre-registered at c678e28, the commit that added this file, before any run of DyT at "
        "alpha_0 1 or 2 (its alpha_0 0.5 and LayerNorm runs are norm_type_placement's, norms' "
        "and lr_sensitivity's, landed before; their numbers are quoted in the file)"}
