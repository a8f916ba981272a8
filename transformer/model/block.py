"""The Transformer block: sublayers wrapped in residual connections and norms.

Where the norm sits is one switch, `ModelConfig.norm_placement`, handled in one place
(`Block._residual`); every stack uses this block. For a sublayer f, N the norm of kind
`ModelConfig.norm`:

  post     (Vaswani et al., 2017; "Add & Norm"):    x -> N(x + f(x))
  pre      (Xiong et al., 2020):                    x -> x + f(N(x))        final N after the stack
  peri     (Kim et al., 2025, "Peri-LN"; the same   x -> x + N_out(f(N_in(x)))   final N after
           wiring as CogView's sandwich-LN, Ding et al., 2021)               the stack, as Peri-LN
  deepnorm (Wang et al., 2022, "DeepNet"):          x -> N(alpha * x + f(x)), and at init the
           W_v, W_O and feed-forward kernels scaled by beta (gain 1 for W_q, W_k); alpha and
           beta from the paper's table (`deepnorm_constants`), by the stack's role and depth
  mix      (Li et al., 2024, "Mix-LN"):             post in the first floor(mix_post_fraction
           * L) blocks of a stack, pre in the rest, and the final N the pre part needs
  admin    (Liu et al., 2020, "Admin"):             x -> N(omega * x + f(x)), omega a learnable
           per-feature vector initialised by profiling (`transformer/model/admin.py`)
  hybrid   (Zhuo et al., 2025, "HybridNorm", Fig. 2(d) of arXiv v1 and its official code: OLMo's
           `OLMoSequentialBlock` with attn_norm False, use_query/key/value_norm True,
           ffn_norm True, ffn_residual_after_norm True, then `ln_f`):
             attention     h -> h + Attn(N_q(Q), N_k(K), N_v(V)), each N over one head's
                           features (head_dim, parameters shared by the heads), before RoPE
             feed-forward  h -> y + FFN(y), y = N(h): the norm's output is both the FFN's
                           input and the residual
           and a final N after the stack. (The paper's HybridNorm*, whose first block is
           pre-norm, is not built.)
  hybrid_v0  this project's earlier reading, not the paper's block (the committed hybrid_norm
           and depth_lr results up to commit e081cee used it under the name `hybrid`):
           attention x -> x + Attn(x) with queries, keys and values each normalized over all
           heads together; feed-forward x -> N(x + FFN(x)); no final N

Dropout, when enabled, is applied to f's output before it joins the residual stream.

A block knows its stack's role ("decoder_only", "encoder_only", "encoder", "decoder") and
depth, given explicitly by `TransformerStack`, because DeepNorm's constants depend on them.
When the "diagnostics" collection is mutable a block sows scalars: the RMS of each sublayer's
output (`<sublayer>_out_rms`) and of the residual stream after the block (`residual_rms`), and
that stream's largest and median magnitude over every element (`residual_max_abs`,
`residual_median_abs`: Sun et al. 2024's massive activations, the largest against the median);
with "admin_profile" mutable, the variance of each branch output (`<sublayer>_branch_var`).
"""

import functools
import math
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ModelConfig
from transformer.model.attention import MultiHeadAttention
from transformer.model.common import dtype_of, sow_scalar
from transformer.model.feedforward import FeedForward
from transformer.model.norms import make_norm

ROLES = ("decoder_only", "encoder_only", "encoder", "decoder")
# A block's sublayers in execution order. Their names name parameters, sown values and
# diagnostics metrics; Admin's omegas accumulate in this order.
SUBLAYERS = SELF_ATTENTION, CROSS_ATTENTION, FEED_FORWARD = (
    "self_attention", "cross_attention", "feed_forward")


def mix_post_layers(cfg: ModelConfig, num_layers: int) -> int:
  """Mix-LN: how many of a stack's first blocks are post-norm (floor(fraction * L))."""
  return int(math.floor(cfg.mix_post_fraction * num_layers))


def layer_placement(cfg: ModelConfig, index: int, num_layers: int) -> str:
  """The arrangement block `index` (0-based) of a `num_layers` stack uses: `mix` resolves to
  post or pre by depth; every other placement is the same in all blocks."""
  if cfg.norm_placement == "mix":
    return "post" if index < mix_post_layers(cfg, num_layers) else "pre"
  return cfg.norm_placement


