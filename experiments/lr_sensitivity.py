"""Study 5: learning-rate sensitivity of every placement (Wortsman et al. 2023's measure).

  python launch.py --mode=sweep --sweep=experiments/lr_sensitivity.py:cpu \
      --sweep_dir=runs/studies/lr_sensitivity --parallel=2

Placements x a log-spaced LR grid (with warm-up) x 3 seeds, on one model and one corpus. The
report's learning-rate table has the LR sensitivity: the mean over the grid of the final eval
loss (clipped at the initial loss; diverged runs count as the initial loss) minus the best.
Run this study before warmup_stability and qk_norm_logits: they reuse its runs.
"""

from experiments.presets import LRS, PLACEMENTS, SIZES, WARMUP, training
from transformer.sweep import preset, product

CLAIM = ("Wortsman et al. 2023: LR sensitivity (expected loss gap to the best LR over a "
         "log-spaced grid) separates stable from unstable recipes; no paper tabulates it for "
         "every norm placement on the same model and data: this table is new.")


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)  # first: an unknown size is a clear error
  return product(base, [training(size)], [{"optim.warmup_steps": WARMUP[size]}],
                 {"model.norm_placement": PLACEMENTS},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
