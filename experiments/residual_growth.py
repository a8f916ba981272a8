"""Study 3: residual-stream growth with depth (Xiong et al. 2020, Lemma 2).

  python launch.py --mode=sweep --sweep=experiments/residual_growth.py:cpu \
      --sweep_dir=runs/studies/residual_growth --parallel=2

Pre vs post, 24 layers, 3 seeds, one step at init; the report's per-layer profile of the
residual RMS is the figure (its square against layer should be a line for pre-norm).
"""

from experiments.presets import AT_INIT, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Lemma 2: with pre-norm, E||x_l||^2 of the residual stream grows "
         "linearly in the layer index l; with post-norm it stays constant (each block ends "
         "in a norm).")


def get_sweep(size: str = "cpu"):
  return product(preset(SIZES, size), [AT_INIT], [{"model.num_layers": 24}],
                 {"model.norm_placement": ["pre", "post"]}, {"seed": [0, 1, 2]})
