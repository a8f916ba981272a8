"""A 1.0B-parameter GPT-2: the architecture of `configs/gpt2_small.py` (learned positions,
pre-norm, tied embeddings, sequence 1024, GPT-2's vocabulary padded to 50304) at 18 layers,
d_model 2048, 16 heads of 128, d_ff 8192. Not a released GPT-2 size (those are 124M, 355M, 774M
and 1.5B): the step between them that the "what fits where" table in the README needs.

`python launch.py --mode=compile --topology=v5p-8 --config=configs/gpt2_1b.py` checks that it
fits a TPU slice without one. Variants: `:gpu` as gpt2_small's.
"""

import ml_collections

from configs import gpt2_small


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = gpt2_small.get_config(variant)
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 2048, 16, 18, 8192
  c.optim.learning_rate = 2e-4
  return c
