"""Study 6: attention-logit growth at high learning rates, with and without qk-norm.

  python launch.py --mode=sweep --sweep=experiments/qk_norm_logits.py:cpu \
      --sweep_dir=experiments/results/qk_norm_logits --parallel=2

Pre-norm, qk_norm off/on, a log-spaced grid reaching high LRs, 3 seeds, diagnostics logged
during training: the report's diagnostics-over-training plot has the max attention logit, and
its learning-rate table the LR sensitivity with and without qk-norm.
"""

from experiments.presets import SIZES
from transformer.sweep import preset, product

CLAIM = ("Wortsman et al. 2023; Dehghani et al. 2023: at high learning rates the attention "
         "logits grow without bound and training diverges (attention entropy collapse); "
         "qk-layernorm keeps the logits bounded and lowers LR sensitivity.")

STEPS = {"cpu": 600, "gpu": 5000}
LRS = {"cpu": [3e-3, 1e-2, 3e-2, 1e-1], "gpu": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]}
LAYERS = {"cpu": 6, "gpu": 12}


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)  # first: an unknown size is a clear error
  steps = STEPS[size]
  fixed = {"model.num_layers": LAYERS[size], "model.norm_placement": "pre",
           "train.num_steps": steps, "optim.warmup_steps": steps // 10,
           "train.eval_every": steps // 4, "checkpoint.every_steps": steps // 4,
           "train.log_every": steps // 30, "train.diagnostics_every": steps // 30}
  return product(base, [fixed], {"model.qk_norm": [False, True]},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
