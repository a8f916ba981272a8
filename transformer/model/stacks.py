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
  `positions: [batch, length]` reach rotary self-attention; `decode=True` runs self-attention
  over a KV cache; `num_layers` (0 = `cfg.num_layers`) sets the depth.
  """
  cfg: ModelConfig
  cross_attention: bool = False
  decode: bool = False
  num_layers: int = 0

  @nn.compact
  def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None,
               encoded: Optional[jax.Array] = None, cross_mask: Optional[jax.Array] = None, *,
               positions: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    for i in range(self.num_layers or self.cfg.num_layers):
      x = Block(self.cfg, cross_attention=self.cross_attention, decode=self.decode,
                name=f"layer_{i}")(
          x, mask, encoded, cross_mask, positions=positions, deterministic=deterministic)
    if NEEDS_FINAL_NORM[self.cfg.norm_placement]:
      x = norm_for(self.cfg, "final_norm")(x)
    return x
