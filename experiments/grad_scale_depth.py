"""Study 1: gradient scale at initialization against depth (Xiong et al. 2020, Theorem 1).

  python launch.py --mode=sweep --sweep=experiments/grad_scale_depth.py:cpu \
      --sweep_dir=runs/studies/grad_scale_depth --parallel=2

Post vs pre, depths 2..32, 3 seeds; one step at init with per-layer diagnostics. The report's
"feed_forward/wo/grad_norm vs model.num_layers" plot (last layer, log-log) is the figure to
compare with the theorem.
"""

from experiments.presets import AT_INIT, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Theorem 1: at initialization the gradient norm of the last "
         "layer's second feed-forward matrix is roughly independent of depth L for post-norm "
         "and shrinks like 1/sqrt(L) for pre-norm.")
# Plotted (last layer, at init) against depth: the gradient norm of the second feed-forward
# matrix W_2 (the diagnostics name it `decoder/layer_<i>/feed_forward/wo/grad_norm`).
REPORT_DIAGNOSTICS = ("feed_forward/wo/grad_norm",)


def get_sweep(size: str = "cpu"):
  return product(preset(SIZES, size), [AT_INIT],
                 {"model.norm_placement": ["post", "pre"]},
                 {"model.num_layers": [2, 4, 8, 16, 32]},
                 {"seed": [0, 1, 2]})
