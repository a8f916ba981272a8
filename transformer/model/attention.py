"""Scaled dot-product multi-head attention.

Per head h: Q_h = X W_q^h, K_h = Y W_k^h, V_h = Y W_v^h, each `d_model -> head_dim`;
head_h = softmax(Q_h K_h^T / sqrt(head_dim)) V_h; the heads are concatenated and projected
by W_O. Self-attention is `Y = X`; cross-attention takes Y from the encoder.

Masks are boolean, True where a query may attend to a key, broadcastable to
`[batch, heads, q_len, kv_len]`; build them with `causal_mask`, `padding_mask` and
`segment_mask` and combine with `&`. Causal self-attention is a flag instead (`causal=True`):
the layer gets only the segment/padding mask, and the fused implementations receive
`is_causal=True`, so cuDNN's flash attention can skip the masked half of every tile rather than
read a dense `[q_len, kv_len]` mask; "reference" and the diagnostics add `causal_mask` themselves.

Grouped-query attention (Ainslie et al., 2023): with `num_kv_heads < num_heads` the keys and
values have `num_kv_heads` heads and query head n uses key/value head `n // (num_heads /
num_kv_heads)` (the convention of `jax.nn.dot_product_attention`).

Incremental decoding: with `decode=True` a self-attention layer keeps its keys and values in
the "cache" collection (`cached_key`, `cached_value`: `[batch, max_len, kv_heads, head_dim]`,
and `cache_index`). The cache is created by `init` with the length of the inputs given there;
each later call writes its `q_len` new keys and values at `cache_index` and attends causally
over everything written so far.
"""

import functools
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ATTENTION_IMPLS
from transformer.model.common import fan_in_init, sow_scalar, zeros_init
from transformer.model.positions import apply_rope


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


def padding_mask(q_tokens: jax.Array, kv_tokens: jax.Array, pad_id: int = 0) -> jax.Array:
  """`[batch, 1, q_len, kv_len]`: both the query and the key are real tokens (not `pad_id`)."""
  return segment_mask((q_tokens != pad_id).astype(jnp.int32),
                      (kv_tokens != pad_id).astype(jnp.int32))


def repeat_kv_heads(x: jax.Array, num_heads: int) -> jax.Array:
  """`[batch, len, kv_heads, head_dim]` -> `[batch, len, num_heads, head_dim]`; head n gets
  key/value head n // (num_heads / kv_heads)."""
  kv_heads = x.shape[2]
  if num_heads % kv_heads:
    raise ValueError(f"num_heads={num_heads} is not a multiple of kv heads={kv_heads}.")
  return jnp.repeat(x, num_heads // kv_heads, axis=2)


def reference_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                        mask: Optional[jax.Array] = None,
                        dropout_fn=None) -> tuple[jax.Array, jax.Array]:
  """softmax(Q K^T / sqrt(d_k)) V written out with einsums.

  Args:
    query: `[batch, q_len, heads, head_dim]`.
    key, value: `[batch, kv_len, kv_heads, head_dim]`; kv_heads divides heads.
    mask: boolean, broadcastable to `[batch, heads, q_len, kv_len]`.
    dropout_fn: optional function applied to the attention weights.
  Returns:
    (`[batch, q_len, heads, head_dim]` output, `[batch, heads, q_len, kv_len]` weights).
    A query that sees no key (a padding row) gets all-zero weights and a zero output.
  """
  d_k = query.shape[-1]
  key = repeat_kv_heads(key, query.shape[2])
  value = repeat_kv_heads(value, query.shape[2])
  logits = jnp.einsum("btnh,bsnh->bnts", query, key).astype(jnp.float32) / jnp.sqrt(d_k)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(logits, axis=-1)
  if mask is not None:  # rows with no visible key (padding queries) attend to nothing
    weights = jnp.where(mask, weights, 0.0)
  probs = weights if dropout_fn is None else dropout_fn(weights)
  out = jnp.einsum("bnts,bsnh->btnh", probs.astype(value.dtype), value)
  return out, weights


def check_implementation(implementation: str, dtype) -> None:
  """Raises a clear error where `implementation` cannot run here (before any compilation)."""
  if implementation not in ATTENTION_IMPLS:
    raise ValueError(f"Unknown attention implementation {implementation!r}; choose one of "
                     f"{list(ATTENTION_IMPLS)} (--config.model.attention_impl).")
  if implementation == "cudnn":
    if jax.default_backend() != "gpu":
      raise ValueError(
          "attention_impl='cudnn' needs a GPU backend, but JAX is running on "
          f"{jax.default_backend()!r}; use --config.model.attention_impl=xla or reference.")
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
      raise ValueError(
          f"attention_impl='cudnn' runs in bfloat16 or float16, but the model computes in "
          f"{jnp.dtype(dtype).name}; set --config.model.dtype=bfloat16 or use attention_impl=xla.")


