"""Study 7: final loss against depth, with and without warm-up.

  python launch.py --mode=sweep --sweep=experiments/depth.py:cpu \
      --sweep_dir=runs/studies/depth --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity,runs/studies/warmup_stability

Under the protocol (`presets.protocol`: the same model, steps, data and seeds for every point):
post, pre, DeepNorm and Admin, the placements the claim names, at 6, 12 and 24 layers x {no
warm-up, the protocol's warm-up} x 3 seeds, each at its best LR of lr_sensitivity's grid
(`BEST_6`, read off its protocol runs before any depth run) and at one matched LR every
placement shares (`MATCHED`). The 6-layer points are lr_sensitivity's (with warm-up) and
warmup_stability's (without) runs: `--reuse_runs_from` links them. Deeper stacks are scanned
(`model.scan_layers`) so that 24 layers compile in seconds; with the role-based weight-decay
mask a scanned stack trains the same model as an unrolled one. Depth comes first in the
points, so a sweep cut short has whole depths.

"Stops training" is a threshold, so it is judged as a curve over it, as in warmup_stability:
a run *trained at X* when it neither diverged nor collapsed and its final eval loss is within
X nats/token of the best its placement reached with that seed at that depth or a shallower
one (with or without warm-up). So a placement is judged against itself, not against a
placement that converges faster at a larger LR, and "deeper" may not cost more than X. The
deepest depth up to which every seed trained at X is tabulated for several X and drawn in
`deepest_vs_tolerance.webp`; the call is made at `analysis.CALL_TOLERANCE` with the X over
which it holds, at each placement's best LR, and made again at the matched LR. The
loss-against-depth figure (`loss_vs_depth.webp`) is the raw evidence.
"""

import numpy as np

from experiments import analysis as a
from experiments import paired
from experiments.presets import (LAYERS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS, PROTOCOL_SIZES,
                                 PROTOCOL_WARMUP, protocol)
from transformer.sweep import preset, product
from transformer.report.robustness import Threshold
from transformer.report.runs import PENDING

CLAIM = ("Liu et al. 2020 (Admin); Wang et al. 2022 (DeepNet): post-norm stops training as "
         "the stack gets deeper (WMT14 12L-12L and 18L-18L post-LN failed, with warm-up), while "
         "pre-norm, Admin and DeepNorm train at every depth; without warm-up post-norm fails "
         "sooner.")
PLACEMENTS = ["post", "pre", "deepnorm", "admin"]
# Each placement's best LR of lr_sensitivity's protocol grid at 6 layers (the lowest mean
# clipped final loss over its 3 seeds), read off lr_sensitivity's 90 protocol runs (2026-11-25,
# staged in experiments/in_progress/): post 1e-3 (1.96 nats), pre 3e-3 (1.80), DeepNorm 3e-3
# (1.86), Admin 3e-3 (1.76), each inside the grid; set before any depth run.
# The gpu preset has not been run: its lr_sensitivity's best LRs replace these when it is.
BEST_6 = {"cpu": {"post": 1e-3, "pre": 3e-3, "deepnorm": 3e-3, "admin": 3e-3},
          "gpu": {"post": 3e-4, "pre": 1e-3, "deepnorm": 1e-3, "admin": 1e-3}}
MATCHED = PROTOCOL_MATCHED_LR  # the one LR every placement is also run at
DEPTHS = {"cpu": [6, 12, 24], "gpu": [12, 24, 48]}
SHOWN = ["post", "pre", "peri", "deepnorm", "admin", "mix"]  # table order (older runs had all six)
STABLE = ["pre", "deepnorm", "admin"]  # what the papers say trains at every depth
LOSS_MARGIN = 0.05  # nats/token: post-norm at the largest depth this much worse than pre
DEPTH = "model.num_layers"
WARM = "optim.warmup_steps"
FIGURE = "loss_vs_depth.webp"
TOLERANCE_FIGURE = "deepest_vs_tolerance.webp"


