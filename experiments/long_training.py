"""Study 10: does the 200-step ordering of post, pre and peri hold over 10x the steps?

  python launch.py --mode=sweep --sweep=experiments/long_training.py:cpu \
      --sweep_dir=runs/studies/long_training --parallel=2

Post, pre and peri, each at its best LR of lr_sensitivity, on a wider model on the cpu preset (d_model 128, against the training studies' 64; the gpu
preset keeps its 512), trained for the training studies' length
and for 10x it, warm-up 10% of the run in both, x 5 seeds. The short runs give the ordering
on this model; the long ones test whether it holds.
"""

from experiments import analysis as _analysis
from experiments.presets import STEPS, TRAINING_SIZES, WARMUP, training
from transformer.sweep import preset, product
from transformer.sweep.robustness import Threshold

CLAIM = ("Xiong et al. 2020: pre-norm converges faster than post-norm; Liu et al. 2020: "
         "post-norm, when it trains, often ends better than pre-norm. So the early ordering "
         "(lr_sensitivity, 200 steps: peri < pre < post in final loss) may not be the final one: "
         "this study checks whether it holds over 10x the steps.")
PLACEMENTS = ["post", "pre", "peri"]
BEST_LR = {"post": 1e-3, "pre": 1e-2, "peri": 1e-2}  # lr_sensitivity (cpu); gpu: not yet run
# cpu: twice the training studies' width; gpu: the gpu preset's width (d_model 512).
WIDTH = {"cpu": {"model.d_model": 128, "model.num_heads": 4, "model.d_ff": 512}, "gpu": {}}
# One eval / checkpoint / log / diagnostics cadence for both lengths, so that the points differ
# only in length and warm-up (the long runs log 10x as many rows).
CADENCE = {"cpu": {"train.eval_every": 50, "checkpoint.every_steps": 100, "train.log_every": 10,
                   "train.diagnostics_every": 200},
           "gpu": {"train.eval_every": 500, "checkpoint.every_steps": 1000,
                   "train.log_every": 100, "train.diagnostics_every": 5000}}
FACTOR = 10
SEEDS = [0, 1, 2, 3, 4]  # 5: the ordering is the decision, and 18 -> 30 points is affordable
LOSS_MARGIN = 0.02  # nats/token: a gap smaller than this (95% CI) is no ordering


def lengths(size: str) -> list[dict]:
  """The short (the training studies' steps and warm-up) and the 10x runs: length and
  warm-up (the same fraction of the run)."""
  return [{"train.num_steps": STEPS[size] * f, "optim.warmup_steps": WARMUP[size] * f}
          for f in (1, FACTOR)]


def get_sweep(size: str = "cpu"):
  base = [{**point, **WIDTH[size]} for point in preset(TRAINING_SIZES, size)]
  placements = [{"model.norm_placement": p, "optim.learning_rate": BEST_LR[p]}
                for p in PLACEMENTS]
  fixed = {k: v for k, v in {**training(size), **CADENCE[size]}.items()
           if k != "train.num_steps"}
  return product(base, [fixed], lengths(size), placements, {"seed": SEEDS})


def paired_gap(losses: dict, p: str, q: str, a) -> tuple[float, float]:
  """q's final loss minus p's, paired by seed: (mean, 95% CI half-width); NaNs with fewer than
  two shared seeds. Positive: p ended better."""
  gap = [losses[q][s] - losses[p][s] for s in losses.get(p, {}) if s in losses.get(q, {})]
  return a.mean_ci(gap) if len(gap) > 1 else (float("nan"), float("nan"))


def ordering(losses: dict, a) -> tuple[list[str], dict]:
  """Placements from best to worst by mean loss, and for every pair (p ahead of q) whether
  the gap is resolved (paired by seed, 95% CI above LOSS_MARGIN)."""
  means = {p: a.mean_ci(list(v.values()))[0] for p, v in losses.items() if v}
  order = sorted(means, key=means.get)
  resolved = {}
  for i, p in enumerate(order):
    for q in order[i + 1:]:
      m, h = paired_gap(losses, p, q, a)
      resolved[p, q] = h == h and m - h > LOSS_MARGIN
  return order, resolved


def _fate(losses_long: dict, p: str, q: str, a) -> str:
  """What became after the long runs of a pair that the short runs resolved (p ahead):
  `kept` (p still ahead by more than LOSS_MARGIN with 95% confidence), `shrunk` (still ahead,
  the CI above 0 but not above the margin), `reversed` (q ahead, the CI below 0) or
  `unresolved` (the CI holds 0)."""
  m, h = paired_gap(losses_long, p, q, a)
  if not h == h:
    return "unresolved"
  if m - h > LOSS_MARGIN:
    return "kept"
  if m - h > 0:
    return "shrunk"
  return "reversed" if m + h < 0 else "unresolved"