def fused_attention(query, key, value, mask=None, *, implementation: str,
                    is_causal: bool = False) -> jax.Array:
  """`jax.nn.dot_product_attention` (XLA, or cuDNN flash attention on GPU). Shapes as above;
  key and value may have fewer (kv) heads. `is_causal` lets query i see keys j <= i on top of
  `mask`; JAX aligns it top-left, so it is only right when q_len == kv_len (not for a KV-cache
  step, whose mask carries the causality instead)."""
  check_implementation(implementation, query.dtype)
  return jax.nn.dot_product_attention(query, key, value, mask=mask, is_causal=is_causal,
                                      implementation=implementation)


def _with_causal(mask: Optional[jax.Array], is_causal: bool, query: jax.Array,
                 key: jax.Array) -> Optional[jax.Array]:
  """`mask` (or None) and, when `is_causal`, `causal_mask` of `[batch, q_len, ...]` queries
  over `[batch, kv_len, ...]` keys: the dense mask the non-fused paths need."""
  if not is_causal:
    return mask
  causal = causal_mask(query.shape[1], key.shape[1])
  return causal if mask is None else mask & causal


def _over_heads(norm: nn.Module, x: jax.Array) -> jax.Array:
  """`norm` applied to `x: [batch, length, heads, head_dim]` over its last two axes together."""
  flat = norm(x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1]))
  return flat.reshape(x.shape)


