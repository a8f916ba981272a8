"""The main job: a small byte-level decoder-only LM on the Python standard library's source.

Run it with `python launch.py` (this file is the default `--config`). Override any field from
the command line, e.g. `--config.model.norm_placement=post --config.train.num_steps=500`.
Variants: `--config=configs/default.py:smoke` is a seconds-long run for checking a setup.

Every field's default, and its one-line help, is written once: in the dataclasses of
`transformer/config.py` (`ModelConfig`, `DataConfig`, `TrainConfig`, `CheckpointConfig`,
`ParallelConfig`) and `transformer/optim_config.py` (`OptimConfig`). The main job is those
defaults; a field it deliberately sets otherwise is set below, with its reason, and named in
`OVERRIDES` (tests/test_defaults.py holds the two to that).
"""

import ml_collections

from transformer.config import default_config_dict

# The fields the main job sets to other values than the dataclasses' defaults: none.
OVERRIDES: tuple[str, ...] = ()


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default_config_dict()
  if variant == "smoke":
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 64, 4, 2, 128
    c.data.seq_len, c.data.eval_batches = 64, 4
    c.train.batch_size, c.train.num_steps = 8, 20
    c.train.log_every, c.train.eval_every = 5, 10
    c.checkpoint.every_steps = 10
    c.optim.warmup_steps = 5
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/default.py; known: 'smoke'.")
  return c
