"""A stack of blocks, with the final norm its norm placement calls for.

The layer loop is either unrolled (params `layer_0`, `layer_1`, ...) or one `nn.scan` over
stacked params (`layers`, each leaf with a leading `[num_layers]` axis named "layers"), which
compiles one block instead of `num_layers`. `cfg.remat` rematerializes each block in the
backward pass: "full" saves only the block inputs, "minimal" also keeps the outputs of
matmuls with weights (`dots_with_no_batch_dims_saveable`) and recomputes the rest.
"""

from typing import Optional

import flax.linen as nn
import jax

from transformer.config import ModelConfig
from transformer.model.block import NEEDS_FINAL_NORM, Block, norm_for


REMAT_POLICIES = {"full": None, "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class _LayerBlock(Block):
  """A `Block` whose `deterministic` flag is an attribute, so that `nn.remat` and `nn.scan`
  see only array arguments; `scanned` makes it return `(x, None)` as a scan body must."""
  deterministic: bool = True
  scanned: bool = False

  def __call__(self, x, mask, encoded, cross_mask, positions):
    y = super().__call__(x, mask, encoded, cross_mask, positions=positions,
                         deterministic=self.deterministic)
    return (y, None) if self.scanned else y


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
    cfg = self.cfg
    num_layers = self.num_layers or cfg.num_layers
    block = _LayerBlock
    if cfg.remat != "none":
      # Nothing static among the arguments (deterministic is an attribute). Under scan, CSE
      # across iterations cannot undo the remat.
      block = nn.remat(block, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)
    if cfg.scan_layers:
      # "intermediates" (sown attention weights) and "cache" (KV) get the layer axis too.
      scanned = nn.scan(block, variable_axes={"params": 0, "cache": 0, "intermediates": 0},
                        split_rngs={"params": True, "dropout": True},
                        in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                        length=num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
      x, _ = scanned(cfg, cross_attention=self.cross_attention, decode=self.decode,
                     deterministic=deterministic, scanned=True,
                     name="layers")(x, mask, encoded, cross_mask, positions)
    else:
      for i in range(num_layers):
        x = block(cfg, cross_attention=self.cross_attention, decode=self.decode,
                  deterministic=deterministic, name=f"layer_{i}")(
                      x, mask, encoded, cross_mask, positions)
    if NEEDS_FINAL_NORM[cfg.norm_placement]:
      x = norm_for(cfg, "final_norm")(x)
    return x
