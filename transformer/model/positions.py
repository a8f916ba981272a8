"""Positional encodings: sinusoidal (Vaswani et al., 2017), learned absolute, none."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def sinusoidal_encoding(positions: jax.Array, d_model: int, max_timescale: float = 10_000.0
                        ) -> jax.Array:
  """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

  Sine and cosine are interleaved exactly as in "Attention Is All You Need", section 3.5.

  Args:
    positions: integer positions, `[batch, length]`.
    d_model: encoding width (even).
  Returns:
    `[batch, length, d_model]` float32.
  """
  if d_model % 2:
    raise ValueError(f"sinusoidal positions need an even d_model, got {d_model}.")
  two_i = np.arange(0, d_model, 2, dtype=np.float32)  # [d/2]
  inv_freq = jnp.asarray(1.0 / (max_timescale ** (two_i / d_model)))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [b, t, d/2]
  pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [b, t, d/2, 2]
  return pe.reshape(*positions.shape, d_model)


class LearnedPositions(nn.Module):
  """A trainable table of `max_len` position vectors. `[batch, length] -> [..., d_model]`."""
  max_len: int
  d_model: int
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, positions: jax.Array) -> jax.Array:
    table = self.param(
        "table",
        nn.with_logical_partitioning(nn.initializers.normal(stddev=0.02), ("position", "embed")),
        (self.max_len, self.d_model), self.param_dtype)
    return jnp.take(table, positions, axis=0)
