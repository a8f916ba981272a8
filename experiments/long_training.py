"""Study 10: does the ordering of post, pre and peri at the protocol's length hold over 4x the
steps?

  python launch.py --mode=sweep --sweep=experiments/long_training.py:cpu \
      --sweep_dir=runs/studies/long_training --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

Post, pre and peri on the protocol's model (`presets.protocol`), 3 seeds, trained for the
protocol's length (600 steps on cpu: lr_sensitivity's runs, the whole LR grid, reused) and for
`FACTOR` times as long (warm-up the same 10% of the run). The long runs cover a window of the
same grid, `WINDOW`: each placement's best LR at the protocol's length and the grid LRs on
either side, so that a longer run's optimum, usually a little lower, can be located. The
windows are centred on lr_sensitivity's protocol runs (pre: 3e-3, 1.80 nats against 1.89 at
1e-2; post and peri as measured while the protocol was set, 1e-3 and pre's) and are checked
against its full results before any long run starts. Post-norm's window was then widened by
one grid step, to 1e-2: its first long runs (2026-11-25) put its best at the window's top,
3e-3, so the optimum was not located, which the protocol asks for. Each placement is compared
at its own best LR of each length (the lowest mean clipped final loss over seeds; the report
says when it is at the edge of what was run) and, beside it, at one LR every window holds,
`MATCHED`.
"""

from experiments import analysis as a
from experiments import paired
from experiments.presets import (PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS,
                                 PROTOCOL_SIZES, protocol)
from transformer.sweep import preset, product
from transformer.report.robustness import Threshold

CLAIM = ("Xiong et al. 2020: pre-norm converges faster than post-norm; Liu et al. 2020: "
         "post-norm, when it trains, often ends better than pre-norm. So the ordering after "
         "the protocol's run (lr_sensitivity's placements at their best LRs) may not be the "
         "final one: this study checks whether it holds over several times the steps, each "
         "placement retuned over an LR window at each length.")
PLACEMENTS = ["post", "pre", "peri"]
FACTOR = 4
# The long runs' LRs: the best at the protocol's length and its grid neighbours (cpu), post's
# widened to 1e-2 after its long runs' best came out at 3e-3, the window's top; the gpu preset
# has not been run, so its long runs take the whole grid.
WINDOW = {"cpu": {"post": [3e-4, 1e-3, 3e-3, 1e-2], "pre": [1e-3, 3e-3, 1e-2],
                  "peri": [1e-3, 3e-3, 1e-2]},
          "gpu": {p: list(PROTOCOL_LRS["gpu"]) for p in PLACEMENTS}}
MATCHED = PROTOCOL_MATCHED_LR  # in every placement's window: the matched-LR comparison
LOSS_MARGIN = 0.02  # nats/token: a gap smaller than this (95% CI) is no ordering


