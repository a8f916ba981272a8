"""Study 5: learning-rate sensitivity of every placement (Wortsman et al. 2023's measure).

  python launch.py --mode=sweep --sweep=experiments/lr_sensitivity.py:cpu \
      --sweep_dir=runs/studies/lr_sensitivity --parallel=2

Placements x a log-spaced LR grid (with warm-up) x 3 seeds, on one model and one corpus. The
report's learning-rate table has the LR sensitivity: the mean over the grid of the final eval
loss (clipped at the initial loss; diverged runs count as the initial loss) minus the best.
Run this study before warmup_stability and qk_norm_logits: they reuse its runs.
"""

from experiments.presets import LRS, TRAINING_SIZES, WARMUP, training
from transformer.config import NORM_PLACEMENTS
from transformer.sweep import preset, product

CLAIM = ("Wortsman et al. 2023: LR sensitivity (expected loss gap to the best LR over a "
         "log-spaced grid) separates stable from unstable recipes; no paper tabulates it for "
         "every norm placement on the same model and data: this table is new.")


def get_sweep(size: str = "cpu"):
  base = preset(TRAINING_SIZES, size)  # first: an unknown size is a clear error
  return product(base, [training(size)], [{"optim.warmup_steps": WARMUP[size]}],
                 {"model.norm_placement": NORM_PLACEMENTS},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})


def analyze(runs):
  """Per placement: the LR sensitivity computed on each seed's grid (mean ± 95% CI over
  seeds), the best LR and its loss, and how the runs ended; then the ranking, and whether the
  placement the papers call unstable (post) is more LR-sensitive than pre-norm."""
  from experiments import analysis as a  # noqa: PLC0415
  placements = list(dict.fromkeys(r.overrides[a.PLACEMENT] for r in runs))
  lrs = sorted({r.overrides[a.LR] for r in runs})
  rows, sens = [], {}
  for p in placements:
    mine = a.select(runs, model__norm_placement=p)
    sens[p] = a.per_seed(mine, a.lr_sensitivity)
    per_lr = {lr: [a.clipped_final_loss(r) for r in mine if r.overrides[a.LR] == lr]
              for lr in lrs}
    per_lr = {lr: [v for v in vs if v is not None] for lr, vs in per_lr.items()}
    best = min((lr for lr in lrs if per_lr[lr]), key=lambda lr: sum(per_lr[lr]) / len(per_lr[lr]),
               default=None)
    rows.append([p, a.ci(sens[p]), *(a.ci(per_lr[lr]) for lr in lrs),
                 f"{best:g}" if best is not None else "-", a.status_counts(mine)])
  order = sorted((p for p in placements if sens[p]), key=lambda p: a.mean_ci(sens[p])[0])
  lines = ["LR sensitivity per placement: Wortsman et al.'s measure computed on each seed's "
           f"grid ({', '.join(f'{lr:g}' for lr in lrs)}; warm-up then cosine decay), mean ± "
           "95% CI over seeds; then the clipped final eval loss (nats/token) at each LR:", "",
           *a.table(["placement", "LR sensitivity", *(f"loss @ {lr:g}" for lr in lrs),
                     "best LR", "runs"], rows), "",
           "From least to most sensitive: " + " < ".join(order) + ".", ""]
  if "post" in sens and "pre" in sens and sens["post"] and sens["pre"]:
    (mp, hp), (mq, hq) = a.mean_ci(sens["post"]), a.mean_ci(sens["pre"])
    if mp - hp > mq + hq:
      lines.append(a.verdict(True, "Post-norm, the recipe the papers call unstable, is more "
                             "LR-sensitive than pre-norm (95% intervals disjoint)."))
    elif mq - hq > mp + hp:
      lines.append(a.verdict(False, "Post-norm is *less* LR-sensitive than pre-norm here."))
    else:
      lines.append(a.verdict(None, "Post-norm's and pre-norm's LR sensitivities are not "
                             f"distinguishable with these seeds (post {a.fmt(mp, hp)}, pre "
                             f"{a.fmt(mq, hq)})."))
  lines += ["", f"The grid spans {lrs[0]:g}..{lrs[-1]:g} ({len(lrs)} LRs; Wortsman et al. use "
            "7 LRs, 3e-4..3e-1): a narrower grid gives smaller sensitivities, so compare the "
            "placements with each other, not with the paper's values."]
  return lines