def needs_final_norm(cfg: ModelConfig, num_layers: int) -> bool:
  """Placements that leave the stack's output un-normalized get a final norm: pre, peri,
  hybrid (HybridNorm's `ln_f`; its last residual y + FFN(y) is not normalized), and mix when
  it has any pre-norm block."""
  return any(layer_placement(cfg, i, num_layers) in ("pre", "peri", "hybrid")
             for i in range(num_layers))


def deepnorm_constants(role: str, encoder_layers: int, decoder_layers: int
                       ) -> tuple[float, float]:
  """(alpha, beta) of DeepNorm (Wang et al., 2022, Table 1 / torchscale).

  N = encoder layers, M = decoder layers:
    encoder-only  alpha = (2N)^(1/4)              beta = (8N)^(-1/4)
    decoder-only  alpha = (2M)^(1/4)              beta = (8M)^(-1/4)
    enc-dec, encoder  alpha = 0.81 (N^4 M)^(1/16)  beta = 0.87 (N^4 M)^(-1/16)
    enc-dec, decoder  alpha = (3M)^(1/4)          beta = (12M)^(-1/4)
  """
  n, m = encoder_layers, decoder_layers
  if role == "encoder_only":
    return (2 * n) ** 0.25, (8 * n) ** -0.25
  if role == "decoder_only":
    return (2 * m) ** 0.25, (8 * m) ** -0.25
  if role == "encoder":
    return 0.81 * (n ** 4 * m) ** (1 / 16), 0.87 * (n ** 4 * m) ** (-1 / 16)
  if role == "decoder":
    return (3 * m) ** 0.25, (12 * m) ** -0.25
  raise ValueError(f"Unknown stack role {role!r}; choose one of {ROLES}.")


def norm_for(cfg: ModelConfig, name: str) -> nn.Module:
  return make_norm(cfg.norm, epsilon=cfg.norm_epsilon, use_bias=cfg.norm_bias,
                   dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype), name=name,
                   dyt_alpha_init=cfg.dyt_alpha_init)


def _rms(x: jax.Array) -> jax.Array:
  """sqrt(mean over tokens of ||x||^2 / d) as a float32 scalar."""
  return jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32))))