class MultiHeadAttention(nn.Module):
  """Multi-head attention with per-head projections and an output projection W_O.

  Call with `x_q: [batch, q_len, d_model]`, `x_kv: [batch, kv_len, d_model]` and a boolean
  `mask`; returns `[batch, q_len, d_model]`. `causal=True` (self-attention) also lets query i
  see only keys j <= i, as `mask & causal_mask(q_len)` would (passed to the fused kernels as
  `is_causal`; a KV-cache step uses the cache's own mask instead). With
  `implementation="reference"` the attention weights `[batch, heads, q_len, kv_len]` are
  recorded in the "intermediates" collection.
  With `rope=True` (self-attention only), `positions: [batch, q_len]` rotate queries and keys.

  `qk_norm(name)`, when given, builds the norm applied to queries and keys over head_dim
  before RoPE and the dot product (Dehghani et al., 2023; one set of parameters shared by all
  heads, as in Wortsman et al., 2023); keys are cached normalized. `value_norm(name)`, when
  given, normalizes the values the same way, over head_dim with one set of parameters for all
  heads: with `qk_norm` it is HybridNorm's QKV-Norm (Zhuo et al., 2025; the official code's
  `use_query/key/value_norm`, each a norm of size d_model / n_heads applied to
  `[batch, heads, len, head_dim]`, before RoPE). `qkv_norm(name)`, when given, is this
  project's earlier reading of QKV-Norm (placement `hybrid_v0`): queries, keys and values each
  normalized over all heads together (`[..., heads * head_dim]`). Values are cached
  normalized. `value_out_gain` scales the init of W_v and W_O (DeepNorm's beta). When the
  "diagnostics" collection is mutable the layer sows the mean attention entropy and the
  largest attention logit (scalars).
  """
  num_heads: int
  head_dim: int
  num_kv_heads: int = 0  # 0 = num_heads
  rope: bool = False
  rope_max_timescale: float = 10_000.0
  decode: bool = False
  use_bias: bool = True
  implementation: str = "xla"
  dropout_rate: float = 0.0
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32
  qk_norm: Optional[Callable[[str], nn.Module]] = None
  value_norm: Optional[Callable[[str], nn.Module]] = None
  qkv_norm: Optional[Callable[[str], nn.Module]] = None
  value_out_gain: float = 1.0
  causal: bool = False

  @nn.compact
  def __call__(self, x_q: jax.Array, x_kv: jax.Array, mask: Optional[jax.Array] = None, *,
               positions: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    check_implementation(self.implementation, self.dtype)
    d_model = x_q.shape[-1]
    kv_heads = self.num_kv_heads or self.num_heads
    project = functools.partial(
        nn.DenseGeneral, axis=-1,
        use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=fan_in_init(("embed", "heads", "head_dim")),
        bias_init=zeros_init(("heads", "head_dim")))
    query = project(features=(self.num_heads, self.head_dim), name="query")(x_q)  # [b, t, n, h]
    key = project(features=(kv_heads, self.head_dim), name="key")(x_kv)  # [b, s, k, h]
    value = project(features=(kv_heads, self.head_dim), name="value",
                    kernel_init=fan_in_init(("embed", "heads", "head_dim"),
                                            self.value_out_gain))(x_kv)  # [b, s, k, h]
    if self.qkv_norm is not None:
      query = _over_heads(self.qkv_norm("query_norm"), query)
      key = _over_heads(self.qkv_norm("key_norm"), key)
      value = _over_heads(self.qkv_norm("value_norm"), value)
    if self.qk_norm is not None:
      query = self.qk_norm("query_norm")(query)
      key = self.qk_norm("key_norm")(key)
    if self.value_norm is not None:
      value = self.value_norm("value_norm")(value)

    if self.rope:
      if positions is None:
        positions = jnp.broadcast_to(jnp.arange(x_q.shape[1]), x_q.shape[:2])
      query = apply_rope(query, positions, self.rope_max_timescale)
      key = apply_rope(key, positions, self.rope_max_timescale)

    is_causal = self.causal
    if self.decode:
      if self.has_variable("cache", "cached_key"):
        is_causal = False  # the cache's mask is causal at the cache position
      key, value, mask = self._update_cache(key, value, mask)

    if self.is_mutable_collection("diagnostics"):
      self._sow_diagnostics(query, key, _with_causal(mask, is_causal, query, key))

    if self.implementation == "reference":
      dropout_fn = None
      if self.dropout_rate > 0 and not deterministic:
        dropout_fn = nn.Dropout(self.dropout_rate, deterministic=False)
      out, weights = reference_attention(query, key, value, _with_causal(mask, is_causal, query,
                                                                         key), dropout_fn)
      self.sow("intermediates", "attention_weights", weights)
    else:
      out = fused_attention(query, key, value, mask, implementation=self.implementation,
                            is_causal=is_causal)

    return nn.DenseGeneral(
        features=d_model, axis=(-2, -1), use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, name="out",
        kernel_init=fan_in_init(("heads", "head_dim", "embed"), self.value_out_gain),
        bias_init=zeros_init(("embed",)))(out)

  def _sow_diagnostics(self, query: jax.Array, key: jax.Array, mask: Optional[jax.Array]):
    """Sows `attn_entropy` (mean over batch, heads and queries that see a key of
    -sum_s p log p) and `attn_max_logit` (largest visible Q K^T / sqrt(d_k)), both scalars."""
    key = repeat_kv_heads(key, query.shape[2])
    logits = (jnp.einsum("btnh,bsnh->bnts", query, key).astype(jnp.float32)
              / jnp.sqrt(query.shape[-1]))
    visible = jnp.ones(logits.shape, bool) if mask is None else jnp.broadcast_to(mask, logits.shape)
    masked = jnp.where(visible, logits, -jnp.inf)
    log_p = jax.nn.log_softmax(jnp.where(visible, logits, jnp.finfo(jnp.float32).min), -1)
    entropy = -jnp.sum(jnp.where(visible, jnp.exp(log_p) * log_p, 0.0), -1)  # [b, n, t]
    rows = jnp.any(visible, -1).astype(jnp.float32)
    sow_scalar(self, "diagnostics", "attn_entropy",
               jnp.sum(entropy * rows) / jnp.maximum(rows.sum(), 1))
    sow_scalar(self, "diagnostics", "attn_max_logit", jnp.max(masked))

  def _update_cache(self, key: jax.Array, value: jax.Array, mask: Optional[jax.Array]):
    """Writes this call's keys/values at `cache_index`; returns the whole cache and the mask
    `[batch|1, 1, q_len, max_len]` letting query i (at cache_index + i) see keys 0..index+i."""
    initialized = self.has_variable("cache", "cached_key")
    cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
    cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
    cache_index = self.variable("cache", "cache_index", lambda: jnp.zeros([], jnp.int32))
    if not initialized:  # init: the cache takes the inputs' length; attend as a plain layer
      return key, value, mask
    q_len, max_len = key.shape[1], cached_key.value.shape[1]
    index = cache_index.value
    zero = jnp.zeros([], jnp.int32)
    key = jax.lax.dynamic_update_slice(cached_key.value, key.astype(cached_key.value.dtype),
                                       (zero, index, zero, zero))
    value = jax.lax.dynamic_update_slice(cached_value.value,
                                         value.astype(cached_value.value.dtype),
                                         (zero, index, zero, zero))
    cached_key.value, cached_value.value = key, value
    cache_index.value = index + q_len
    visible = jnp.arange(max_len)[None, :] <= index + jnp.arange(q_len)[:, None]
    visible = visible[None, None]  # [1, 1, q_len, max_len]
    return key, value, visible if mask is None else mask & visible
