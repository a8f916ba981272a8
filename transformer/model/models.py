"""Whole models built from the stacks."""

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ModelConfig
from transformer.model.attention import causal_mask, segment_mask
from transformer.model.common import dtype_of, fan_in_init
from transformer.model.positions import LearnedPositions, sinusoidal_encoding
from transformer.model.stacks import TransformerStack


class Embedder(nn.Module):
  """Token embedding (optionally scaled by sqrt(d_model)) plus positional encoding.

  `tokens, positions: [batch, length] int -> [batch, length, d_model]`. `attend` maps
  `[..., d_model]` to vocabulary logits with the transposed embedding (tied output layer).
  """
  cfg: ModelConfig

  def setup(self):
    cfg = self.cfg
    self.token_embedding = nn.Embed(
        cfg.vocab_size, cfg.d_model, dtype=dtype_of(cfg.dtype),
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


class DecoderLM(nn.Module):
  """Decoder-only causal language model.

  Call with `tokens: [batch, length]` int; optional `positions` and `segment_ids`
  (`[batch, length]`, for packed sequences; segment 0 is padding). Returns float32 logits
  `[batch, length, vocab_size]` predicting the next token at every position.
  """
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: Optional[jax.Array] = None,
               segment_ids: Optional[jax.Array] = None, *, deterministic: bool = True
               ) -> jax.Array:
    cfg = self.cfg
    length = tokens.shape[1]
    if length > cfg.max_len and cfg.positions == "learned":
      raise ValueError(f"Sequence length {length} exceeds model.max_len={cfg.max_len}.")
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
    mask = causal_mask(length)
    if segment_ids is not None:
      mask = mask & segment_mask(segment_ids, segment_ids)

    embedder = Embedder(cfg, name="embedder")
    x = embedder(tokens, positions)
    x = nn.Dropout(cfg.dropout_rate, deterministic=deterministic)(x)
    x = TransformerStack(cfg, name="decoder")(x, mask, deterministic=deterministic)
    if cfg.tie_embeddings:
      logits = embedder.attend(x)
    else:
      logits = nn.Dense(cfg.vocab_size, use_bias=False, dtype=dtype_of(cfg.dtype),
                        param_dtype=dtype_of(cfg.param_dtype), name="logits",
                        kernel_init=fan_in_init(("embed", "vocab")))(x)
    return logits.astype(jnp.float32)


def build_model(cfg: ModelConfig) -> nn.Module:
  """The model named by `cfg.kind`."""
  if cfg.kind == "decoder_lm":
    return DecoderLM(cfg)
  raise ValueError(f"Unknown model kind {cfg.kind!r}.")
