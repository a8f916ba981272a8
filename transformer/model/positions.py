"""Positional encodings: sinusoidal (Vaswani et al., 2017), learned absolute, rotary
(Su et al., 2021; applied to queries and keys inside attention), none."""

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


def apply_rope(x: jax.Array, positions: jax.Array, max_timescale: float = 10_000.0
               ) -> jax.Array:
  """Rotary position embedding (RoFormer, Su et al., 2021, eq. 34).

  Each pair of features (2i, 2i+1) of every head is rotated by the angle
  `pos * theta_i`, `theta_i = max_timescale^(-2i / head_dim)`:
    out[2i]   = x[2i] cos(pos theta_i) - x[2i+1] sin(pos theta_i)
    out[2i+1] = x[2i] sin(pos theta_i) + x[2i+1] cos(pos theta_i)
  so that <rope(q, m), rope(k, n)> depends on m and n only through m - n.

  Args:
    x: `[batch, length, heads, head_dim]` (head_dim even).
    positions: `[batch, length]` int.
  Returns:
    `[batch, length, heads, head_dim]` in x's dtype.
  """
  head_dim = x.shape[-1]
  if head_dim % 2:
    raise ValueError(f"rope needs an even head_dim, got {head_dim}.")
  two_i = np.arange(0, head_dim, 2, dtype=np.float32)
  theta = jnp.asarray(max_timescale ** (-two_i / head_dim))  # [h/2]
  angles = positions.astype(jnp.float32)[:, :, None, None] * theta  # [b, t, 1, h/2]
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], head_dim // 2, 2)
  even, odd = pairs[..., 0], pairs[..., 1]
  rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return rotated.reshape(x.shape).astype(x.dtype)
