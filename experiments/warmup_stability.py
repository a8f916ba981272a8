"""Study 4: warm-up and the largest stable learning rate.

  python launch.py --mode=sweep --sweep=experiments/warmup_stability.py:cpu \
      --sweep_dir=runs/studies/warmup_stability --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

Post, pre, DeepNorm and Admin (the placements the claim names) x {no warm-up, warm-up} x the
LR grid x 3 seeds. The runs with warm-up are lr_sensitivity's (same config): with
`--reuse_runs_from` they are linked, not trained again. The report's learning-rate table gives,
per placement and warm-up, the largest LR at which every seed trained (not diverged, not
collapsed to the unigram entropy).
"""

from experiments.presets import LRS, SIZES, WARMUP, training
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020; Liu et al. 2020 (Admin); Wang et al. 2022 (DeepNet): post-norm "
         "needs learning-rate warm-up to train at usual learning rates; pre-norm, Admin and "
         "DeepNorm train without it.")
PLACEMENTS = ["post", "pre", "deepnorm", "admin"]


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)
  return product(base, [training(size)], {"model.norm_placement": PLACEMENTS},
                 {"optim.warmup_steps": [0, WARMUP[size]]},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