def get_sweep(size: str = "cpu"):
  """Per depth (shallowest first), placement, LR (its best and the matched one), warm-up
  (the protocol's, then none) and seed. Stacks deeper than the protocol's are scanned."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  fixed = protocol(size, varied=(DEPTH, WARM))
  points = []
  for d in DEPTHS[size]:
    scan = {"model.scan_layers": True} if d > LAYERS[size] else {}
    for p in PLACEMENTS:
      points += product(base, [{**fixed, **scan}], {"model.norm_placement": [p]},
                        {"optim.learning_rate": sorted({BEST_6[size][p], MATCHED[size]})},
                        {DEPTH: [d]}, {WARM: [PROTOCOL_WARMUP[size], 0]},
                        {"seed": PROTOCOL_SEEDS})
  return points


def judged_lrs(runs) -> dict:
  """`{placement: the LR its runs are judged at}`: of the LRs it ran, the one with the lowest
  mean clipped final loss over seeds at the shallowest depth, with the longest warm-up (its
  best LR by lr_sensitivity's runs, which are those points)."""
  out = {}
  for p in dict.fromkeys(r.overrides[a.PLACEMENT] for r in runs):
    mine = a.select(runs, model__norm_placement=p)
    shallow = min(r.overrides[DEPTH] for r in mine)
    warm = max(r.overrides[WARM] for r in mine)
    best = a.best_lr([r for r in mine if r.overrides[DEPTH] == shallow
                      and r.overrides[WARM] == warm])
    out[p] = best if best is not None else min(r.overrides[a.LR] for r in mine)
  return out


def matched_lr(runs):
  """The one LR every placement ran at (None when there is none, or several)."""
  by_p = {}
  for r in runs:
    by_p.setdefault(r.overrides[a.PLACEMENT], set()).add(r.overrides[a.LR])
  common = set.intersection(*by_p.values()) if by_p else set()
  return next(iter(common)) if len(common) == 1 else None


def at_lrs(runs, lrs: dict) -> list:
  """The runs of each placement at its LR in `lrs` ({placement: LR})."""
  return [r for r in runs if lrs.get(r.overrides[a.PLACEMENT]) == r.overrides[a.LR]]


def at_best(runs) -> list:
  """The runs of each placement at its judged (best) LR: what the verdict, figures and
  summary read."""
  return at_lrs(runs, judged_lrs(runs))


def reference(runs) -> dict:
  """`{(placement, seed, depth): the lowest clipped final loss that placement and seed reached
  at that depth or any shallower one, with or without warm-up}`: what a run is judged against."""
  at = {}
  for r in runs:
    v = a.clipped_final_loss(r)
    if v is not None:
      key = (r.overrides[a.PLACEMENT], r.seed, r.overrides[DEPTH])
      at[key] = min(v, at.get(key, float("inf")))
  ref, running = {}, {}
  for p, s, d in sorted(at, key=lambda k: k[2]):  # shallow first: a running minimum
    running[p, s] = min(at[p, s, d], running.get((p, s), float("inf")))
    ref[p, s, d] = running[p, s]
  return ref


def gap_to_reference(run, ref) -> float:
  """How far (nats/token) the run ended above its placement's best at its depth or shallower
  (same seed); inf for a run that diverged, collapsed or has not ended."""
  v = a.clipped_final_loss(run)
  key = (run.overrides[a.PLACEMENT], run.seed, run.overrides[DEPTH])
  if v is None or run.status != "finished" or key not in ref:
    return float("inf")
  if a.rule_used(a.WITHIN_X) == a.HEALTHY:  # the other rule: finished healthily is trained
    return 0.0
  return v - ref[key]


def deepest_trained(runs, depths, ref, tolerance):
  """The largest depth up to which, at that depth and every smaller one, every seed of `runs`
  (one placement and warm-up) trained at `tolerance` (None when the smallest already fails)."""
  deepest = None
  for d in depths:
    at = [r for r in runs if r.overrides[DEPTH] == d]
    if not at or not all(gap_to_reference(r, ref) <= tolerance for r in at):
      break
    deepest = d
  return deepest


def measure(runs):
  """Everything the verdict, the figures and the summary use."""
  depths = sorted({r.overrides[DEPTH] for r in runs})
  warmups = sorted({r.overrides[WARM] for r in runs})
  placements = [p for p in SHOWN if a.select(runs, model__norm_placement=p)]
  sets = {(p, w): a.select(runs, model__norm_placement=p, optim__warmup_steps=w)
          for p in placements for w in warmups}
  ref = reference(runs)
  deepest = {k: {t: deepest_trained(v, depths, ref, t) for t in a.TOLERANCES}
             for k, v in sets.items()}
  # deepest_trained changes only where X crosses some run's gap to its reference.
  points = sorted({g for r in runs for g in [gap_to_reference(r, ref)] if g < float("inf")})
  return dict(depths=depths, warmups=warmups, placements=placements, sets=sets, ref=ref,
              deepest=deepest, points=points, x=a.CALL_TOLERANCE, top=depths[-1],
              warm=warmups[-1], none=warmups[0])


def _call_at(m, x):
  """(post fails at some depth, the STABLE placements that fail at some depth), with warm-up,
  at tolerance x."""
  top, warm = m["top"], m["warm"]
  deep = lambda p: deepest_trained(m["sets"][(p, warm)], m["depths"], m["ref"], x)
  post_fails = ("post", warm) in m["sets"] and deep("post") != top
  stable_bad = [p for p in STABLE if (p, warm) in m["sets"] and deep(p) != top]
  return post_fails, stable_bad


def _post_minus_pre(runs, m):
  """Per seed, post-norm's minus pre-norm's clipped final loss at the largest depth, with
  warm-up."""
  gap = []
  for s in sorted({r.seed for r in runs}):
    post = a.select(runs, model__norm_placement="post", optim__warmup_steps=m["warm"],
                    model__num_layers=m["top"], seed=s)
    pre = a.select(runs, model__norm_placement="pre", optim__warmup_steps=m["warm"],
                   model__num_layers=m["top"], seed=s)
    if post and pre:
      vp, vq = a.clipped_final_loss(post[0]), a.clipped_final_loss(pre[0])
      if vp is not None and vq is not None:
        gap.append(vp - vq)
  return gap


def _judge(m, runs):
  """(agrees, text) at the call's tolerance."""
  top, warm, x = m["top"], m["warm"], m["x"]
  post_fails, stable_bad = _call_at(m, x)
  gap = _post_minus_pre(runs, m)
  mean, half = a.mean_ci(gap) if gap else (float("nan"), float("nan"))
  post_behind = len(gap) > 1 and mean - half > LOSS_MARGIN
  what = (f"post-norm stops training at some depth up to {top} (it diverges, collapses or "
          "ends more than X above its best at a shallower depth)" if post_fails else
          f"post-norm trains at every depth up to {top}" + (
              " but ends worse than pre-norm at the largest" if post_behind else ""))
  others = ("pre-norm, DeepNorm and Admin train at every depth" if not stable_bad else
            f"{', '.join(stable_bad)} also stop(s) training at some depth")
  text = f"At X = {x:g}, with warm-up {warm}: {what}; {others}"
  if not (post_fails or post_behind):
    agrees = False  # the claim's subject: post-norm is the placement that stops training
  else:
    agrees = True if not stable_bad else "partly"
  return agrees, text, (mean, half)


def matched_call(runs, lrs: dict) -> str:
  """The call made again with every placement at the matched LR (a sentence)."""
  lr = matched_lr(runs)
  if lr is None:
    return ("Matched LR: none; no one LR was run for every placement (each ran at "
            "its own best only), so the call is made at each placement's best LR alone.")
  if all(v == lr for v in lrs.values()):
    return (f"Matched LR: {a.fmt_lr(lr)} is every placement's best, so the call above is also "
            "the matched one.")
  mine = at_lrs(runs, {p: lr for p in lrs})
  m = measure(mine)
  if ("post", m["warm"]) not in m["sets"]:
    return f"Matched LR {a.fmt_lr(lr)}: no post-norm runs with warm-up at it."
  agrees, text, _ = _judge(m, mine)
  return (f"Matched LR {a.fmt_lr(lr)} (every placement at it): {text}; judged there, the "
          f"data {a.verdict_word(agrees)}.")


def _depth_text(d) -> str:
  """A deepest depth as the tables write it ("none": the shallowest already fails)."""
  return "none" if d is None else str(d)


def _tables(runs, m, lrs: dict) -> list[str]:
  """The protocol line, the loss-per-depth table and the deepest-depth-over-X table."""
  depths, warm, none = m["depths"], m["warm"], m["none"]
  rows = []
  for (p, w), mine in m["sets"].items():
    cells = [a.ci(v for v in (a.clipped_final_loss(r) for r in mine
                              if r.overrides[DEPTH] == d) if v is not None) for d in depths]
    rows.append([p, w, *cells, a.status_counts(mine)])
  return [a.protocol(runs), "",
          "Clipped final eval loss (nats/token; diverged runs count as ln V) at each depth, "
          "each placement at its best LR (" + ", ".join(
              f"{p} {lrs[p]:g}" for p in m["placements"]) + "), mean ± 95% CI over seeds:",
          "", *a.table(["placement", "warm-up", *(f"loss @ {d} layers" for d in depths),
                        "runs"], rows), "",
          "A run *trained at X* when it neither diverged nor collapsed and its final eval loss "
          "is within X nats/token of the best its placement reached with that seed at that "
          "depth or a shallower one (with or without warm-up): getting deeper may not cost "
          "more than X. Deepest depth up to which every seed trained at X (none: the "
          "shallowest already fails), without / with warm-up:", "",
          *a.table(["placement", *(f"X = {t:g}" for t in a.TOLERANCES)],
                   [[p, *(f"{_depth_text(m['deepest'][(p, none)][t])} / "
                          f"{_depth_text(m['deepest'][(p, warm)][t])}" for t in a.TOLERANCES)]
                    for p in m["placements"]]), ""]


def _call_lines(m, runs) -> list[str]:
  """Post minus pre at the largest depth, where over X the call holds, and the verdict."""
  agrees, text, (mean, half) = _judge(m, runs)
  as_paper = a.intervals_where(
      lambda t: (lambda f, b: f and not b)(*_call_at(m, t)), m["points"])
  post_fails = a.intervals_where(lambda t: _call_at(m, t)[0], m["points"])
  return [f"At {m['top']} layers with warm-up {m['warm']}, post-norm minus pre-norm final loss, "
          f"paired by seed: {a.fmt(mean, half)} nats/token (margin {LOSS_MARGIN}).", "",
          f"Over X in [0, 1]: post-norm stops training at some depth for "
          f"{a.intervals_text(post_fails)}; post-norm does while pre-norm, DeepNorm and "
          f"Admin train at every depth (the papers' picture) for {a.intervals_text(as_paper)}.",
          "", a.verdict(agrees, text + ".")]


def _without_warmup(m) -> list[str]:
  """Which placements fail at a shallower depth without warm-up, at the call's X (no lines
  when the runs have one warm-up only)."""
  none, warm, x, placements = m["none"], m["warm"], m["x"], m["placements"]
  if none == warm:
    return []
  dn = {p: m["deepest"][(p, none)][x] for p in placements}
  dw = {p: m["deepest"][(p, warm)][x] for p in placements}
  sooner = [p for p in placements if (dn[p] or 0) < (dw[p] or 0)]
  return ["", f"Without warm-up, at X = {x:g}, the deepest depth every seed trained at: "
          + ", ".join(f"{p} {_depth_text(dn[p])}" for p in placements) + ". Dropping "
          "warm-up makes the stack fail sooner for: "
          + (", ".join(sooner) if sooner else "no placement") + "."]


def _depth_costs(m) -> list[str]:
  """What each deeper stack costs its placement, with warm-up: per seed the clipped final loss
  at each depth minus at the shallowest, paired by seed (described, not the call: a cost the
  call's X hides, such as Admin's at 24 layers, is stated here)."""
  warm, shallow = m["warm"], m["depths"][0]
  lines = []
  for p in m["placements"]:
    mine = m["sets"].get((p, warm), [])
    at = {d: paired.seed_losses([r for r in mine if r.overrides[DEPTH] == d])
          for d in m["depths"]}
    lines += ["- " + paired.difference(f"{p}, {d} minus {shallow} layers", at[d],
                                       at[shallow]).text()
              for d in m["depths"][1:] if at[d] and at[shallow]]
  if not lines:
    return []
  return ["", f"Depth cost per placement, with warm-up {warm}, at its 6-layer best LR (clipped "
          f"final eval loss at the depth minus at {shallow} layers, paired by seed; described, "
          "not the call):", "", *lines]


def analyze(runs):
  """Per placement and warm-up: the clipped final eval loss at each depth (mean ± 95% CI over
  seeds) and the deepest depth every seed trained at, over X. Then: does post-norm fail (or
  fall behind pre-norm by more than LOSS_MARGIN at the largest depth, paired by seed) where
  pre-norm, DeepNorm and Admin train at every depth?"""
  if not runs:
    return [a.verdict(None, "No runs.")]
  every = runs
  lrs = judged_lrs(every)
  runs = at_lrs(every, lrs)
  m = measure(runs)
  lines = _tables(runs, m, lrs)
  if ("post", m["warm"]) not in m["sets"]:
    return lines + [a.verdict(None, "No post-norm runs with warm-up: nothing to judge.")]
  pending = [r for r in runs if r.status in PENDING]
  if pending:  # deepest_trained reads a run that has not ended as one that did not train
    return lines + [a.verdict(None, f"{len(pending)} of the {len(runs)} runs at the judged LRs "
                              "have not ended: the call waits for them.")]
  lines += _call_lines(m, runs) + _without_warmup(m) + _depth_costs(m)
  lines += ["", matched_call(every, lrs)]
  steps = max(r.num_steps for r in runs)
  lines += ["", f"Trained {steps} steps on a small model at each placement's 6-layer best LR "
            "(not re-tuned per depth): far from the papers' translation models, so a failure "
            "here is a finding at this scale."]
  return lines


def _loss_figure(plt, marks: dict, m):
  """Clipped final loss against depth, one panel per warm-up, one colour per placement (mean
  line, every seed a mark in the style `marks` gives its status, diverged runs an x). Returns
  the figure."""
  colours = {p: f"C{i}" for i, p in enumerate(SHOWN)}
  fig, axes = plt.subplots(1, len(m["warmups"]), figsize=(4.2 * len(m["warmups"]) + 1.6, 3.4),
                           sharey=True, squeeze=False)
  for ax, w in zip(axes[0], m["warmups"]):
    for j, p in enumerate(m["placements"]):
      means = []
      for d in m["depths"]:
        at = [r for r in m["sets"][(p, w)] if r.overrides[DEPTH] == d]
        vals = [(r, a.clipped_final_loss(r)) for r in at]
        vals = [(r, v) for r, v in vals if v is not None]
        xs = d * 2 ** ((j - len(m["placements"]) / 2) * 0.03)  # spread the marks
        for r, v in vals:
          ax.plot([xs], [v], color=colours[p], alpha=0.7,
                  **marks["diverged" if r.status == "diverged" else "finished"])
        means.append(np.mean([v for _, v in vals]) if vals else np.nan)
      ax.plot(m["depths"], means, "-", color=colours[p], lw=1.4, label=p)
    ax.set_xscale("log", base=2)
    ax.set_xticks(m["depths"], [str(d) for d in m["depths"]])
    ax.minorticks_off()
    ax.set_title("no warm-up" if w == 0 else f"warm-up {w} steps")
    ax.set_xlabel("layers")
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("clipped final eval loss (nats/token)")
  axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
  fig.tight_layout()
  return fig


def figures(runs, sweep_dir):
  """`loss_vs_depth.webp`: clipped final loss against depth, one panel per warm-up, one colour
  per placement (mean line, every seed a mark, diverged runs an x); and
  `deepest_vs_tolerance.webp`: the deepest depth trained at X against X."""
  import os
  from transformer.report import figures as report_figures
  if not runs:
    return []
  runs = at_best(runs)
  m = measure(runs)
  plt = report_figures.load_pyplot()
  report_figures.save_figure(plt, _loss_figure(plt, report_figures.MARKS, m),
                          os.path.join(sweep_dir, FIGURE), dpi=90)
  curves = [(w, style, colour, "no warm-up" if w == 0 else f"warm-up {w}") for w, style, colour
            in ((m["none"], "--", "tab:red"), (m["warm"], "-", "tab:blue"))]
  fig = a.tolerance_steps_figure(
      plt, m["placements"], curves,
      lambda p, w, t: deepest_trained(m["sets"][(p, w)], m["depths"], m["ref"], t),
      m["depths"], [str(d) for d in m["depths"]], "deepest depth trained", m["x"], (2.6, 2.8))
  report_figures.save_figure(plt, fig, os.path.join(sweep_dir, TOLERANCE_FIGURE), dpi=90)
  return [("Clipped final eval loss against depth (line: mean over seeds; marks: seeds; x: "
           "diverged)", FIGURE),
          (f"Deepest depth up to which every seed ended within X nats of its placement's best at "
           f"that depth or shallower, against X "
           f"(dotted: the call's X = {m['x']:g})", TOLERANCE_FIGURE)]


def summarize(runs):
  """The summary's entry (transformer/report/summary.write_summary)."""
  runs = at_best(runs)
  m = measure(runs)
  agrees, text, (mean, half) = _judge(m, runs)
  top, warm, none, x = m["top"], m["warm"], m["none"], m["x"]
  numbers = [text]
  numbers += [f"{p} at {top} layers, warm-up {warm}: clipped final loss " + a.ci(
      v for v in (a.clipped_final_loss(r) for r in m["sets"][(p, warm)]
                  if r.overrides[DEPTH] == top) if v is not None) + " nats/token"
              for p in m["placements"]]
  numbers.append(f"post minus pre at {top} layers, warm-up {warm}, paired by seed: "
                 f"{a.fmt(mean, half)} nats/token")
  numbers += [l[2:] for l in _depth_costs(m) if l.startswith(f"- admin, {top} ")]
  return {"verdict": a.verdict_word(agrees), "numbers": numbers, "figure": FIGURE,
          "placements": {p: {f"deepest depth trained at X={x:g}, no warm-up / warm-up {warm}":
                             f"{_depth_text(m['deepest'][(p, none)][x])} / "
                             f"{_depth_text(m['deepest'][(p, warm)][x])}"}
                         for p in m["placements"]}}

# What the verdict's call depends on, recomputed at its neighbours in the report's `## Robustness`
# (transformer/report/robustness.py; the shared ones are defined in experiments/analysis.py).
THRESHOLDS = (a.COLLAPSE,
              a.X,
              a.RULE,
              a.CONFIDENCE,
              Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", (0.02, 0.1)))

REGISTRATION = {
    "post-norm stops training at some depth (or ends behind pre-norm at the largest) while "
    "pre-norm, DeepNorm and Admin train at every depth, at X = 0.3":
        "post hoc: the rule (each placement against its own shallower best, over X) was "
        "written at 8b37fb3, replacing the file's first rule (b455241), while the study's "
        "first, pre-protocol runs were under way (committed at 6a7045a); confirmed on data not "
        "used to choose it: the protocol's re-run (ee1125d; its runs from ec81a0b on, "
        "2026-11-25), which agrees"}
