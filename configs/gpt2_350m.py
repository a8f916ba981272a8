"""GPT-2 medium (Radford et al., 2019): 24 layers, d_model 1024, 16 heads, d_ff 4096, and the rest
as `configs/gpt2_small.py` (learned positions, pre-norm, tied embeddings, sequence 1024); 355M
parameters with GPT-2's 50257-token vocabulary (padded to 50304).

`python launch.py --mode=compile --topology=v5e-8 --config=configs/gpt2_350m.py` checks that it
fits a TPU slice without one; `--mode=bench` times it on random tokens. Variants: `:gpu` as
gpt2_small's (bfloat16 compute, cuDNN attention).
"""

import ml_collections

from configs import gpt2_small


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = gpt2_small.get_config(variant)
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 1024, 16, 24, 4096
  c.optim.learning_rate = 3e-4
  return c
