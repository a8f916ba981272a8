"""Scaled dot-product multi-head attention.

Per head h: Q_h = X W_q^h, K_h = Y W_k^h, V_h = Y W_v^h, each `d_model -> head_dim`;
head_h = softmax(Q_h K_h^T / sqrt(head_dim)) V_h; the heads are concatenated and projected
by W_O. Self-attention is `Y = X`; cross-attention takes Y from the encoder.

Masks are boolean, True where a query may attend to a key, broadcastable to
`[batch, heads, q_len, kv_len]`; build them with `causal_mask` and `segment_mask` and
combine with `&`.
"""

import functools
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.model.common import fan_in_init, zeros_init


def causal_mask(q_len: int, kv_len: Optional[int] = None) -> jax.Array:
  """`[1, 1, q_len, kv_len]`: query i may see keys j <= i (aligned at the end if kv is longer)."""
  kv_len = q_len if kv_len is None else kv_len
  q = jnp.arange(q_len)[:, None] + (kv_len - q_len)
  k = jnp.arange(kv_len)[None, :]
  return (k <= q)[None, None]


def segment_mask(q_segments: jax.Array, kv_segments: jax.Array) -> jax.Array:
  """`[batch, 1, q_len, kv_len]`: same segment id, and neither is padding (id 0).

  Args:
    q_segments: `[batch, q_len]` int; 0 marks padding, 1.. the packed examples.
    kv_segments: `[batch, kv_len]` int.
  """
  same = q_segments[:, :, None] == kv_segments[:, None, :]
  real = (q_segments[:, :, None] != 0) & (kv_segments[:, None, :] != 0)
  return (same & real)[:, None]


def reference_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                        mask: Optional[jax.Array] = None,
                        dropout_fn=None) -> tuple[jax.Array, jax.Array]:
  """softmax(Q K^T / sqrt(d_k)) V written out with einsums.

  Args:
    query: `[batch, q_len, heads, head_dim]`.
    key, value: `[batch, kv_len, heads, head_dim]`.
    mask: boolean, broadcastable to `[batch, heads, q_len, kv_len]`.
    dropout_fn: optional function applied to the attention weights.
  Returns:
    (`[batch, q_len, heads, head_dim]` output, `[batch, heads, q_len, kv_len]` weights).
  """
  d_k = query.shape[-1]
  logits = jnp.einsum("btnh,bsnh->bnts", query, key).astype(jnp.float32) / jnp.sqrt(d_k)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(logits, axis=-1)
  if mask is not None:  # rows with no visible key (padding queries) attend to nothing
    weights = jnp.where(mask, weights, 0.0)
  probs = weights if dropout_fn is None else dropout_fn(weights)
  out = jnp.einsum("bnts,bsnh->btnh", probs.astype(value.dtype), value)
  return out, weights


def fused_attention(query, key, value, mask=None, *, implementation: str) -> jax.Array:
  """`jax.nn.dot_product_attention` (XLA, or cuDNN flash attention on GPU). Shapes as above."""
  if implementation == "cudnn" and jax.default_backend() != "gpu":
    raise ValueError(
        "attention_impl='cudnn' needs a GPU backend, but JAX is running on "
        f"{jax.default_backend()!r}; use --config.model.attention_impl=xla or reference.")
  return jax.nn.dot_product_attention(query, key, value, mask=mask, implementation=implementation)


class MultiHeadAttention(nn.Module):
  """Multi-head attention with per-head projections and an output projection W_O.

  Call with `x_q: [batch, q_len, d_model]`, `x_kv: [batch, kv_len, d_model]` and a boolean
  `mask`; returns `[batch, q_len, d_model]`. With `implementation="reference"` the attention
  weights `[batch, heads, q_len, kv_len]` are recorded in the "intermediates" collection.
  """
  num_heads: int
  head_dim: int
  use_bias: bool = True
  implementation: str = "xla"
  dropout_rate: float = 0.0
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_q: jax.Array, x_kv: jax.Array, mask: Optional[jax.Array] = None, *,
               deterministic: bool = True) -> jax.Array:
    d_model = x_q.shape[-1]
    project = functools.partial(
        nn.DenseGeneral, features=(self.num_heads, self.head_dim), axis=-1,
        use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=fan_in_init(("embed", "heads", "head_dim")),
        bias_init=zeros_init(("heads", "head_dim")))
    query = project(name="query")(x_q)  # [b, t, n, h]
    key = project(name="key")(x_kv)  # [b, s, n, h]
    value = project(name="value")(x_kv)  # [b, s, n, h]

    if self.implementation == "reference":
      dropout_fn = None
      if self.dropout_rate > 0 and not deterministic:
        dropout_fn = nn.Dropout(self.dropout_rate, deterministic=False)
      out, weights = reference_attention(query, key, value, mask, dropout_fn)
      self.sow("intermediates", "attention_weights", weights)
    else:
      out = fused_attention(query, key, value, mask, implementation=self.implementation)

    return nn.DenseGeneral(
        features=d_model, axis=(-2, -1), use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, name="out",
        kernel_init=fan_in_init(("heads", "head_dim", "embed")),
        bias_init=zeros_init(("embed",)))(out)