def get_sweep(size: str = "cpu"):
  """The protocol's runs of each placement over the whole LR grid (lr_sensitivity's), then
  the `FACTOR`-times-longer runs over each placement's `WINDOW`."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  short = product(base, [protocol(size)], {"model.norm_placement": PLACEMENTS},
                  {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})
  long = [point for p in PLACEMENTS for point in product(
      base, [protocol(size, factor=FACTOR)], {"model.norm_placement": [p]},
      {"optim.learning_rate": WINDOW[size][p]}, {"seed": PROTOCOL_SEEDS})]
  return short + long


def paired_gap(losses: dict, p: str, q: str) -> tuple[float, float]:
  """q's final loss minus p's, paired by seed: (mean, 95% CI half-width); NaNs with fewer than
  two shared seeds. Positive: p ended better."""
  gap = [losses[q][s] - losses[p][s] for s in losses.get(p, {}) if s in losses.get(q, {})]
  return a.mean_ci(gap) if len(gap) > 1 else (float("nan"), float("nan"))


def ordering(losses: dict) -> tuple[list[str], dict]:
  """Placements from best to worst by mean loss, and for every pair (p ahead of q) whether
  the gap is resolved (paired by seed, 95% CI above LOSS_MARGIN)."""
  means = {p: a.mean_ci(list(v.values()))[0] for p, v in losses.items() if v}
  order = sorted(means, key=means.get)
  resolved = {}
  for i, p in enumerate(order):
    for q in order[i + 1:]:
      m, h = paired_gap(losses, p, q)
      resolved[p, q] = h == h and m - h > LOSS_MARGIN
  return order, resolved


def _fate(losses_long: dict, p: str, q: str) -> str:
  """What became after the long runs of a pair that the short runs resolved (p ahead):
  `kept` (p still ahead by more than LOSS_MARGIN with 95% confidence), `shrunk` (still ahead,
  the CI above 0 but not above the margin), `reversed` (q ahead, the CI below 0) or
  `unresolved` (the CI holds 0)."""
  m, h = paired_gap(losses_long, p, q)
  if not h == h:
    return "unresolved"
  if m - h > LOSS_MARGIN:
    return "kept"
  if m - h > 0:
    return "shrunk"
  return "reversed" if m + h < 0 else "unresolved"


def _matched_lr(runs) -> float | None:
  """The LR every placement ran at every length (`MATCHED` when the runs hold it); None when
  there is none."""
  common = None
  for p in PLACEMENTS:
    for n in {r.num_steps for r in runs}:
      lrs = {r.overrides[a.LR] for r in a.select(runs, model__norm_placement=p)
             if r.num_steps == n}
      if lrs:
        common = lrs if common is None else common & lrs
  if not common:
    return None
  preferred = [lr for lr in MATCHED.values() if lr in common]
  return preferred[0] if preferred else None


def measure(runs):
  """Per run length and placement: the best LR (`analysis.best_lr` over the LRs run at that
  length), the clipped final loss by seed there and at the matched LR, and the edge notes."""
  steps = sorted({r.num_steps for r in runs})
  placements = [p for p in PLACEMENTS if a.select(runs, model__norm_placement=p)]
  matched = _matched_lr(runs)
  out = {"steps": steps, "placements": placements, "matched": matched, "best": {},
         "losses": {}, "at_matched": {}, "lrs": {}, "notes": [], "untuned": []}

  def by_seed(rs, lr):
    return {r.seed: a.clipped_final_loss(r) for r in rs
            if r.overrides[a.LR] == lr and a.clipped_final_loss(r) is not None}
  for n in steps:
    out["best"][n], out["losses"][n], out["at_matched"][n], out["lrs"][n] = {}, {}, {}, {}
    for p in placements:
      mine = [r for r in a.select(runs, model__norm_placement=p) if r.num_steps == n]
      best = a.best_lr(mine)
      out["lrs"][n][p] = sorted({r.overrides[a.LR] for r in mine})
      out["best"][n][p] = best
      out["losses"][n][p] = by_seed(mine, best) if best is not None else {}
      out["at_matched"][n][p] = by_seed(mine, matched) if matched is not None else {}
      if len(out["lrs"][n][p]) == 1:
        out["untuned"].append(f"{p} after {n} steps")
        continue
      note = a.edge_note(f"{p}'s best LR after {n} steps", best, mine)
      if note:
        out["notes"].append(note)
  if out["untuned"]:  # one LR: no optimum to locate (the runs from before the protocol)
    out["notes"].append(f"One LR only, so not tuned: {', '.join(out['untuned'])}.")
  return out


def _best_lr_lines(runs, m) -> list[str]:
  """The protocol line; per placement, the LRs run at each length, the best and its clipped
  final loss; and the edge notes."""
  steps, losses = m["steps"], m["losses"]
  lr_list = lambda lrs: ", ".join(f"{lr:g}" for lr in lrs)
  rows = [[p, *(f"{lr_list(m['lrs'][n][p])} → **{a.fmt_lr(m['best'][n][p])}**" for n in steps),
           *(a.ci(losses[n][p].values()) for n in steps),
           a.status_counts(a.select(runs, model__norm_placement=p))] for p in m["placements"]]
  lines = [a.protocol(runs), "",
           "Each placement at its best LR of each length (LRs run → the best, by mean clipped "
           "final loss over seeds), and its clipped final eval loss there (nats/token, mean ± "
           "95% CI over seeds):", "",
           *a.table(["placement", *(f"LRs @ {n} steps" for n in steps),
                     *(f"loss @ {n} steps" for n in steps), "runs"], rows), ""]
  return lines + [f"Note: {note}" for note in m["notes"]] + ([""] if m["notes"] else [])


def _gap_lines(m) -> list[str]:
  """Every pair's gap, paired by seed, after each length at the best LRs and at the matched
  LR."""
  steps, placements, losses = m["steps"], m["placements"], m["losses"]
  pairs = [(p, q) for i, p in enumerate(placements) for q in placements[i + 1:]]
  gap_columns = [(f"gap @ {n} steps, best LRs", losses[n]) for n in steps]
  if m["matched"] is not None:
    gap_columns += [(f"gap @ {n} steps, LR {m['matched']:g}", m["at_matched"][n])
                    for n in steps]
  return ["Gap between two placements (the second's loss minus the first's, paired by seed, "
          "mean ± 95% CI; positive: the first ended better), each at its best LR"
          + (" and at the one LR all of them ran at both lengths:" if m["matched"] is not None
             else " (no LR was run by all of them at both lengths):"), "",
          *a.table(["pair", *(c for c, _ in gap_columns)],
                   [[f"{q} − {p}", *(a.fmt(*paired_gap(v, p, q)) for _, v in gap_columns)]
                    for p, q in pairs]), ""]


def _ordering_lines(m) -> list[str]:
  """The gaps each length resolves, what the long runs made of those the short runs
  resolved, and the verdict."""
  losses = m["losses"]
  short, long = m["steps"][0], m["steps"][-1]
  (o_short, r_short), (o_long, r_long) = ordering(losses[short]), ordering(losses[long])
  fmt = lambda r: ", ".join(f"{p} < {q}" for (p, q), ok in r.items() if ok) or "none"
  lines = [f"Gaps resolved (above {LOSS_MARGIN} nats/token with 95% confidence, paired by "
           f"seed) after {short} steps: {fmt(r_short)}; after {long}: {fmt(r_long)}.", ""]
  said = lambda p, q: (f"{p} < {q} ({a.fmt(*paired_gap(losses[short], p, q))} after "
                       f"{short} steps, {a.fmt(*paired_gap(losses[long], p, q))} after {long})")
  fates = {pq: _fate(losses[long], *pq) for pq, ok in r_short.items() if ok}
  for (p, q), n in ((pq, n) for pq in fates for n in (short, long)):
    paired.describe_seeds(paired.difference(f"{q} − {p} after {n} steps", losses[n][q],
                                            losses[n][p]), LOSS_MARGIN)
  by = {f: [said(*pq) for pq, g in fates.items() if g == f]
        for f in ("kept", "shrunk", "reversed", "unresolved")}
  parts = [f"{name}: {'; '.join(by[f])}" for f, name in (
      ("kept", "kept"),
      ("shrunk", "sign kept (95% CI above 0), no longer resolved above the margin"),
      ("reversed", "reversed"), ("unresolved", "no longer resolved")) if by[f]]
  text = f"Of the gaps the {short}-step runs resolve, after {long} steps: " + "; ".join(parts) + "."
  if m["notes"]:  # an optimum not located: that placement may do better than its best here
    text += " Caveat: " + " ".join(m["notes"])
  if not fates:
    return lines + [a.verdict(None, f"After {short} steps no gap is resolved: there is no "
                              "ordering to keep.")]
  if len(by["kept"]) == len(fates):
    return lines + [a.verdict(True, f"The {short}-step ordering holds after {long} steps. "
                              + text)]
  if not by["kept"] and not by["shrunk"] and not by["reversed"]:
    return lines + [a.verdict(None, text + " The long runs neither confirm nor reverse the "
                              "ordering.")]
  if o_long[0] != o_short[0] and r_long.get((o_long[0], o_short[0])):
    return lines + [a.verdict(False, f"After {long} steps {o_long[0]} is best, not "
                              f"{o_short[0]}: the short-run ordering does not hold. " + text)]
  return lines + [a.verdict("partly", text)]


def analyze(runs):
  """Final clipped eval loss of each placement at its best LR after the short and the long
  run (mean ± 95% CI over seeds), every pair's gap paired by seed after each, and whether the
  long runs keep the gaps the short runs resolved: `kept` above LOSS_MARGIN, only `shrunk`
  (the sign kept), `reversed` (the sign flipped, 95% CI) or `unresolved`. The same gaps at the
  matched LR are reported beside them."""
  m = measure(runs)
  lines = _best_lr_lines(runs, m)
  if len(m["steps"]) < 2:
    return lines + [a.verdict(None, "Needs both run lengths.")]
  return lines + _gap_lines(m) + _ordering_lines(m)


def summarize(runs):
  """The summary's entry (transformer/report/summary.write_summary): the verdict, each
  placement's loss at its best LR after each run length, and the learning curves."""
  lines = analyze(runs)
  word, said = a.verdict_of(lines)
  order = [l for l in lines if l.startswith("Gaps resolved")]
  m = measure(runs)
  numbers = [said, *order]
  for p in m["placements"]:
    numbers.append(f"{p}: " + "; ".join(
        f"{a.ci(m['losses'][n][p].values())} after {n} steps (LR {a.fmt_lr(m['best'][n][p])})"
        for n in m["steps"]))
  return {"verdict": word, "numbers": numbers, "figure": "curves.webp"}


# What the verdict's call depends on, recomputed at its neighbours in the report's `## Robustness`
# (transformer/report/robustness.py; the shared ones are defined in experiments/analysis.py).
THRESHOLDS = (a.CONFIDENCE,
              Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", (0.01, 0.05)))
THRESHOLDS_NOT_READ = {a.COLLAPSE.label: a.COLLAPSE_NOT_READ}

# Which calls were fixed before their data (`transformer/study.py`; the report's `## Calls`):
# from `git log --follow -p` of this file and the runs' provenance.
REGISTRATION = {
    "the 600-step ordering kept after 2400 steps":
        "pre-registered at 9821b15, which put the call under the protocol (each placement at "
        "its best LR of each length; the fates of 31c5b8f: a gap resolved above LOSS_MARGIN "
        "0.02, fixed at b455241, kept, shrunk or reversed) before the protocol's first run "
        "(lr_sensitivity's 600-step runs, 2026-11-25 12:32); the fates were written after the "
        "old recipe's 30 runs (2026-11-23), which are not in these results, and post-norm's "
        "window was widened after its first 2400-step runs (9ffe32c)"}
