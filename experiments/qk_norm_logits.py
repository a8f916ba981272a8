"""Study 6: attention-logit growth at high learning rates, with and without qk-norm.

  python launch.py --mode=sweep --sweep=experiments/qk_norm_logits.py:cpu \
      --sweep_dir=runs/studies/qk_norm_logits --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

Pre-norm, qk_norm off/on, the LR grid (it reaches high LRs), 3 seeds, diagnostics logged
during training: the report's diagnostics-over-training plot has the max attention logit, and
its learning-rate table the LR sensitivity with and without qk-norm. The qk_norm=False runs
are lr_sensitivity's pre-norm runs (same config): `--reuse_runs_from` links them.
"""

from experiments.presets import LRS, SIZES, WARMUP, training
from transformer.sweep import preset, product

CLAIM = ("Wortsman et al. 2023; Dehghani et al. 2023: at high learning rates the attention "
         "logits grow without bound and training diverges (attention entropy collapse); "
         "qk-layernorm keeps the logits bounded and lowers LR sensitivity.")


def get_sweep(size: str = "cpu"):
  base = preset(SIZES, size)  # first: an unknown size is a clear error
  return product(base, [training(size)],
                 [{"optim.warmup_steps": WARMUP[size], "model.norm_placement": "pre"}],
                 {"model.qk_norm": [False, True]},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})
