"""Past early training (issue 46) and DyT's data budget (issue 49, question 7): post, pre and
peri at 16x the protocol's steps, and DyT against LayerNorm at three budgets.

  python launch.py --mode=sweep --sweep=experiments/long_runs.py:cpu \
      --sweep_dir=runs/studies/long_runs --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity,experiments/results/norms,\
experiments/results/long_training

The protocol's 600 steps are 0.5 tokens per parameter; long_training's 2,400 are 2. Here 9,600
steps (about 8 tokens per parameter), warm-up scaled with the run (10%), eval every 100 steps:
post, pre and peri at LR 3e-3 (each one's best at 2,400 steps) and 1e-3, 3 seeds (18 runs, the
3e-3 ones first). And pre-norm with DyT (alpha_0 0.5) beside LayerNorm at LR 3e-3 at 600 steps
(norms' and lr_sensitivity's runs, linked), 2,400 (LayerNorm: long_training's, linked) and
9,600 steps (6 new DyT runs). 24 runs are new, about 70 minutes each two at a time on 2 cores
(the first two: 4,199 s and 4,231 s, beside the test suite for half of it).

The calls (`experiments/paired.py`), fixed before the runs:
1. Liu et al. 2020: post-norm, when it trains, ends better than pre-norm. Statistic: pre-norm's
   final eval loss minus post-norm's after 9,600 steps, each at its best LR of {1e-3, 3e-3},
   paired by seed; *agrees* when its interval lies above `LOSS_MARGIN` (0.02 nats/token),
   *disagrees* when below. Described: the first step from which pre-norm is no longer
   resolved ahead (when post catches pre, if it does); and at the matched LR, each LR of the
   grid with both placements at it, the same final gap and catch step (issue 49, question 5:
   the catch step as a function of the LR). The catch step is read from the train loss over
   windows of `CATCH_WINDOW` steps (issue 68; the runs' train rows, each the mean of 25 steps),
   paired by seed: 614,400 training tokens a window, where a periodic eval scores 4,096 and its
   interval (±0.03-0.05 nats) could not resolve the gap it was asked to watch close.
2. DyT's cost grows with the data budget (arXiv 2604.23434): DyT's final loss minus
   LayerNorm's at 9,600 steps minus the same at 600 steps, pre-norm, LR 3e-3, paired by seed;
   *agrees* when above `LOSS_MARGIN`, *disagrees* when below.
The study agrees when both do, partly when one does, disagrees when both disagree. The
verdict sentence says what each statistic found (its interval, its side of the margin and of
zero), never the claim's wording (issue 68).

The LR grid is two points because each costs 9 runs of 70 minutes: 3e-3 was every placement's
best at 2,400 steps, where long_training's window reached 1e-2. When a placement's best here is
the grid's edge, the report says so beside the call (not located).

Extended (issue 69 point 2), after the 24 runs, the call unchanged: 3e-3 came out the best of
post, pre and peri, the grid's largest, so the headline rested on optima not located. 5e-3 for
post and pre at 9,600 steps, 3 seeds (`EXTENDED`; 6 new runs, listed after every earlier
point), trained 2026-12-06 04:14-06:05 from a clean worktree at 14c3518, two at a time: 38
minutes a pair on a machine doing nothing else (the 70 minutes above were beside the tests).
The report says, per placement, whether its best LR now lies inside the LRs run (located),
still on the edge, or that the 5e-3 runs are not run yet (`located`; described beside the
call, not a call).

Five seeds for the DyT half (issue 68 point 8, after the 3-seed runs were seen): seeds 3 and 4
of pre-norm DyT and LayerNorm at LR 3e-3 at 600, 2,400 and 9,600 steps, listed after every
earlier point: 12 points, the two 600-step LayerNorm ones lr_sensitivity's (linked), 10 new
(2 of 600 steps, 4 of 2,400, 4 of 9,600), trained 2026-12-06 from a clean worktree at
14c3518, two at a time: the 6 shorter ones 02:36-02:56, the 4 of 9,600 steps 07:34-08:51 (two
pairs, the machine otherwise idle). The DyT call reads a seed once all its runs have ended;
the first call keeps the protocol's 3 seeds (`_select`), so its best LR of the grid never sees
pre-norm's seeds 3 and 4, which run at 3e-3 only.

Figures (the atlas's heat maps): `gap_heatmap.webp`, pre minus post over LR x training step;
`dyt_heatmap.webp`, DyT minus LayerNorm at each budget.
"""

