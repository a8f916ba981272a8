"""Whole models built from the stacks.

  DecoderLM        decoder-only causal LM                      tokens -> next-token logits
  EncoderDecoder   encoder + decoder with cross-attention      (source, target in) -> logits
  MaskedLM         bidirectional encoder + BERT masked-LM head tokens -> logits per position
  Classifier       the same encoder + mean-pool + linear head  tokens -> class logits
  VisionTransformer  patches as tokens, the same encoder, head images -> class logits

Every model embeds with one `Embedder` named "embedder"; the encoders of `MaskedLM` and
`Classifier` share parameter names ("embedder", "encoder"), so a classifier can start from a
masked-LM checkpoint. Token id 0 is padding wherever a padding mask is derived from tokens.
"""

from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ModelConfig
from transformer.model import admin
from transformer.model.attention import padding_mask, segment_mask
from transformer.model.block import norm_for
from transformer.model.common import dtype_of, fan_in_init
from transformer.model.positions import LearnedPositions, sinusoidal_encoding
from transformer.model.stacks import TransformerStack


class AdminInit:
  """Mixed into every model: with `norm_placement="admin"`, `init` ends with Admin's profiling
  pass on the same batch (`transformer.model.admin.profile_omegas`), so every caller of
  `init` (tasks, tests, decoding) gets the profiled omegas. A no-op for other placements and
  for decoding models (whose `init` only builds the KV cache)."""

  def init(self, rngs, *args, **kwargs):
    variables = super().init(rngs, *args, **kwargs)
    if (self.cfg.norm_placement != "admin" or getattr(self, "decode", False)
        or kwargs.get("method") is not None):
      return variables
    kwargs.pop("mutable", None)
    return admin.profile_omegas(self, variables, *args, **kwargs)


class Embedder(nn.Module):
  """Token embedding (optionally scaled by sqrt(d_model)) plus positional encoding.

  `tokens, positions: [batch, length] int -> [batch, length, d_model]`. `attend` maps
  `[..., d_model]` to vocabulary logits with the transposed embedding (tied output layer).
  """
  cfg: ModelConfig

  def setup(self):
    cfg = self.cfg
    self.token_embedding = nn.Embed(
        cfg.padded_vocab_size, cfg.d_model, dtype=dtype_of(cfg.dtype),
        param_dtype=dtype_of(cfg.param_dtype),
        embedding_init=nn.with_logical_partitioning(
            nn.initializers.normal(stddev=cfg.d_model ** -0.5), ("vocab", "embed")))
    if cfg.positions == "learned":
      self.position_table = LearnedPositions(cfg.max_len, cfg.d_model,
                                             param_dtype=dtype_of(cfg.param_dtype))

  def __call__(self, tokens: jax.Array, positions: jax.Array) -> jax.Array:
    cfg = self.cfg
    x = self.token_embedding(tokens)
    if cfg.embed_scale:
      x = x * jnp.sqrt(cfg.d_model).astype(x.dtype)
    if cfg.positions == "sinusoidal":
      x = x + sinusoidal_encoding(positions, cfg.d_model).astype(x.dtype)
    elif cfg.positions == "learned":
      x = x + self.position_table(positions).astype(x.dtype)
    return x

  def attend(self, x: jax.Array) -> jax.Array:
    return self.token_embedding.attend(x)


