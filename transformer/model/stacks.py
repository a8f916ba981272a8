"""A stack of blocks, with the final norm its norm placement calls for."""

from typing import Optional

import flax.linen as nn
import jax

from transformer.config import ModelConfig
from transformer.model.block import NEEDS_FINAL_NORM, Block, norm_for


class TransformerStack(nn.Module):
  """`num_layers` blocks, then a final norm if the placement leaves the output un-normalized.

  Encoder: bidirectional mask, no cross-attention. Decoder: causal mask, optionally
  cross-attention to `encoded`. `[batch, length, d_model] -> [batch, length, d_model]`.
  """
  cfg: ModelConfig
  cross_attention: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None,
               encoded: Optional[jax.Array] = None, cross_mask: Optional[jax.Array] = None, *,
               deterministic: bool = True) -> jax.Array:
    for i in range(self.cfg.num_layers):
      x = Block(self.cfg, cross_attention=self.cross_attention, name=f"layer_{i}")(
          x, mask, encoded, cross_mask, deterministic=deterministic)
    if NEEDS_FINAL_NORM[self.cfg.norm_placement]:
      x = norm_for(self.cfg, "final_norm")(x)
    return x
