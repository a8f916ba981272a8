"""Study 2: per-layer gradient norms at initialization, 12 layers (Xiong et al. 2020, Fig. 3).

  python launch.py --mode=sweep --sweep=experiments/grad_profile.py:cpu \
      --sweep_dir=runs/studies/grad_profile --parallel=2

Every placement, 12 layers, 3 seeds, one step at init; the report's per-layer diagnostics
profile is the figure.
"""

from experiments.presets import AT_INIT, PLACEMENTS, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Fig. 3: at initialization the per-layer gradient norm of "
         "post-norm grows toward the output layer; pre-norm's is nearly flat across layers.")


def get_sweep(size: str = "cpu"):
  return product(preset(SIZES, size), [AT_INIT], [{"model.num_layers": 12}],
                 {"model.norm_placement": PLACEMENTS}, {"seed": [0, 1, 2]})