from __future__ import annotations

import math

from experiments import analysis as a
from experiments import atlas, paired
from experiments.presets import ADDED_SEEDS, PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.sweep import preset, product

CLAIM = ("Liu et al. 2020 (Admin): post-norm, when it trains, ends better than pre-norm; "
         "arXiv 2604.23434: DyT helps at very few tokens per parameter and hurts at many.")
ATLAS = "When does post-norm catch pre-norm, and does DyT's sign depend on the data budget?"
FACTOR = 16
LONG_LRS = [3e-3, 1e-3]  # the first: every placement's best at 2,400 steps
DYT = {"model.norm": "dyt", "model.dyt_alpha_init": 0.5}
BUDGETS = (1, 4, FACTOR)  # DyT against LayerNorm at 600, 2,400 and 9,600 steps
LOSS_MARGIN = 0.02  # nats/token
STEPS = "train.num_steps"
FIGURE = "gap_heatmap.webp"
DYT_FIGURE = "dyt_heatmap.webp"
# Issue 69 point 2: 3e-3, the grid's largest LR, was post's, pre's and peri's best after 9,600
# steps, so no optimum was located; one LR above it for post and pre (3 seeds each), listed
# after every earlier point so those keep their names and order. 1e-2 is not tried: post-norm
# collapsed there in every seed at 2,400 steps (long_training).
EXTENDED = {"post": [5e-3], "pre": [5e-3]}
GAP_STEPS = (1, 2, 4, 8, 12, 16)  # the heat map's columns, in multiples of the protocol's steps
CATCH_WINDOW = 600  # steps of train loss per window of the catch step (the protocol's length)


def get_sweep(size: str = "cpu"):
  """The long runs (3e-3 before 1e-3), then DyT and LayerNorm at the three budgets, then the
  `EXTENDED` LRs (issue 69), then the DyT half's seeds 3 and 4 (issue 68), seed by seed."""
  base = preset(PROTOCOL_SIZES, size)
  points = [point for lr in LONG_LRS for point in product(
      base, [protocol(size, factor=FACTOR)],  # eval every 100 steps, as at every length
      {"model.norm_placement": ["post", "pre", "peri"]}, {"optim.learning_rate": [lr]},
      {"seed": PROTOCOL_SEEDS})]
  for factor in BUDGETS:
    fixed = protocol(size, factor=factor)
    norms = [DYT] if factor == FACTOR else [{}, DYT]  # the long LayerNorm runs are above
    points += product(base, [fixed], [{"model.norm_placement": "pre"}], norms,
                      {"optim.learning_rate": [LONG_LRS[0]]}, {"seed": PROTOCOL_SEEDS})
  points += [point for p, lrs in EXTENDED.items() for point in product(
      base, [protocol(size, factor=FACTOR)], {"model.norm_placement": [p]},
      {"optim.learning_rate": lrs}, {"seed": PROTOCOL_SEEDS})]
  added = [point for factor in BUDGETS for point in product(
      base, [protocol(size, factor=factor)], [{"model.norm_placement": "pre"}], [{}, DYT],
      {"optim.learning_rate": [LONG_LRS[0]]}, {"seed": ADDED_SEEDS})]
  return points + sorted(added, key=lambda p: p["seed"])


def _select(runs, steps, placement, dyt=False, lr=None, seeds=tuple(PROTOCOL_SEEDS)):
  """The runs of one setting; of `seeds` only (None: every seed). The protocol's seeds by
  default: the first call's, whose pre-norm runs at 9,600 steps and 3e-3 also have the DyT
  half's seeds 3 and 4 (issue 68), which its best LR of the grid must not read."""
  return [r for r in runs if r.overrides[STEPS] == steps
          and r.overrides[a.PLACEMENT] == placement
          and (r.overrides.get("model.norm") == "dyt") == dyt
          and (lr is None or r.overrides[a.LR] == lr)
          and (seeds is None or r.seed in seeds)]


def gap_over_training(pre_runs, post_runs) -> list[tuple[int, paired.Difference]]:
  """`[(step, pre minus post at that periodic eval, paired by seed)]`."""
  def by_step(runs):
    out = {}
    for r in runs:
      for row in r.metrics.get("eval", []):
        out.setdefault(row["step"], {})[r.seed] = row["loss"]
    return out
  pre, post = by_step(pre_runs), by_step(post_runs)
  return [(s, paired.difference(f"step {s}", pre[s], post[s])) for s in sorted(pre)
          if s in post]


