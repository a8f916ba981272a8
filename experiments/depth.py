"""Study 7: final loss against depth, with and without warm-up.

  python launch.py --mode=sweep --sweep=experiments/depth.py:cpu \
      --sweep_dir=runs/studies/depth --parallel=2

Post, pre, peri, DeepNorm, Admin and Mix-LN, each at its best learning rate of lr_sensitivity
(`BEST_LR`), x depth x {no warm-up, warm-up} x 3 seeds. Layers are scanned
(`model.scan_layers`) so that 24 layers compile in seconds; with the role-based weight-decay
mask a scanned stack trains the same model as an unrolled one. The report's table gives, per
placement and warm-up, the clipped final eval loss at each depth and the deepest depth up to
which every seed trained (neither diverged nor collapsed).
"""

from experiments.presets import TRAINING_SIZES, WARMUP, training
from transformer.sweep import preset, product

CLAIM = ("Liu et al. 2020 (Admin); Wang et al. 2022 (DeepNet): post-norm stops training as "
         "the stack gets deeper (WMT14 12L-12L and 18L-18L post-LN failed, with warm-up), while "
         "pre-norm, Admin and DeepNorm train at every depth; without warm-up post-norm fails "
         "sooner.")
PLACEMENTS = ["post", "pre", "peri", "deepnorm", "admin", "mix"]
# Best LR of each placement in lr_sensitivity (cpu: 6 layers, 200 steps, warm-up 20; see
# experiments/README.md). The gpu preset has not been run: the same values, to be replaced
# by its own lr_sensitivity's.
BEST_LR = {"post": 1e-3, "deepnorm": 3e-3, "admin": 3e-3, "pre": 1e-2, "peri": 1e-2,
           "mix": 1e-2}
DEPTHS = {"cpu": [3, 6, 12, 24], "gpu": [6, 12, 24, 48]}
SEEDS = [0, 1, 2]
STABLE = ["pre", "deepnorm", "admin"]  # what the papers say trains at every depth
LOSS_MARGIN = 0.05  # nats/token: post-norm at the largest depth this much worse than pre


def get_sweep(size: str = "cpu"):
  base = preset(TRAINING_SIZES, size)
  placements = [{"model.norm_placement": p, "optim.learning_rate": BEST_LR[p]}
                for p in PLACEMENTS]
  fixed = {k: v for k, v in training(size).items() if k != "model.num_layers"}
  return product(base, [{**fixed, "model.scan_layers": True}], placements,
                 {"model.num_layers": DEPTHS[size]},
                 {"optim.warmup_steps": [0, WARMUP[size]]}, {"seed": SEEDS})


def deepest_healthy(runs, depths):
  """The largest depth up to which, at that depth and every smaller one, every seed trained
  healthily (None when the smallest already fails)."""
  deepest = None
  for d in depths:
    at = [r for r in runs if r.overrides["model.num_layers"] == d]
    if not at or not all(r.healthy for r in at):
      break
    deepest = d
  return deepest


def analyze(runs):
  """Per placement and warm-up: the clipped final eval loss at each depth (mean ± 95% CI over
  seeds) and the deepest depth up to which every seed trained. Then: does post-norm fail (or
  fall behind pre-norm by more than LOSS_MARGIN at the largest depth, paired by seed) where
  pre-norm, DeepNorm and Admin train at every depth?"""
  from experiments import analysis as a  # noqa: PLC0415
  depths = sorted({r.overrides["model.num_layers"] for r in runs})
  warmups = sorted({r.overrides["optim.warmup_steps"] for r in runs})
  placements = [p for p in PLACEMENTS if a.select(runs, model__norm_placement=p)]
  rows, deepest = [], {}
  for p in placements:
    for w in warmups:
      mine = a.select(runs, model__norm_placement=p, optim__warmup_steps=w)
      deepest[p, w] = deepest_healthy(mine, depths)
      cells = [a.ci(v for v in (a.clipped_final_loss(r) for r in mine
                                if r.overrides["model.num_layers"] == d) if v is not None)
               for d in depths]
      rows.append([p, w, *cells, deepest[p, w] if deepest[p, w] is not None else "none",
                   a.status_counts(mine)])
  top, warm = depths[-1], warmups[-1]
  lines = [a.protocol(runs), "", "Clipped final eval loss (nats/token; diverged runs count as ln V) at each depth, "
           "each placement at its best LR (" + ", ".join(f"{p} {BEST_LR[p]:g}" for p in placements)
           + "), mean ± 95% CI over seeds; and the deepest depth up to which every seed trained:",
           "", *a.table(["placement", "warm-up", *(f"loss @ {d} layers" for d in depths),
                         "trains up to", "runs"], rows), ""]
  gap = []
  for s in sorted({r.overrides["seed"] for r in runs}):
    post = a.select(runs, model__norm_placement="post", optim__warmup_steps=warm,
                    model__num_layers=top, seed=s)
    pre = a.select(runs, model__norm_placement="pre", optim__warmup_steps=warm,
                    model__num_layers=top, seed=s)
    if post and pre:
      vp, vq = a.clipped_final_loss(post[0]), a.clipped_final_loss(pre[0])
      if vp is not None and vq is not None:
        gap.append(vp - vq)
  if ("post", warm) not in deepest:
    return lines + [a.verdict(None, "No post-norm runs with warm-up: nothing to judge.")]
  post_fails = deepest["post", warm] != top
  mean, half = a.mean_ci(gap) if gap else (float("nan"), float("nan"))
  post_behind = len(gap) > 1 and mean - half > LOSS_MARGIN
  stable_ok = [p for p in STABLE if deepest.get((p, warm)) == top]
  stable_bad = [p for p in STABLE if (p, warm) in deepest and p not in stable_ok]
  lines.append(f"At {top} layers with warm-up {warm}, post-norm minus pre-norm final loss, "
               f"paired by seed: {a.fmt(mean, half)} nats/token (margin {LOSS_MARGIN}).")
  lines.append("")
  what = ("post-norm fails to train at some depth up to " + str(top) if post_fails else
          "post-norm trains at every depth" + (" but ends worse than pre-norm at the largest"
                                               if post_behind else ""))
  others = ("pre-norm, DeepNorm and Admin train at every depth" if not stable_bad else
            f"{', '.join(stable_bad)} also fail(s) at some depth")
  if (post_fails or post_behind) and not stable_bad:
    lines.append(a.verdict(True, f"With warm-up, {what}; {others}."))
  elif post_fails or post_behind or not stable_bad:
    lines.append(a.verdict("partly", f"With warm-up, {what}; {others}."))
  else:
    lines.append(a.verdict(False, f"With warm-up, {what}; {others}."))
  if warmups[0] != warm:
    none = {p: deepest.get((p, warmups[0])) for p in placements}
    lines += ["", "Without warm-up, the deepest depth every seed trained at: "
              + ", ".join(f"{p} {none[p] if none[p] is not None else 'none'}" for p in placements)
              + "."]
  steps = max(r.num_steps for r in runs)
  lines += ["", f"Trained {steps} steps on a small model: far from the papers' translation "
            "models, so a failure here is a finding at this scale."]
  return lines
