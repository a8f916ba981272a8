"""Study 8: warm-up length against the largest stable learning rate.

  python launch.py --mode=sweep --sweep=experiments/warmup_length.py:cpu \
      --sweep_dir=runs/studies/warmup_length --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity,runs/studies/warmup_stability

Post- and pre-norm x warm-up length (0 .. the whole run) x the LR grid x 3 seeds, on the
training studies' recipe. The warm-up 0 and `WARMUP` points are warmup_stability's and
lr_sensitivity's runs: `--reuse_runs_from` links them when those studies were run with this
code (a run made before the role-based weight-decay mask has `optim.decay_mask=ndim` and is
not linked). On the cpu preset, warm-up 200 is the whole 200-step run: the LR only rises.
"""

from experiments.presets import LRS, TRAINING_SIZES, training
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020: post-norm is sensitive to the warm-up length (Adam, lr 1e-3: BLEU "
         "2.8 with 500 warm-up steps vs ~34 with 4000) while pre-norm trains without warm-up; "
         "so post-norm's largest stable LR should grow with the warm-up length and pre-norm's "
         "should not depend on it.")
PLACEMENTS = ["post", "pre"]
WARMUPS = {"cpu": [0, 20, 50, 100, 200], "gpu": [0, 500, 1250, 2500, 5000]}


def get_sweep(size: str = "cpu"):
  base = preset(TRAINING_SIZES, size)
  return product(base, [training(size)], {"model.norm_placement": PLACEMENTS},
                 {"optim.warmup_steps": WARMUPS[size]}, {"optim.learning_rate": LRS[size]},
                 {"seed": [0, 1, 2]})


def _grid_index(lr, lrs):
  return -1 if lr is None else lrs.index(lr)


def analyze(runs):
  """Per placement and warm-up length: the largest LR up to which every seed trained, the
  best LR's clipped final loss, and the LR sensitivity (per seed, mean ± 95% CI). The claim
  holds when post-norm's largest stable LR at the longest warm-up is above its value without
  warm-up, and pre-norm's moves by at most one grid step across warm-up lengths."""
  from experiments import analysis as a  # noqa: PLC0415
  lrs = sorted({r.overrides[a.LR] for r in runs})
  warmups = sorted({r.overrides["optim.warmup_steps"] for r in runs})
  placements = [p for p in PLACEMENTS if a.select(runs, model__norm_placement=p)]
  rows, largest = [], {}
  for p in placements:
    for w in warmups:
      mine = a.select(runs, model__norm_placement=p, optim__warmup_steps=w)
      largest[p, w] = a.largest_stable_lr(mine)
      per_lr = a.mean_clipped_loss_per_lr(mine, a.LR)
      best = min(per_lr, key=per_lr.get) if per_lr else None
      best_losses = [a.clipped_final_loss(r) for r in mine if r.overrides[a.LR] == best]
      rows.append([p, w, "none" if largest[p, w] is None else f"{largest[p, w]:g}",
                   "-" if best is None else f"{best:g}",
                   a.ci(v for v in best_losses if v is not None),
                   a.ci(a.per_seed(mine, a.lr_sensitivity)), a.status_counts(mine)])
  lines = [a.protocol(runs), "", "Per placement and warm-up length (steps of linear warm-up, then cosine decay): "
           "the largest LR up to which every seed trained (counted up from the best LR), the "
           "best LR and its clipped final eval loss, and the LR sensitivity (Wortsman et al.; "
           "per seed, mean ± 95% CI):", "",
           *a.table(["placement", "warm-up", "largest stable LR", "best LR", "loss @ best LR",
                     "LR sensitivity", "runs"], rows), ""]
  if "post" not in placements or len(warmups) < 2:
    return lines + [a.verdict(None, "Needs post-norm runs at two warm-up lengths or more.")]
  post = [_grid_index(largest["post", w], lrs) for w in warmups]
  post_grows = post[-1] > post[0]
  said = "post-norm's largest stable LR goes " + " -> ".join(
      "none" if i < 0 else f"{lrs[i]:g}" for i in post) + f" over warm-up {warmups}"
  pre_flat = None
  if "pre" in placements:
    pre = [_grid_index(largest["pre", w], lrs) for w in warmups]
    pre_flat = max(pre) - min(pre) <= 1
    said += ("; pre-norm's " + " -> ".join("none" if i < 0 else f"{lrs[i]:g}" for i in pre))
  if post_grows and pre_flat in (True, None):
    lines.append(a.verdict(True, f"{said}: longer warm-up lets post-norm train at larger LRs, "
                           "pre-norm hardly depends on it."))
  elif post_grows or pre_flat:
    lines.append(a.verdict("partly", f"{said}."))
  else:
    lines.append(a.verdict(False, f"{said}: post-norm gains no stable LR from a longer "
                           "warm-up here."))
  return lines
