"""Study 4: warm-up and the largest stable learning rate, every placement.

  python launch.py --mode=sweep --sweep=experiments/warmup_stability.py:cpu \
      --sweep_dir=experiments/results/warmup_stability --parallel=2

Placements x {no warm-up, warm-up} x a log-spaced LR grid x 3 seeds. The report's
learning-rate table gives, per placement and warm-up, the largest LR at which every seed
trained (not diverged, not collapsed to the unigram entropy).
"""

from experiments.presets import PLACEMENTS, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020; Liu et al. 2020 (Admin); Wang et al. 2022 (DeepNet): post-norm "
         "needs learning-rate warm-up to train at usual learning rates; pre-norm, Admin and "
         "DeepNorm train without it.")

STEPS = {"cpu": 600, "gpu": 5000}
LRS = {"cpu": [1e-3, 3e-3, 1e-2, 3e-2], "gpu": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2]}
LAYERS = {"cpu": 6, "gpu": 12}


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)
  steps = STEPS[size]
  fixed = {"model.num_layers": LAYERS[size], "train.num_steps": steps,
           "train.eval_every": steps // 4, "checkpoint.every_steps": steps // 4,
           "train.log_every": steps // 30}
  return product(base, [fixed], {"model.norm_placement": PLACEMENTS},
                 {"optim.warmup_steps": [0, steps // 10]},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
