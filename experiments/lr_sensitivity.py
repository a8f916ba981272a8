"""Study 5: learning-rate sensitivity of every placement (Wortsman et al. 2023's measure).

  python launch.py --mode=sweep --sweep=experiments/lr_sensitivity.py:cpu \
      --sweep_dir=experiments/results/lr_sensitivity --parallel=2

Placements x a log-spaced LR grid (with warm-up) x 3 seeds, on one model and one corpus. The
report's learning-rate table has the LR sensitivity: the mean over the grid of the final eval
loss (clipped at the initial loss; diverged runs count as the initial loss) minus the best.
"""

from experiments.presets import PLACEMENTS, SIZES
from transformer.sweep import preset, product

CLAIM = ("Wortsman et al. 2023: LR sensitivity (expected loss gap to the best LR over a "
         "log-spaced grid) separates stable from unstable recipes; no paper tabulates it for "
         "every norm placement on the same model and data: this table is new.")

STEPS = {"cpu": 600, "gpu": 5000}
LRS = {"cpu": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
       "gpu": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]}
LAYERS = {"cpu": 6, "gpu": 12}


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)  # first: an unknown size is a clear error
  steps = STEPS[size]
  fixed = {"model.num_layers": LAYERS[size], "train.num_steps": steps,
           "optim.warmup_steps": steps // 10, "train.eval_every": steps // 4,
           "checkpoint.every_steps": steps // 4, "train.log_every": steps // 30}
  return product(base, [fixed], {"model.norm_placement": PLACEMENTS},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