class DecoderLM(AdminInit, nn.Module):
  """Decoder-only causal language model.

  Call with `tokens: [batch, length]` int; optional `positions` and `segment_ids`
  (`[batch, length]`, for packed sequences; segment 0 is padding). Returns float32 logits
  `[batch, length, vocab_size]` predicting the next token at every position.

  With `decode=True` the call feeds the next `length` tokens (at the given `positions`)
  through a KV cache created by `init` (see `transformer.tasks.decode`); `segment_ids` are unused.
  `return_hidden=True` returns the final hidden states `[batch, length, d_model]` instead of the
  logits (the chunked loss applies `output_projection` to them).
  """
  cfg: ModelConfig
  decode: bool = False

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: Optional[jax.Array] = None,
               segment_ids: Optional[jax.Array] = None, *, deterministic: bool = True,
               return_hidden: bool = False) -> jax.Array:
    cfg = self.cfg
    length = tokens.shape[1]
    if length > cfg.max_len and cfg.positions == "learned":
      raise ValueError(f"Sequence length {length} exceeds model.max_len={cfg.max_len}.")
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
    mask = None  # causality is the stack's `causal` flag (the KV cache's own mask in decoding)
    if segment_ids is not None and not self.decode:
      mask = segment_mask(segment_ids, segment_ids)

    embedder = Embedder(cfg, name="embedder")
    x = embedder(tokens, positions)
    x = nn.Dropout(cfg.dropout_rate, deterministic=deterministic)(x)
    x = TransformerStack(cfg, decode=self.decode, role="decoder_only", causal=True,
                         name="decoder")(
        x, mask, positions=positions, deterministic=deterministic)
    if return_hidden:
      return x
    return output_logits(cfg, embedder, x)


def output_logits(cfg: ModelConfig, embedder: Embedder, x: jax.Array) -> jax.Array:
  """`[..., d_model] -> [..., vocab_size]` float32: the transposed token embedding when
  `tie_embeddings`, else a separate (bias-free) projection named "logits" in the caller.
  The matmul has `cfg.padded_vocab_size` columns; the padded ones are dropped
  (`real_vocab_logits`). `output_projection` computes the same from the params."""
  if cfg.tie_embeddings:
    logits = embedder.attend(x)
  else:
    logits = nn.Dense(cfg.padded_vocab_size, use_bias=False, dtype=dtype_of(cfg.dtype),
                      param_dtype=dtype_of(cfg.param_dtype), name="logits",
                      kernel_init=fan_in_init(("embed", "vocab")))(x)
  return real_vocab_logits(cfg, logits)


def real_vocab_logits(cfg: ModelConfig, logits: jax.Array) -> jax.Array:
  """`[..., padded_vocab_size]` -> float32 `[..., vocab_size]`: the padded ids never count in
  a loss, an argmax or a sample, so a padded model scores as the unpadded one on its real rows."""
  if cfg.padded_vocab_size != cfg.vocab_size:
    logits = logits[..., :cfg.vocab_size]
  return logits.astype(jnp.float32)


def output_projection(cfg: ModelConfig, params) -> Callable[[jax.Array], jax.Array]:
  """The output layer of a `DecoderLM`'s `params` as a plain function `[..., d_model] ->
  float32 [..., vocab_size]`, as `output_logits` computes it (for the chunked loss, which
  applies it one chunk at a time outside the module)."""
  dtype = dtype_of(cfg.dtype)
  if cfg.tie_embeddings:
    weight = params["embedder"]["token_embedding"]["embedding"].T  # [d_model, padded_vocab]
  else:
    weight = params["logits"]["kernel"]  # [d_model, padded_vocab]
  return lambda x: real_vocab_logits(cfg, jnp.dot(x.astype(dtype), weight.astype(dtype)))


def _default_positions(tokens: jax.Array, positions: Optional[jax.Array]) -> jax.Array:
  if positions is None:
    return jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return positions


def _check_length(cfg: ModelConfig, length: int, what: str) -> None:
  if length > cfg.max_len and cfg.positions == "learned":
    raise ValueError(f"{what} length {length} exceeds model.max_len={cfg.max_len}; raise "
                     "--config.model.max_len or shorten the data.")


def encoder_mask(tokens: jax.Array, segment_ids: Optional[jax.Array]) -> jax.Array:
  """Bidirectional self-attention mask `[batch, 1, len, len]`: same packed segment when
  `segment_ids` are given, else both tokens real (id != 0)."""
  if segment_ids is not None:
    return segment_mask(segment_ids, segment_ids)
  return padding_mask(tokens, tokens)


