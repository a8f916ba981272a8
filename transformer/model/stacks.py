"""A stack of blocks, with the final norm its norm placement calls for.

The layer loop is either unrolled (params `layer_0`, `layer_1`, ...) or one `nn.scan` over
stacked params (`layers`, each leaf with a leading `[num_layers]` axis named "layers"), which
compiles one block instead of `num_layers`. With `norm_placement="mix"` a scanned stack is two
scans, `post_layers` (the first floor(mix_post_fraction * L) blocks) and `pre_layers` (the
rest); unrolled, the blocks are `layer_0`, ... as always. `cfg.remat` rematerializes each block
in the backward pass: "full" saves only the block inputs, "minimal" also keeps the outputs of
matmuls with weights (`dots_with_no_batch_dims_saveable`) and recomputes the rest.
"""

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ModelConfig
from transformer.model.block import (Block, layer_placement, mix_post_layers, needs_final_norm,
                                     norm_for)
from transformer.model.common import constrain_residual, sow_scalar


# Names of the scanned layer modules: all layers, or Mix-LN's post-norm part and pre-norm part.
SCANNED = LAYERS, POST_LAYERS, PRE_LAYERS = ("layers", "post_layers", "pre_layers")
# The jax policy of each `ModelConfig.remat` but "none" (tests/test_options.py checks the keys).
JAX_REMAT_POLICIES = {"full": None,
                      "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class _LayerBlock(Block):
  """A `Block` whose `deterministic` flag is an attribute, so that `nn.remat` and `nn.scan`
  see only array arguments; `scanned` makes it return `(x, None)` as a scan body must."""
  deterministic: bool = True
  scanned: bool = False

  def __call__(self, x, mask, encoded, cross_mask, positions):
    y = super().__call__(constrain_residual(x), mask, encoded, cross_mask, positions=positions,
                         deterministic=self.deterministic)
    y = constrain_residual(y)
    return (y, None) if self.scanned else y


class TransformerStack(nn.Module):
  """`num_layers` blocks, then a final norm if the placement leaves the output un-normalized.

  Encoder: bidirectional mask, no cross-attention. Decoder: `causal=True` (self-attention
  sees earlier positions only, on top of `mask`), optionally cross-attention to `encoded`.
  `[batch, length, d_model] -> [batch, length, d_model]`.
  `positions: [batch, length]` reach rotary self-attention; `decode=True` runs self-attention
  over a KV cache; `num_layers` (0 = `cfg.num_layers`) sets the depth. `role` (decoder_only,
  encoder_only, encoder or decoder: see `transformer.model.block.ROLES`) and the depth reach
  every block (DeepNorm's constants depend on both).
  """
  cfg: ModelConfig
  cross_attention: bool = False
  decode: bool = False
  num_layers: int = 0
  role: str = "decoder_only"
  causal: bool = False

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
      block = nn.remat(block, policy=JAX_REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)
    if self.is_mutable_collection("admin_profile"):  # the variance of the stack's input
      sow_scalar(self, "admin_profile", "input_var", jnp.var(x.astype(jnp.float32)))
    common = dict(cross_attention=self.cross_attention, decode=self.decode, role=self.role,
                  num_layers=num_layers, causal=self.causal, deterministic=deterministic)
    if cfg.scan_layers:
      # "intermediates" (sown attention weights), "cache" (KV) and the sown scalars get the
      # layer axis too.
      if cfg.norm_placement == "mix":
        segments = [("post", POST_LAYERS, mix_post_layers(cfg, num_layers))]
        segments.append(("pre", PRE_LAYERS, num_layers - segments[0][2]))
      else:
        segments = [("", LAYERS, num_layers)]
      for placement, name, length in segments:
        if length:
          x, _ = nn.scan(block, variable_axes={"params": 0, "cache": 0, "intermediates": 0,
                                               "diagnostics": 0, "admin_profile": 0},
                         split_rngs={"params": True, "dropout": True},
                         in_axes=(nn.broadcast,) * 4, length=length,
                         metadata_params={nn.PARTITION_NAME: "layers"})(
                             cfg, placement=placement, scanned=True, name=name, **common)(
                                 x, mask, encoded, cross_mask, positions)
    else:
      for i in range(num_layers):
        x = block(cfg, placement=layer_placement(cfg, i, num_layers), name=f"layer_{i}",
                  **common)(x, mask, encoded, cross_mask, positions)
    if needs_final_norm(cfg, num_layers):
      x = norm_for(cfg, "final_norm")(x)
    return x
