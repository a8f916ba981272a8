"""Does the post- vs pre-norm gap depend on the optimizer? AdamW, Lion and Muon (issue 70).

  python launch.py --mode=sweep --sweep=experiments/optimizer_gap.py:cpu \
      --sweep_dir=runs/studies/optimizer_gap --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity

Every atlas answer so far was measured with AdamW. This study asks whether post-norm's deficit
against pre-norm is a property of the placement or of AdamW: the protocol's model, budget,
warm-up, LR grid and seeds (`presets.py`), post- and pre-norm, under `optim.name` adamw, lion
and muon (`transformer/train/optim.py`: Lion, Chen et al. 2023; Muon on the hidden matrices with
Adam on the rest, Jordan et al. 2024, as optax.contrib.muon builds it). Each optimizer keeps
the config's other defaults (b1 0.9, b2 0.98, weight decay 0.1 on kernels and embeddings,
gradient clipping at 1). AdamW's 30 points are lr_sensitivity's runs (linked: a config saved
before `optim.name` existed is an adamw run); Lion's and Muon's 60 are new.

The calls, fixed in this file before any Lion or Muon run (pre-registered; see the commit
that added it):
- the gap under optimizer o, per seed: post-norm's clipped final eval loss minus pre-norm's,
  each placement at its own best LR of the grid under o (`paired.read`);
- for o in (lion, muon), the statistic is gap_o minus gap_adamw, paired by seed. It says
  *the gap depends on o* when its 95% interval lies entirely outside [-M, M], *the same within
  M* when it lies entirely inside, *not resolved* otherwise; M = `LOSS_MARGIN`, 0.05
  nats/token (about a third of AdamW's 600-step gap in lr_sensitivity).
- The claim tested is the null, "the gap is the placement's, not the optimizer's": it
  *agrees* when both optimizers give the same gap within M, *disagrees* when either gives a gap
  that differs by more than M, and is *inconclusive* otherwise. Each half is stated on its own.
A best LR on the grid's edge is named in the report (the optimum is then not located: the
grid is the protocol's, shared by all three, with no optimizer-specific extension).

Not tested: the optimizers' own tuned hyperparameters (Lion's authors use a 3-10x smaller LR
and larger weight decay than AdamW's; the grid covers the LR, not the decay), other budgets
(600 steps is early training, issue 69), and other optimizers (`optim.name` also offers adam,
sgd and adafactor).
"""

from experiments import analysis as a
from experiments import atlas, paired
from experiments.presets import PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS, PROTOCOL_SIZES
from experiments.presets import protocol
from transformer.sweep import preset, product

CLAIM = ("Open question (issue 70): post-norm's deficit against pre-norm is the placement's, "
         "not AdamW's: under Lion and under Muon, each placement at its own best LR, the gap "
         "is the same as under AdamW within 0.05 nats/token.")
OPTIMIZER = "optim.name"
OPTIMIZERS = ["lion", "muon", "adamw"]  # the new runs first; adamw's are linked
COMPARED = ["lion", "muon"]  # each against adamw
PLACEMENTS = ["post", "pre"]
LOSS_MARGIN = 0.05  # nats/token: |gap_o - gap_adamw| above it depends, below it is the same
FIGURE = "loss_heatmap.webp"

ATLAS = "Does the post- vs pre-norm gap depend on the optimizer (AdamW, Lion, Muon)?"


# The first 90 runs put two bests on the grid's edge (Lion post-norm at 3e-4, its lowest; Muon
# pre-norm at 3e-2, its highest), where the protocol wants each optimum inside the grid: one LR
# beyond each edge was added after those runs, before the call was read again (the statistic
# and margin are the pre-registered ones; REGISTRATION says so).
EXTENDED = {"cpu": {("lion", "post"): [1e-4], ("muon", "pre"): [1e-1]}, "gpu": {}}


def get_sweep(size: str = "cpu"):
  """The protocol's model, budget, warm-up, LR grid and seeds, per optimizer and placement;
  then `EXTENDED`'s LRs beyond the grid's edge."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  points = product(base, [protocol(size)], {OPTIMIZER: OPTIMIZERS}, {a.PLACEMENT: PLACEMENTS},
                   {a.LR: PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})
  return points + [point for (o, p), lrs in EXTENDED[size].items() for point in product(
      base, [protocol(size)], {OPTIMIZER: [o]}, {a.PLACEMENT: [p]}, {a.LR: lrs},
      {"seed": PROTOCOL_SEEDS})]


def _runs(runs, optimizer: str, placement: str):
  return [r for r in runs if r.overrides.get(OPTIMIZER) == optimizer
          and r.overrides.get(a.PLACEMENT) == placement]


def measure(runs) -> dict:
  """Per optimizer and placement the LR read and `{seed: loss}` there; per optimizer the gap
  (post minus pre, per seed); per compared optimizer its gap minus AdamW's."""
  lrs = {r.overrides[a.LR] for r in runs}
  matched = next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None)
  read = {(o, p): paired.read(_runs(runs, o, p), matched)
          for o in OPTIMIZERS for p in PLACEMENTS}
  gaps = {o: paired.difference(f"{o}: post minus pre", read[(o, "post")][1],
                               read[(o, "pre")][1]) for o in OPTIMIZERS}
  calls = {o: paired.difference(f"gap under {o} minus gap under adamw", gaps[o].per_seed,
                                gaps["adamw"].per_seed) for o in COMPARED}
  return {"read": read, "gaps": gaps, "calls": calls}