def shift_right(targets: jax.Array, bos_id: int, segment_ids: Optional[jax.Array] = None
                ) -> jax.Array:
  """Decoder inputs for teacher forcing: `[batch, len]` targets shifted right by one, `bos_id`
  first (and, when packed, first in every segment; padding stays 0)."""
  shifted = jnp.pad(targets, ((0, 0), (1, 0)), constant_values=bos_id)[:, :-1]
  if segment_ids is None:
    return shifted
  prev = jnp.pad(segment_ids, ((0, 0), (1, 0)))[:, :-1]
  shifted = jnp.where(segment_ids != prev, bos_id, shifted)
  return jnp.where(segment_ids == 0, 0, shifted)


class Encoder(nn.Module):
  """Dropout on the embedded tokens, then a bidirectional stack (no cross-attention).

  `x: [batch, len, d_model]` (embedded), `mask` broadcastable to `[batch, heads, len, len]`,
  `positions: [batch, len]` -> `[batch, len, d_model]`. The embedder lives in the caller so
  that it can be shared with a decoder or an output layer. `role` is "encoder_only" (masked
  LM, classifier) or "encoder" (of an encoder-decoder)."""
  cfg: ModelConfig
  role: str = "encoder_only"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, positions: jax.Array, *,
               deterministic: bool = True) -> jax.Array:
    x = nn.Dropout(self.cfg.dropout_rate, deterministic=deterministic)(x)
    return TransformerStack(self.cfg, role=self.role, name="stack")(x, mask, positions=positions,
                                                    deterministic=deterministic)


class EncoderDecoder(AdminInit, nn.Module):
  """The Transformer of "Attention Is All You Need": encoder, decoder with cross-attention.

  One embedding table is shared by source, target and (if tied) the output layer.
  `__call__(inputs [batch, src_len], decoder_inputs [batch, tgt_len], ...)` returns float32
  logits `[batch, tgt_len, vocab_size]`; the decoder inputs are the targets shifted right
  (`shift_right`). Packed batches pass `*_positions` and `*_segment_ids` (flax wmt names).

  With `decode=True`, `decode(encoded, inputs, decoder_inputs, ...)` feeds the next target
  tokens through the decoder's KV cache (see `transformer.tasks.decode`).
  """
  cfg: ModelConfig
  decode: bool = False

  def setup(self):
    cfg = self.cfg
    self.embedder = Embedder(cfg, name="embedder")
    self.encoder = Encoder(cfg, role="encoder", name="encoder")
    self.decoder = TransformerStack(cfg, cross_attention=True, decode=self.decode,
                                    num_layers=cfg.decoder_layers, role="decoder",
                                    causal=True, name="decoder")
    self.dropout = nn.Dropout(cfg.dropout_rate)
    if not cfg.tie_embeddings:
      self.logits_dense = nn.Dense(cfg.padded_vocab_size, use_bias=False, dtype=dtype_of(cfg.dtype),
                                   param_dtype=dtype_of(cfg.param_dtype), name="logits",
                                   kernel_init=fan_in_init(("embed", "vocab")))

  def encode(self, inputs: jax.Array, inputs_positions: Optional[jax.Array] = None,
             inputs_segment_ids: Optional[jax.Array] = None, *, deterministic: bool = True
             ) -> jax.Array:
    """`inputs: [batch, src_len]` -> `[batch, src_len, d_model]`."""
    _check_length(self.cfg, inputs.shape[1], "Source")
    positions = _default_positions(inputs, inputs_positions)
    x = self.embedder(inputs, positions)
    return self.encoder(x, encoder_mask(inputs, inputs_segment_ids), positions,
                        deterministic=deterministic)

  def decode_logits(self, encoded: jax.Array, inputs: jax.Array, decoder_inputs: jax.Array,
                    targets_positions: Optional[jax.Array] = None,
                    targets_segment_ids: Optional[jax.Array] = None,
                    inputs_segment_ids: Optional[jax.Array] = None, *,
                    deterministic: bool = True) -> jax.Array:
    """Decoder logits `[batch, tgt_len, vocab]` given `encoded: [batch, src_len, d_model]`
    and the source tokens `inputs: [batch, src_len]` (for the cross-attention padding mask)."""
    _check_length(self.cfg, decoder_inputs.shape[1], "Target")
    positions = _default_positions(decoder_inputs, targets_positions)
    if self.decode:
      mask = None  # the KV cache applies causality
      cross_mask = (inputs != 0)[:, None, None, :]
    elif targets_segment_ids is not None:
      if inputs_segment_ids is None:
        raise ValueError("Packed targets need inputs_segment_ids too.")
      mask = segment_mask(targets_segment_ids, targets_segment_ids)  # causal: the stack's flag
      cross_mask = segment_mask(targets_segment_ids, inputs_segment_ids)
    else:
      mask = None
      cross_mask = (inputs != 0)[:, None, None, :]
    y = self.embedder(decoder_inputs, positions)
    y = self.dropout(y, deterministic=deterministic)
    y = self.decoder(y, mask, encoded, cross_mask, positions=positions,
                     deterministic=deterministic)
    if self.cfg.tie_embeddings:
      return real_vocab_logits(self.cfg, self.embedder.attend(y))
    return real_vocab_logits(self.cfg, self.logits_dense(y))

  def __call__(self, inputs: jax.Array, decoder_inputs: jax.Array,
               inputs_positions: Optional[jax.Array] = None,
               inputs_segment_ids: Optional[jax.Array] = None,
               targets_positions: Optional[jax.Array] = None,
               targets_segment_ids: Optional[jax.Array] = None, *,
               deterministic: bool = True) -> jax.Array:
    encoded = self.encode(inputs, inputs_positions, inputs_segment_ids,
                          deterministic=deterministic)
    return self.decode_logits(encoded, inputs, decoder_inputs, targets_positions,
                              targets_segment_ids, inputs_segment_ids,
                              deterministic=deterministic)