class Block(nn.Module):
  """Self-attention, optional cross-attention, and feed-forward sublayers.

  Call with `x: [batch, length, d_model]`, a boolean self-attention mask broadcastable to
  `[batch, heads, length, length]`, and for cross-attention `encoded: [batch, src_len, d_model]`
  with `cross_mask` broadcastable to `[batch, heads, length, src_len]`. `positions:
  [batch, length]` are used by rotary self-attention. With `decode=True` self-attention runs
  over a KV cache (see `MultiHeadAttention`). `causal=True` makes self-attention causal on top
  of `mask` (which then holds only the segment/padding part).

  `placement` ("" = `cfg.norm_placement`) is this block's arrangement (a stack resolves `mix`
  to post or pre per block); `role` and `num_layers` (0 = `cfg.num_layers`) describe the stack
  it sits in, for DeepNorm's constants.
  """
  cfg: ModelConfig
  cross_attention: bool = False
  decode: bool = False
  placement: str = ""
  role: str = "decoder_only"
  num_layers: int = 0
  causal: bool = False  # self-attention sees only earlier positions (on top of `mask`)

  @property
  def _placement(self) -> str:
    return self.placement or self.cfg.norm_placement

  def _deepnorm(self) -> tuple[float, float]:
    cfg = self.cfg
    depth = self.num_layers or cfg.num_layers
    if self.role in ("decoder_only", "decoder"):
      encoder_layers, decoder_layers = cfg.num_layers, depth
    else:
      encoder_layers, decoder_layers = depth, cfg.decoder_layers
    return deepnorm_constants(self.role, encoder_layers, decoder_layers)

  def _init_gain(self) -> float:
    """DeepNorm's beta for W_v, W_O and the feed-forward kernels; 1 otherwise."""
    return self._deepnorm()[1] if self._placement == "deepnorm" else 1.0

  def _attention(self, name: str, self_attention: bool) -> MultiHeadAttention:
    cfg = self.cfg
    hybrid = self._placement == "hybrid"  # QKV-Norm: q, k and v each normalized per head
    per_head = functools.partial(norm_for, cfg)
    qk_norm = per_head if cfg.qk_norm or hybrid else None
    qkv_norm = per_head if self._placement == "hybrid_v0" else None  # over all heads together
    return MultiHeadAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, num_kv_heads=cfg.kv_heads,
        rope=self_attention and cfg.positions == "rope",
        rope_max_timescale=cfg.rope_max_timescale,
        decode=self_attention and self.decode, use_bias=cfg.use_bias,
        implementation=cfg.attention_impl, dropout_rate=cfg.attention_dropout_rate,
        dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype),
        qk_norm=qk_norm, value_norm=per_head if hybrid else None, qkv_norm=qkv_norm,
        value_out_gain=self._init_gain(),
        causal=self_attention and self.causal, name=name)

  def _branch(self, f: Callable[[jax.Array], jax.Array], h: jax.Array, name: str,
              deterministic: bool) -> jax.Array:
    """f(h) with dropout, sowing its RMS (diagnostics) and variance (Admin profiling)."""
    y = nn.Dropout(self.cfg.dropout_rate, deterministic=deterministic)(f(h))
    if self.is_mutable_collection("diagnostics"):
      sow_scalar(self, "diagnostics", f"{name}_out_rms", _rms(y))
    if self.is_mutable_collection("admin_profile"):
      sow_scalar(self, "admin_profile", f"{name}_branch_var", jnp.var(y.astype(jnp.float32)))
    return y

  def _residual(self, x: jax.Array, f: Callable[[jax.Array], jax.Array], name: str,
                deterministic: bool) -> jax.Array:
    """One residual sublayer, arranged by this block's placement (see the module docstring)."""
    placement = self._placement
    norm = lambda suffix: norm_for(self.cfg, f"{name}_{suffix}")
    branch = lambda h: self._branch(f, h, name, deterministic)
    if placement == "post":
      return norm("norm")(x + branch(x))
    if placement == "pre":
      return x + branch(norm("norm")(x))
    if placement == "peri":
      return x + norm("out_norm")(branch(norm("norm")(x)))
    if placement == "deepnorm":
      alpha = self._deepnorm()[0]
      return norm("norm")(alpha * x + branch(x))
    if placement == "hybrid":  # attention normalizes q, k, v inside (QKV-Norm)
      if name != FEED_FORWARD:
        return x + branch(x)
      y = norm("norm")(x)
      return y + branch(y)
    if placement == "hybrid_v0":  # the earlier reading: q, k, v normed over all heads inside
      return norm("norm")(x + branch(x)) if name == FEED_FORWARD else x + branch(x)
    if placement == "admin":
      # Initialised to 1 by `init`; `admin.profile_omegas` then sets the profiled values.
      omega = self.param(f"{name}_omega", nn.with_logical_partitioning(
          nn.initializers.ones_init(), ("norm",)), (x.shape[-1],), dtype_of(self.cfg.param_dtype))
      return norm("norm")(omega.astype(x.dtype) * x + branch(x))
    raise ValueError(f"Unknown norm_placement {placement!r} for a block (mix is resolved per "
                     "block by the stack).")

  @nn.compact
  def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None,
               encoded: Optional[jax.Array] = None, cross_mask: Optional[jax.Array] = None, *,
               positions: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    cfg = self.cfg
    # The block's input is materialised once: without the barrier XLA:CPU fuses the residual
    # stream's adds into every later block's fusions and recomputes them there, so an unrolled
    # pre-norm step's cost grew faster than its depth (12 layers: 2,495 tokens/s against
    # post-norm's 4,893; with it 4,688 and 5,162). A scanned stack was not affected. It changes
    # no value: losses match bit for bit.
    x = jax.lax.optimization_barrier(x)
    self_attention = self._attention(SELF_ATTENTION, True)
    x = self._residual(
        x, lambda h: self_attention(h, h, mask, positions=positions, deterministic=deterministic),
        SELF_ATTENTION, deterministic)
    if self.cross_attention:
      if encoded is None:
        raise ValueError("A block with cross_attention=True needs `encoded` inputs.")
      cross = self._attention(CROSS_ATTENTION, False)
      x = self._residual(x, lambda h: cross(h, encoded, cross_mask, deterministic=deterministic),
                         CROSS_ATTENTION, deterministic)
    ffn = FeedForward(d_ff=cfg.d_ff, activation=cfg.activation, use_bias=cfg.use_bias,
                      dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype),
                      init_gain=self._init_gain(), name=FEED_FORWARD)
    x = self._residual(x, ffn, FEED_FORWARD, deterministic)
    if self.is_mutable_collection("diagnostics"):
      sow_scalar(self, "diagnostics", "residual_rms", _rms(x))
      magnitude = jnp.abs(x.astype(jnp.float32))  # massive activations: the largest vs the median
      sow_scalar(self, "diagnostics", "residual_max_abs", jnp.max(magnitude))
      sow_scalar(self, "diagnostics", "residual_median_abs", jnp.median(magnitude))
    return x