def window_losses(run, window: int = CATCH_WINDOW) -> dict:
  """`{window end: mean train loss of the run's train rows in (end - window, end]}`, the
  windows ending at window, 2 window, ... (a row's loss is the mean over its logged steps)."""
  rows: dict = {}
  for row in run.metrics.get("train", []):
    rows.setdefault((row["step"] - 1) // window, []).append(row["loss"])
  return {(k + 1) * window: sum(v) / len(v) for k, v in sorted(rows.items())}


def train_gap(pre_runs, post_runs, window: int = CATCH_WINDOW) -> list:
  """`[(window end, pre minus post's mean train loss over the window, paired by seed)]`."""
  pre, post = ({r.seed: window_losses(r, window) for r in runs}
               for runs in (pre_runs, post_runs))
  ends = sorted({e for w in pre.values() for e in w})
  return [(e, paired.difference(f"steps {e - window + 1}-{e}", *(
      {s: w[e] for s, w in side.items() if e in w} for side in (pre, post)))) for e in ends]


def catch_step(gaps) -> object:
  """The first step (window end) from which pre-norm is no longer resolved ahead in any later
  window: the gap's (pre minus post) interval reaches 0 or above from then on (None: never)."""
  caught = None
  for step, d in gaps:
    mean, half = d.interval
    if len(d.per_seed) > 1 and mean + half >= 0:
      caught = step if caught is None else caught
    else:
      caught = None
  return caught


def _matched(runs, long, lr) -> tuple:
  """(pre minus post's final eval loss at `lr`, paired by seed; their train-loss gap per
  window there, `train_gap`) - described beside the call, which reads each at its best LR."""
  pre, post = _select(runs, long, "pre", lr=lr), _select(runs, long, "post", lr=lr)
  final = paired.difference(f"pre-norm minus post-norm after the long runs, both at LR {lr:g}",
                            paired.seed_losses(pre), paired.seed_losses(post))
  return final, train_gap(pre, post)


def measure(runs) -> dict:
  runs = paired.added_seeds_ended(runs)  # a seed 3 or 4 is read once all its runs ended
  base = min(r.overrides[STEPS] for r in runs)  # the protocol's length
  long = base * FACTOR
  read = {p: paired.read(_select(runs, long, p), None) for p in ("post", "pre", "peri")}
  out = {"read": read, "long": long}
  out["final"] = paired.difference("pre-norm minus post-norm after the long runs, best LRs",
                                   read["pre"][1], read["post"][1])
  if read["pre"][0] and read["post"][0]:
    out["gaps"] = train_gap(_select(runs, long, "pre", lr=read["pre"][0]),
                            _select(runs, long, "post", lr=read["post"][0]))
  extended = [lr for lr in EXTENDED["post"] if lr in EXTENDED["pre"] and all(
      _ended(_select(runs, long, p, lr=lr)) for p in ("pre", "post"))]  # once both have run
  out["matched"] = {lr: _matched(runs, long, lr) for lr in LONG_LRS + extended}
  out["edges"] = {p: n for p, (lr, _) in read.items() for n in [a.edge_note(
      f"{p}'s best LR after {long} steps", lr, _ended(_select(runs, long, p)))] if n}
  cost = {}
  for factor in BUDGETS:
    steps, lr = base * factor, LONG_LRS[0]
    cost[steps] = paired.difference(
        f"DyT minus LayerNorm at {steps} steps",
        paired.seed_losses(_select(runs, steps, "pre", dyt=True, lr=lr, seeds=None)),
        paired.seed_losses(_select(runs, steps, "pre", lr=lr, seeds=None)))
  out["dyt"] = cost
  out["dyt_call"] = paired.difference(f"DyT's cost at {long} steps minus at {base}",
                                      cost[long].per_seed, cost[base].per_seed)
  return out


def _ended(runs) -> list:
  """The runs that ended (a clipped final loss): a point listed but not run yet is no LR of
  the grid."""
  return [r for r in runs if a.clipped_final_loss(r) is not None]


def located(runs, long: int) -> list[str]:
  """Issue 69 point 2, described: per `EXTENDED` placement, whether its best LR after `long`
  steps lies inside the LRs run (located), on their edge (not located, and why), or the
  extension is not run yet."""
  out = []
  for p, extra in EXTENDED.items():
    mine = _ended(_select(runs, long, p))
    lrs = sorted({r.overrides[a.LR] for r in mine})
    best = paired.best_lr(mine)
    grid = ", ".join(f"{lr:g}" for lr in lrs)
    if not set(extra) <= set(lrs):
      edge = ", the grid's largest, so not located" if lrs and best == lrs[-1] else ""
      out.append(f"- {p}: LR {', '.join(f'{lr:g}' for lr in extra)} after {long} steps "
                 f"(issue 69) not run yet; its best LR of {grid} is {a.fmt_lr(best)}{edge}")
    elif best is not None and lrs[0] < best < lrs[-1]:
      out.append(f"- {p}: its best LR of {grid} is {best:g}, inside the grid (located)")
    else:
      out.append(f"- {p}: its best LR of {grid} is {a.fmt_lr(best)}, still the grid's edge, so "
                 "not located (1e-2 is not tried: post-norm collapsed there at 2,400 steps)")
  return out


def ahead(d: paired.Difference, below: str, above: str) -> str:
  """Who is ahead by `d`'s 95% interval (a loss difference, A minus B): "`below` ahead" when
  it lies below zero, "`above` ahead" when above, "neither resolved ahead" otherwise."""
  side = paired.judge(d, 0.0, describe=False)  # the sign, said beside the margin's call
  return {True: f"{above} ahead", False: f"{below} ahead", None: "neither resolved ahead"}[side]


def _caught(gaps, who: str = "pre-norm") -> str:
  """When post-norm catches `who` by `train_gap`'s windows, with the last window's gap."""
  if not gaps:
    return "no train rows to read when post-norm catches " + who
  step, last = catch_step(gaps), gaps[-1][1]
  said = (f"post-norm does not catch {who} within the run" if step is None else
          f"post-norm catches {who} at step {step}")
  return f"{said} (last {CATCH_WINDOW} steps' train loss, pre minus post: {last.estimate()})"


def analyze(runs):
  runs = paired.added_seeds_ended(runs)
  m = measure(runs)
  lines = [a.protocol(runs), "", f"After {m['long']} steps, each placement at its best LR of "
           f"{', '.join(f'{lr:g}' for lr in LONG_LRS)} (clipped final eval loss, nats/token):",
           "", *a.table(["placement", "best LR", "loss"], [
               [p, a.fmt_lr(lr), a.ci(list(v.values()))] for p, (lr, v) in m["read"].items()]),
           "", *(f"Note: {n}" for n in m["edges"].values()), *([""] if m["edges"] else []),
           f"- {paired.call_text(m['final'], LOSS_MARGIN)}"]
  if m.get("gaps"):
    lines.append(f"- {_caught(m['gaps'])}; the catch step: the first window end from which "
                 f"pre-norm is no longer ahead with 95% confidence in any later window of "
                 f"{CATCH_WINDOW} steps' train loss, paired by seed")
  lines += ["", "At the matched LR (described, not the call): each LR of the grid, both "
            "placements at it.", ""]
  lines += [f"- {d.text()}; {_caught(g, 'it')}" for d, g in m["matched"].values()]
  lines += ["", *(f"- {d.text()}" for d in m["dyt"].values()),
            f"- {paired.call_text(m['dyt_call'], LOSS_MARGIN)}", "",
            paired.added_seeds_note(runs, "pre-norm DyT and LayerNorm at LR 3e-3 at each "
                                    "budget (the DyT call; the first keeps 3 seeds)"), "",
            f"Is each placement's best LR after {m['long']} steps inside the grid (issue 69: "
            "one LR above 3e-3 for post and pre; described, not the call)?", "",
            *located(runs, m["long"])]
  return lines + ["", _verdict(m)]


def _verdict(m) -> str:
  """The call, said by what was found: each statistic's interval, its side of the margin and
  of zero; when post catches pre at each LR; DyT's cost at each budget."""
  words = [paired.judge(m["final"], LOSS_MARGIN), paired.judge(m["dyt_call"], LOSS_MARGIN)]
  agrees = (True if all(w is True for w in words) else False if all(w is False for w in words)
            else "partly" if any(w is True for w in words) else None)
  side = {True: "above", False: "below", None: "across"}
  matched = "; ".join(f"at LR {lr:g} {_caught(g, 'it')}" for lr, (_, g) in m["matched"].items())
  costs = ", ".join(f"{d.estimate()} at {n}" for n, d in m["dyt"].items())
  trend = {True: "grows", False: "falls", None: "no resolved change"}[paired.judge(
      m["dyt_call"], 0.0, describe=False)]
  caveat = (f" Caveat: the best LR of {', '.join(m['edges'])} is the grid's largest or "
            "smallest, so not located." if m["edges"] else "")
  return a.verdict(agrees, f"After {m['long']} steps, each at its best LR, pre-norm minus "
                   f"post-norm is {m['final'].estimate()} nats/token, {side[words[0]]} the "
                   f"margin {LOSS_MARGIN:g}: {ahead(m['final'], 'pre-norm', 'post-norm')}; "
                   f"{matched}. DyT minus LayerNorm is {costs} steps; its cost at "
                   f"{m['long']} minus at {min(m['dyt'])} steps, {m['dyt_call'].estimate()}, "
                   f"lies {side[words[1]]} the margin ({trend} with the budget).{caveat}")


def gap_rows(runs, base) -> tuple[list, list]:
  """Per LR of the grid: pre minus post's mean over seeds (paired) at each `GAP_STEPS` eval
  step (nan where none), and whether any of its runs collapsed or diverged."""
  values, marked = [], []
  for lr in LONG_LRS:
    pre, post = (_select(runs, base * FACTOR, p, lr=lr) for p in ("pre", "post"))
    gaps = dict(gap_over_training(pre, post))
    values.append([gaps[base * f].interval[0] if base * f in gaps and gaps[base * f].per_seed
                   else math.nan for f in GAP_STEPS])
    marked.append([any(r.status in atlas.NOT_TRAINED for r in pre + post)] * len(GAP_STEPS))
  return values, marked


def figures(runs, sweep_dir):
  """`gap_heatmap.webp`: pre minus post over LR x training step (question 5);
  `dyt_heatmap.webp`: DyT minus LayerNorm at each budget (question 7). Means over seeds."""
  from transformer.report import figures as report_figures
  if not runs:
    return []
  base = min(r.overrides[STEPS] for r in runs)
  plt = report_figures.load_pyplot()
  values, marked = gap_rows(runs, base)
  fig = atlas.heatmap(plt, values, marked, [f"LR {lr:g}" for lr in LONG_LRS],
                      [str(base * f) for f in GAP_STEPS], "training step",
                      "pre-norm minus post-norm eval loss (negative: pre ahead)", "nats/token",
                      symmetric=True)
  report_figures.save_figure(plt, fig, f"{sweep_dir}/{FIGURE}", dpi=90)
  cost = measure(runs)["dyt"]
  fig = atlas.heatmap(plt, [[d.interval[0] if d.per_seed else math.nan
                             for d in cost.values()]], [[False] * len(cost)],
                      [f"pre-norm, LR {LONG_LRS[0]:g}"], [str(n) for n in cost],
                      "training steps", "DyT minus LayerNorm final eval loss", "nats/token",
                      symmetric=True)
  report_figures.save_figure(plt, fig, f"{sweep_dir}/{DYT_FIGURE}", dpi=90)
  return [("Pre-norm minus post-norm eval loss over training, mean over seeds (paired), at "
           "each LR (hatched, x: some run collapsed or diverged)", FIGURE),
          ("DyT minus LayerNorm final eval loss at each budget, mean over seeds (paired)",
           DYT_FIGURE)]


def summarize(runs):
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS, "figure": FIGURE, "placements": {},
          "numbers": [m["final"].text(), m["dyt_call"].text()]}


THRESHOLDS = paired.margin_thresholds((0.01, 0.05), matched_lr=False)
THRESHOLDS_NOT_READ = {**paired.NOT_READ, paired.MATCHED_LR.label: "the long runs are read at "
                       "each placement's best LR; DyT at its one LR"}

REGISTRATION = {
    "pre-norm minus post-norm after 9,600 steps above 0.02 nats/token":
        "pre-registered at 49f1077, before the study's 24 new runs; its LR grid extended to "
        "5e-3 for post and pre after them (issue 69), before any 5e-3 run, the call unchanged; "
        "the 5e-3 runs trained 2026-12-06 from a clean worktree at 14c3518",
    "DyT's cost at 9,600 minus at 600 steps above 0.02 nats/token":
        "pre-registered at 49f1077, before the study's 24 new runs (its 600- and 2,400-step "
        "DyT and LayerNorm runs are norms', lr_sensitivity's and long_training's, linked, whose "
        f"results were already committed); {paired.FIVE_SEEDS}; seeds 3 and 4 trained "
        "2026-12-06 from a clean worktree at 14c3518"}
