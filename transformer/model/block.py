"""The Transformer block: sublayers wrapped in residual connections and norms.

Where the norm sits is one switch, `ModelConfig.norm_placement`, handled in one place
(`Block._residual`); every stack uses this block. For a sublayer f:

  post (Vaswani et al., 2017; "Add & Norm"):  x -> LN(x + f(x))
  pre  (Xiong et al., 2020):                  x -> x + f(LN(x))   and one LN after the stack

Dropout, when enabled, is applied to f's output before it joins the residual stream.
"""

from typing import Callable, Optional

import flax.linen as nn
import jax

from transformer.config import ModelConfig
from transformer.model.attention import MultiHeadAttention
from transformer.model.common import dtype_of
from transformer.model.feedforward import FeedForward
from transformer.model.norms import make_norm

# Placements whose stack output is un-normalized and so needs a final norm.
NEEDS_FINAL_NORM = {"pre": True, "post": False}


def norm_for(cfg: ModelConfig, name: str) -> nn.Module:
  return make_norm(cfg.norm, epsilon=cfg.norm_epsilon, use_bias=cfg.norm_bias,
                   dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype), name=name)


class Block(nn.Module):
  """Self-attention, optional cross-attention, and feed-forward sublayers.

  Call with `x: [batch, length, d_model]`, a boolean self-attention mask broadcastable to
  `[batch, heads, length, length]`, and for cross-attention `encoded: [batch, src_len, d_model]`
  with `cross_mask` broadcastable to `[batch, heads, length, src_len]`. `positions:
  [batch, length]` are used by rotary self-attention. With `decode=True` self-attention runs
  over a KV cache (see `MultiHeadAttention`).
  """
  cfg: ModelConfig
  cross_attention: bool = False
  decode: bool = False

  def _attention(self, name: str, self_attention: bool) -> MultiHeadAttention:
    cfg = self.cfg
    return MultiHeadAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, num_kv_heads=cfg.kv_heads,
        rope=self_attention and cfg.positions == "rope",
        rope_max_timescale=cfg.rope_max_timescale,
        decode=self_attention and self.decode, use_bias=cfg.use_bias,
        implementation=cfg.attention_impl, dropout_rate=cfg.attention_dropout_rate,
        dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype), name=name)

  def _residual(self, x: jax.Array, f: Callable[[jax.Array], jax.Array], name: str,
                deterministic: bool) -> jax.Array:
    """One residual sublayer, arranged by `cfg.norm_placement`."""
    placement = self.cfg.norm_placement
    dropout = nn.Dropout(self.cfg.dropout_rate, deterministic=deterministic)
    if placement == "post":
      return norm_for(self.cfg, f"{name}_norm")(x + dropout(f(x)))
    if placement == "pre":
      return x + dropout(f(norm_for(self.cfg, f"{name}_norm")(x)))
    raise ValueError(f"Unknown norm_placement {placement!r}.")

  @nn.compact
  def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None,
               encoded: Optional[jax.Array] = None, cross_mask: Optional[jax.Array] = None, *,
               positions: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    cfg = self.cfg
    self_attention = self._attention("self_attention", True)
    x = self._residual(
        x, lambda h: self_attention(h, h, mask, positions=positions, deterministic=deterministic),
        "self_attention", deterministic)
    if self.cross_attention:
      if encoded is None:
        raise ValueError("A block with cross_attention=True needs `encoded` inputs.")
      cross = self._attention("cross_attention", False)
      x = self._residual(x, lambda h: cross(h, encoded, cross_mask, deterministic=deterministic),
                         "cross_attention", deterministic)
    ffn = FeedForward(d_ff=cfg.d_ff, activation=cfg.activation, use_bias=cfg.use_bias,
                      dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype),
                      name="feed_forward")
    return self._residual(x, ffn, "feed_forward", deterministic)