def _embed_and_encode(cfg: ModelConfig, tokens: jax.Array, positions: Optional[jax.Array],
                      segment_ids: Optional[jax.Array], deterministic: bool
                      ) -> tuple["Embedder", jax.Array]:
  """The bidirectional trunk shared by `MaskedLM` and `Classifier`, called from their compact
  `__call__`. Its submodule names ("embedder", "encoder") are what `model.init_from` copies
  from a masked-LM run into a classifier. Returns the embedder (for tied outputs) and
  `[batch, len, d_model]` encodings."""
  _check_length(cfg, tokens.shape[1], "Sequence")
  positions = _default_positions(tokens, positions)
  embedder = Embedder(cfg, name="embedder")
  x = Encoder(cfg, name="encoder")(embedder(tokens, positions), encoder_mask(tokens, segment_ids),
                                   positions, deterministic=deterministic)
  return embedder, x


class MaskedLM(AdminInit, nn.Module):
  """Bidirectional encoder with BERT's masked-LM head (Devlin et al., 2019):
  `h -> LN(gelu(W h + b))`, then the (tied) output layer plus a per-token bias.
  `tokens: [batch, len]` -> float32 logits `[batch, len, vocab_size]`."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: Optional[jax.Array] = None,
               segment_ids: Optional[jax.Array] = None, *, deterministic: bool = True
               ) -> jax.Array:
    cfg = self.cfg
    embedder, x = _embed_and_encode(cfg, tokens, positions, segment_ids, deterministic)
    h = nn.Dense(cfg.d_model, dtype=dtype_of(cfg.dtype), param_dtype=dtype_of(cfg.param_dtype),
                 kernel_init=fan_in_init(("embed", "mlp")), name="mlm_transform")(x)
    h = norm_for(cfg, "mlm_norm")(jax.nn.gelu(h))
    bias = self.param("mlm_output_bias", nn.with_logical_partitioning(
        nn.initializers.zeros_init(), ("vocab",)), (cfg.vocab_size,), dtype_of(cfg.param_dtype))
    return output_logits(cfg, embedder, h) + bias.astype(jnp.float32)


class Classifier(AdminInit, nn.Module):
  """The masked-LM's encoder, mean-pooled over real tokens, then a linear layer.
  `tokens: [batch, len]` (0 = padding) -> float32 logits `[batch, num_classes]`."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: Optional[jax.Array] = None,
               segment_ids: Optional[jax.Array] = None, *, deterministic: bool = True
               ) -> jax.Array:
    cfg = self.cfg
    _, x = _embed_and_encode(cfg, tokens, positions, segment_ids, deterministic)
    real = (tokens != 0).astype(jnp.float32)[..., None]
    pooled = jnp.sum(x.astype(jnp.float32) * real, axis=1) / jnp.maximum(real.sum(1), 1.0)
    pooled = nn.Dropout(cfg.dropout_rate, deterministic=deterministic)(pooled)
    return nn.Dense(cfg.num_classes, dtype=dtype_of(cfg.dtype),
                    param_dtype=dtype_of(cfg.param_dtype), name="classifier",
                    kernel_init=fan_in_init(("embed", None)),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(),
                                                           (None,)))(pooled
                                                                          ).astype(jnp.float32)


