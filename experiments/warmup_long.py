"""warmup_stability's call past early training (issue 46): its decisive cells at 2,400 steps.

  python launch.py --mode=sweep --sweep=experiments/warmup_long.py:cpu \
      --sweep_dir=runs/studies/warmup_long --parallel=2 \
      --reuse_runs_from=experiments/results/long_training

warmup_stability judges the cost of dropping warm-up after the protocol's 600 steps (0.5
tokens per parameter). Here the same call after 2,400 steps: post- and pre-norm, without warm-up
and with the protocol's (10% of the run, 240 steps), over the three grid LRs around each one's
best (`WINDOW`), 3 seeds. The runs with warm-up are long_training's (linked); the 18 without are
new.

The call, warmup_stability's two halves (issue 68, post hoc): per seed, each placement's cost
of dropping warm-up (the clipped final eval loss without warm-up minus with it, each setting at
its own best LR of the window); post-norm's half holds when its 95% interval lies above
`LOSS_MARGIN` (0.05 nats/token), pre-norm's when below; *agrees* when both hold, *partly* when
one does (`warmup_stability.two_halves`). The call fixed before the new runs, post-norm's cost
minus pre-norm's against the margin (`experiments/paired.py`), is described beside it.

Extended after those 18 runs, the call unchanged: post-norm's best LR fell on its window's
lowest LR without warm-up (3e-4) and on its highest with it (3e-3), so neither optimum was
located. One LR beyond each edge (`EXTENDED`): 1e-4 without warm-up (3 new runs) and 1e-2 with
it (long_training's runs, linked).

Seeds 0-2 are the exploratory set the halves were chosen on; seeds 3-5 are the confirmatory set
(issue 68 point 7), fixed with the halves and their margin unchanged before their runs and
listed after every earlier point: the same 14 cells (each window and its extension, without
and with warm-up), 42 new 2,400-step runs, none of them run before. Once any has run the
verdict reads them alone (the summary's atlas follow-up too), and the same test on seeds 0-2 is
described below it.
"""

from experiments import analysis as a
from experiments import atlas_long, paired, warmup_placement, warmup_stability
from experiments.presets import PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.report.seed_sets import seed_list
from transformer.sweep import preset, product

CLAIM = warmup_stability.CLAIM
FACTOR = 4  # long_training's length
WINDOW = {"cpu": {"post": [3e-4, 1e-3, 3e-3], "pre": [1e-3, 3e-3, 1e-2]},
          "gpu": {"post": [1e-4, 3e-4, 1e-3], "pre": [3e-4, 1e-3, 3e-3]}}
# LRs beyond a window's edge where its best fell, per (placement, warm-up steps).
EXTENDED = {"cpu": {("post", 0): [1e-4], ("post", 240): [1e-2]}, "gpu": {}}
LOSS_MARGIN = warmup_stability.LOSS_MARGIN
WARM = "optim.warmup_steps"
CONFIRMATORY_SEEDS = [3, 4, 5]  # the halves' seeds since issue 68, fixed before their runs


def get_sweep(size: str = "cpu"):
  """Without warm-up first (the new runs), then with the protocol's (long_training's), then
  the `EXTENDED` LRs; then all of them again on the confirmatory seeds (the first 42 points
  keep their names and order)."""
  base = preset(PROTOCOL_SIZES, size)
  fixed = protocol(size, varied=(WARM,), factor=FACTOR)
  warmups = (0, protocol(size, factor=FACTOR)[WARM])
  lrs = {(p, w): WINDOW[size][p] for w in warmups for p in ("post", "pre")}
  beyond = {key: extra for key, extra in EXTENDED[size].items() if key in lrs}
  return [point for seeds in (PROTOCOL_SEEDS, CONFIRMATORY_SEEDS) for table in (lrs, beyond)
          for (p, w), grid in table.items()
          for point in product(base, [fixed], {"model.norm_placement": [p]}, {WARM: [w]},
                               {"optim.learning_rate": grid}, {"seed": seeds})]


def measure(runs) -> dict:
  warmups = sorted({r.overrides[WARM] for r in runs})
  sets = {(p, w): a.select(runs, model__norm_placement=p, optim__warmup_steps=w)
          for p in ("post", "pre") for w in warmups}
  costs = warmup_stability.costs(runs, sets, warmups[0], warmups[-1])
  call = paired.difference("post-norm's cost minus pre-norm's", costs["post"][0].per_seed,
                           costs["pre"][0].per_seed)
  return {"costs": costs, "call": call, "warmups": warmups}


def analyze(runs):
  """The two halves (`_halves`), read on the confirmatory seeds alone once they have run, the
  exploratory seeds' reading described below the verdict; each set's costs above it."""
  return [a.protocol(runs), "", *a.confirmatory_reading(runs, CONFIRMATORY_SEEDS, _reading)]


def _reading(runs, describe: bool = True) -> tuple[list, object, str, list]:
  """One set of seeds' costs of dropping warm-up, the halves' verdict on them, its sentence and
  nothing after it (`describe`: `paired.judge`'s, True for the verdict's set)."""
  m = measure(runs)
  lines = [f"Cost of dropping warm-up after {runs[0].num_steps} steps (clipped final eval loss "
           f"without warm-up minus with {m['warmups'][-1]} steps), each setting at its own best "
           "LR of the window, paired by seed:", ""]
  for _, (d, lr0, lr1) in sorted(m["costs"].items()):
    lines.append(f"- {d.text()} (best LR {a.fmt_lr(lr0)} without warm-up, {a.fmt_lr(lr1)} "
                 "with it)")
  edges = [n for p in ("post", "pre") for w in m["warmups"]
           for n in [a.edge_note(f"{p} at warm-up {w}: best LR",
                                 paired.best_lr(a.select(runs, model__norm_placement=p,
                                                         optim__warmup_steps=w)),
                                 a.select(runs, model__norm_placement=p))] if n]
  lines += [*(f"- {n}" for n in edges), ""]
  agrees, said = _halves(m, describe)
  return lines, agrees, (f"After {runs[0].num_steps} steps: {said} (nats/token, mean ± 95% CI "
                         "over seeds; each half its own call, as warmup_stability's since issue "
                         f"68). Described, not called: {m['call'].text()}."), []