def analyze(runs):
  """Final clipped eval loss of each placement after the short and the 10x run (mean ± 95%
  CI over seeds), every pair's gap paired by seed after each, and whether the long runs keep
  the gaps the short runs resolved: `kept` above LOSS_MARGIN, only `shrunk` (the sign kept),
  `reversed` (the sign flipped, 95% CI) or `unresolved`."""
  from experiments import analysis as a  # noqa: PLC0415
  steps = sorted({r.num_steps for r in runs})
  placements = [p for p in PLACEMENTS if a.select(runs, model__norm_placement=p)]
  losses = {}
  for n in steps:
    losses[n] = {}
    for p in placements:
      mine = [r for r in a.select(runs, model__norm_placement=p) if r.num_steps == n]
      losses[n][p] = {r.overrides.get("seed"): a.clipped_final_loss(r) for r in mine
                      if a.clipped_final_loss(r) is not None}
  rows = [[p, f"{BEST_LR[p]:g}", *(a.ci(losses[n][p].values()) for n in steps),
           a.status_counts(a.select(runs, model__norm_placement=p))] for p in placements]
  lines = [a.protocol(runs), "", "Clipped final eval loss (nats/token, mean ± 95% CI over seeds) of each placement "
           "at its best LR, after each run length:", "",
           *a.table(["placement", "LR", *(f"loss @ {n} steps" for n in steps), "runs"], rows),
           ""]
  if len(steps) < 2:
    return lines + [a.verdict(None, "Needs both run lengths.")]
  pairs = [(p, q) for i, p in enumerate(placements) for q in placements[i + 1:]]
  lines += ["Gap between two placements (the second's loss minus the first's, paired by seed, "
            "mean ± 95% CI; positive: the first ended better):", "",
            *a.table(["pair", *(f"gap @ {n} steps" for n in steps)],
                     [[f"{q} − {p}", *(a.fmt(*paired_gap(losses[n], p, q, a)) for n in steps)]
                      for p, q in pairs]), ""]
  short, long = steps[0], steps[-1]
  (o_short, r_short), (o_long, r_long) = ordering(losses[short], a), ordering(losses[long], a)
  fmt = lambda r: ", ".join(f"{p} < {q}" for (p, q), ok in r.items() if ok) or "none"  # noqa: E731
  lines += [f"Gaps resolved (above {LOSS_MARGIN} nats/token with 95% confidence, paired by "
            f"seed) after {short} steps: {fmt(r_short)}; after {long}: {fmt(r_long)}.", ""]
  said = lambda p, q: (f"{p} < {q} ({a.fmt(*paired_gap(losses[short], p, q, a))} after "  # noqa: E731
                       f"{short} steps, {a.fmt(*paired_gap(losses[long], p, q, a))} after {long})")
  fates = {pq: _fate(losses[long], *pq, a) for pq, ok in r_short.items() if ok}
  by = {f: [said(*pq) for pq, g in fates.items() if g == f]
        for f in ("kept", "shrunk", "reversed", "unresolved")}
  parts = [f"{name}: {'; '.join(by[f])}" for f, name in (
      ("kept", "kept"), ("shrunk", "sign kept, gap now under the margin"),
      ("reversed", "reversed"), ("unresolved", "no longer resolved")) if by[f]]
  text = f"Of the gaps the {short}-step runs resolve, after {long} steps: " + "; ".join(parts) + "."
  if not fates:
    lines.append(a.verdict(None, f"After {short} steps no gap is resolved: there is no "
                           "ordering to keep."))
  elif len(by["kept"]) == len(fates):
    lines.append(a.verdict(True, f"The {short}-step ordering holds after {long} steps. " + text))
  elif not by["kept"] and not by["shrunk"] and not by["reversed"]:
    lines.append(a.verdict(None, text + " The long runs neither confirm nor reverse the "
                           "ordering."))
  elif o_long[0] != o_short[0] and r_long.get((o_long[0], o_short[0])):
    lines.append(a.verdict(False, f"After {long} steps {o_long[0]} is best, not "
                           f"{o_short[0]}: the short-run ordering does not hold. " + text))
  else:
    lines.append(a.verdict("partly", text))
  return lines


def summarize(runs):
  """The summary's entry (transformer/sweep/report.write_summary): the verdict, each
  placement's loss after each run length, and the learning curves."""
  from experiments import analysis as a  # noqa: PLC0415
  lines = analyze(runs)
  word, said = a.verdict_of(lines)
  order = [l for l in lines if l.startswith("Gaps resolved")]
  steps = sorted({r.num_steps for r in runs})
  numbers = [said, *order]
  for p in PLACEMENTS:
    mine = a.select(runs, model__norm_placement=p)
    if mine:
      numbers.append(f"{p} (LR {BEST_LR[p]:g}): " + "; ".join(
          f"{a.ci(v for v in (a.clipped_final_loss(r) for r in mine if r.num_steps == n) if v is not None)}"
          f" after {n} steps" for n in steps))
  return {"verdict": word, "numbers": numbers,
          "figure": "curves.png"}

# What the verdict's call depends on, recomputed at its neighbours in the report's `## Robustness`
# (transformer/sweep/robustness.py; the shared ones are defined in experiments/analysis.py).
THRESHOLDS = (_analysis.COLLAPSE,
              _analysis.CONFIDENCE,
              Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", (0.01, 0.05)))