def image_patches(images: jax.Array, patch_size: int) -> jax.Array:
  """`[batch, height, width, channels]` -> `[batch, (height / p) * (width / p), p * p * channels]`,
  patches in row-major order, each flattened as (row, column, channel)."""
  b, h, w, c = images.shape
  p = patch_size
  if h % p or w % p:
    raise ValueError(f"Images of {h}x{w} pixels do not split into {p}x{p} patches; choose a "
                     "model.patch_size that divides both.")
  x = images.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, (h // p) * (w // p), p * p * c)


class VisionTransformer(AdminInit, nn.Module):
  """ViT (Dosovitskiy et al., 2020): image patches linearly embedded as tokens, a [CLS] token
  (`model.pooling=cls`) or mean pooling, learned positions, the same `Encoder` stack as the
  text models (every norm placement), a linear head.
  `images: [batch, height, width, channels]` float -> float32 logits `[batch, num_classes]`."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, images: jax.Array, *, deterministic: bool = True) -> jax.Array:
    cfg = self.cfg
    dtype, param_dtype = dtype_of(cfg.dtype), dtype_of(cfg.param_dtype)
    x = nn.Dense(cfg.d_model, dtype=dtype, param_dtype=param_dtype,
                 kernel_init=fan_in_init((None, "embed")),
                 bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(), ("embed",)),
                 name="patch_embedding")(image_patches(images, cfg.patch_size).astype(dtype))
    batch = x.shape[0]
    if cfg.pooling == "cls":
      cls = self.param("cls_token", nn.with_logical_partitioning(
          nn.initializers.zeros_init(), (None, None, "embed")), (1, 1, cfg.d_model), param_dtype)
      x = jnp.concatenate([jnp.broadcast_to(cls.astype(dtype), (batch, 1, cfg.d_model)), x], 1)
    length = x.shape[1]
    table = self.param("position_embedding", nn.with_logical_partitioning(
        nn.initializers.normal(stddev=0.02), ("position", "embed")), (length, cfg.d_model),
        param_dtype)
    x = x + table.astype(dtype)[None]
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    mask = jnp.ones((1, 1, length, length), bool)  # every patch sees every patch
    x = Encoder(cfg, name="encoder")(x, mask, positions, deterministic=deterministic)
    pooled = x[:, 0] if cfg.pooling == "cls" else jnp.mean(x, axis=1)
    return nn.Dense(cfg.num_classes, dtype=dtype, param_dtype=param_dtype, name="head",
                    kernel_init=fan_in_init(("embed", None)),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(),
                                                           (None,)))(pooled).astype(jnp.float32)