def judge_same(d: paired.Difference, margin: float):
  """True when the interval lies inside (-margin, margin) (the same within the margin), False
  when it lies entirely outside [-margin, margin] (depends), None otherwise or under 2 seeds."""
  if len(d.per_seed) < 2:
    return None
  mean, half = d.interval
  lo, hi = mean - half, mean + half
  if -margin < lo and hi < margin:
    return True
  if lo > margin or hi < -margin:
    return False
  return None


def finding(d: paired.Difference, margin: float) -> str:
  """What the numbers found for one compared optimizer, as a sentence part."""
  word = {True: f"the same as under adamw within {margin:g}",
          False: f"differs from adamw's by more than {margin:g}",
          None: f"not resolved against the margin {margin:g}"}[judge_same(d, margin)]
  return f"{d.text()}: the gap {word}"


def overall(m: dict):
  """The claim's call from the two halves (see the module docstring)."""
  halves = [judge_same(m["calls"][o], LOSS_MARGIN) for o in COMPARED]
  if any(h is False for h in halves):
    return False
  return True if all(halves) else None


def analyze(runs):
  """The table of LRs read and losses, the gaps, the two halves and the verdict."""
  m = measure(runs)
  rows = [[o, p, a.fmt_lr(m["read"][(o, p)][0]), a.ci(m["read"][(o, p)][1].values()),
           a.status_counts(_runs(runs, o, p))] for o in OPTIMIZERS for p in PLACEMENTS]
  edges = [n for o in OPTIMIZERS for p in PLACEMENTS for n in [a.edge_note(
      f"{o}, {p}: best LR", m["read"][(o, p)][0], _runs(runs, o, p))] if n]
  return [a.protocol(runs), "",
          "Per optimizer and placement: the LR read (its own best LR of the grid) and the "
          "clipped final eval loss there (nats/token, mean ± 95% CI over seeds):", "",
          *a.table(["optimizer", "placement", "LR read", "loss there", "runs"], rows), "",
          *(f"- {m['gaps'][o].text()}" for o in OPTIMIZERS), "",
          *(f"- {n}" for n in edges), *([""] if edges else []),
          "The two halves, each paired by seed:", "",
          *(f"- {finding(m['calls'][o], LOSS_MARGIN)}." for o in COMPARED), "",
          a.verdict(overall(m), "; ".join(finding(m["calls"][o], LOSS_MARGIN)
                                          for o in COMPARED) + ".")]


def figures(runs, sweep_dir):
  """`loss_heatmap.webp`: (optimizer, placement) x LR, the mean clipped final loss."""
  rows = [(o, p) for o in OPTIMIZERS for p in PLACEMENTS]
  return atlas.loss_heatmap_figure(
      runs, sweep_dir, FIGURE, lambda r: (r.overrides.get(OPTIMIZER), r.overrides[a.PLACEMENT]),
      rows, [f"{o} {p}" for o, p in rows])


def summarize(runs):
  """The study's entry in experiments/results/README.md."""
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS, "figure": FIGURE,
          "numbers": [*(m["gaps"][o].text() for o in OPTIMIZERS),
                      *(m["calls"][o].text() for o in COMPARED)]}


THRESHOLDS = paired.margin_thresholds((0.03, 0.1))
THRESHOLDS_NOT_READ = paired.NOT_READ

_EDGES = ("; the grid was extended by one LR beyond two edges (`EXTENDED`: Lion post-norm 1e-4, "
          "Muon pre-norm 1e-1) after its 90 runs were seen, before the call was read again, "
          "with the statistic and margin unchanged")
REGISTRATION = {
    "gap under lion minus gap under adamw": "pre-registered at 378bd3f, the commit that added "
                                            "this file, before any Lion or Muon run" + _EDGES,
    "gap under muon minus gap under adamw": "pre-registered at 378bd3f, the commit that added "
                                            "this file, before any Lion or Muon run" + _EDGES}