def _halves(m, describe: bool = True) -> tuple:
  """(verdict, sentence): warmup_stability's two halves on this study's costs (`describe`:
  `paired.judge`'s)."""
  return warmup_stability.two_halves({p: {"": m["costs"][p][0]} for p in
                                      warmup_stability.JUDGED if p in m["costs"]}, LOSS_MARGIN,
                                     describe)


# Past early training (issue 69): the atlas question "Which placements need warm-up?"
# (warmup_placement, 600 steps), each placement's cost of dropping the protocol's warm-up (10%
# of the run: 60 of 600 steps there, 240 of 2,400 here), quoted from warmup_placement's report
# (the cost against warm-up 60, 3 seeds; a test checks each quote in its seed set's section)
# beside this study's for post and pre, worded by atlas_long's pre-registered rule against
# +-LOSS_MARGIN (`atlas_long.word`). Set after both studies' runs were seen: a description, not
# a call. Each study's seeds in the same role (set 2026-12-06, before this study's confirmatory
# answers were read): its exploratory seeds 0-2 beside this study's 0-2 (`AT_600`), its
# confirmatory 6-8 beside this study's confirmatory 3-5 (`AT_600_CONFIRMATORY`); mix, not run
# on warmup_placement's confirmatory seeds, keeps its 0-2 quote.
FOLLOWS = ("warmup_placement",)
AT_600 = {"post": (0.290, 0.040), "pre": (0.078, 0.064), "peri": (0.076, 0.038),
          "deepnorm": (-0.032, 0.028), "mix": (0.129, 0.074), "admin": (0.180, 0.050)}
AT_600_CONFIRMATORY = {"post": (0.266, 0.101), "pre": (0.071, 0.005), "peri": (0.073, 0.081),
                       "deepnorm": (-0.046, 0.047), "admin": (0.148, 0.095)}
AT_600_SEEDS = (seed_list(PROTOCOL_SEEDS),  # warmup_placement's exploratory, confirmatory seeds
                seed_list(warmup_placement.CONFIRMATORY_SEEDS))
NOT_FOLLOWED = "it runs post and pre only"


def follow_ups(m: dict, confirmatory: bool = False) -> dict:
  """The summary's `"follow_ups"`: per warmup_placement placement `(answer, 600-step text,
  2,400-step text or None, word)`, each text naming its seeds; None and NOT_FOLLOWED for a
  placement not run here. `m`: `measure` of this study's `confirmatory` seeds or its
  exploratory ones, quoted beside warmup_placement's seeds in the same role."""
  rows, own = [], seed_list(CONFIRMATORY_SEEDS if confirmatory else PROTOCOL_SEEDS)
  for p, quote in AT_600.items():
    later = confirmatory and p in AT_600_CONFIRMATORY
    mean, half = AT_600_CONFIRMATORY[p] if later else quote
    d = m["costs"][p][0] if p in m["costs"] else None
    ran = bool(d and d.per_seed)
    before = atlas_long.interval_side(mean - half, mean + half, LOSS_MARGIN)
    rows.append((f"{p}'s cost of dropping the warm-up (10% of the run)",
                 f"{mean:+.3f} ± {half:.3f} (seeds {AT_600_SEEDS[later]})",
                 f"{d.estimate()} (seeds {own})" if ran else None,
                 atlas_long.word(before, atlas_long.side(d, LOSS_MARGIN)) if ran
                 else NOT_FOLLOWED))
  return {"warmup_placement": rows}


def summarize(runs):
  """The summary's entry: the verdict, and the verdict's seeds' halves and follow-ups."""
  judged = a.confirmatory_split(runs, CONFIRMATORY_SEEDS)[0]
  m = measure(judged)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "numbers": [_halves(m, describe=False)[1],
                                       f"described: {m['call'].text()}"],
          "figure": "final_vs_optim_learning_rate.webp", "placements": {},
          "follow_ups": follow_ups(m, any(r.seed in CONFIRMATORY_SEEDS for r in judged))}


THRESHOLDS = paired.margin_thresholds()  # its matched LR: 3e-3, in both windows
THRESHOLDS_NOT_READ = paired.NOT_READ

# Which calls were fixed before their data (`transformer/study.py`; the report's `## Calls`):
# from `git log --follow -p` of this file and the runs' provenance.
REGISTRATION = {
    "post-norm's cost of dropping warm-up above 0.05 and pre-norm's below it, after 2400 steps":
        "post hoc: warmup_stability's two halves (d1c0b9d, issue 68), set after these runs "
        "were seen; they replace post-norm's cost minus pre-norm's, pre-registered at b84f151 "
        "(before the first run, 2026-11-27 22:43; df3a278 widened the LR windows) and now "
        "described; its check on new data: the confirmatory seeds 3-5, fixed at 9067840 "
        "(2026-12-03 18:04) with the halves and their margin unchanged, before their runs, "
        "which the verdict reads alone: the 42 ran 2026-12-06 15:12 to 20:40 (15:12-15:25, "
        "15:53-16:17, 16:18-18:40, 18:50-18:51 and 19:37-20:40, two at a time; runs stopped "
        "between windows resumed from their checkpoints) from a clean worktree at 9067840"}
