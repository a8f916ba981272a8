"""Normalization layers over the last (feature) axis."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import NORMS, options_text
from transformer.model.common import ones_init, zeros_init


class LayerNorm(nn.Module):
  """LayerNorm(z; gamma, beta) = gamma * (z - mu_z) / sqrt(sigma_z^2 + eps) + beta.

  mu_z and sigma_z are the mean and (biased) standard deviation over the feature axis, as in
  the textbook's eqs. 9.13-9.15; eps keeps the division finite. Statistics are taken in
  float32 whatever the input dtype. Input and output: `[..., features]`.
  """
  epsilon: float = 1e-6
  use_bias: bool = True
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    z = x.astype(jnp.float32)
    mean = jnp.mean(z, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(z - mean), axis=-1, keepdims=True)
    return _scale_and_shift(self, (z - mean) * jax.lax.rsqrt(var + self.epsilon), self.use_bias)


def _scale_and_shift(norm: nn.Module, y: jax.Array, use_bias: bool) -> jax.Array:
  """`gamma * y (+ beta)` in float32, cast to `norm.dtype`: the per-feature gain `scale` (init 1)
  and, with `use_bias`, shift `bias` (init 0) of `norm`, each `[features]` in its
  `param_dtype`. Called inside `norm`'s compact `__call__`, so the parameters are `norm`'s."""
  features = y.shape[-1]
  y = y * norm.param("scale", ones_init(("norm",)), (features,), norm.param_dtype
                     ).astype(jnp.float32)
  if use_bias:
    y = y + norm.param("bias", zeros_init(("norm",)), (features,), norm.param_dtype
                       ).astype(jnp.float32)
  return y.astype(norm.dtype)


class RMSNorm(nn.Module):
  """RMSNorm(z; gamma) = gamma * z / sqrt(mean(z^2) + eps) (Zhang & Sennrich, 2019).

  Input and output: `[..., features]`.
  """
  epsilon: float = 1e-6
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    z = x.astype(jnp.float32)
    y = z * jax.lax.rsqrt(jnp.mean(jnp.square(z), axis=-1, keepdims=True) + self.epsilon)
    return _scale_and_shift(self, y, use_bias=False)


class DynamicTanh(nn.Module):
  """DyT(z; alpha, gamma, beta) = gamma * tanh(alpha * z) + beta (Zhu et al., 2025,
  "Transformers without Normalization"): alpha a learnable scalar (init `alpha_init`), gamma
  = 1 and beta = 0 per feature at init. Elementwise, no statistics. `[..., features]`."""
  alpha_init: float = 0.5
  use_bias: bool = True
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    alpha = self.param("alpha", nn.with_logical_partitioning(
        nn.initializers.constant(self.alpha_init), ()), (), self.param_dtype)
    y = jnp.tanh(alpha.astype(jnp.float32) * x.astype(jnp.float32))
    return _scale_and_shift(self, y, self.use_bias)


class Identity(nn.Module):
  """`norm=none`: no normalization (the un-normalized residual network with pre-norm)."""

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    return x


def make_norm(kind: str, *, epsilon: float, use_bias: bool, dtype, param_dtype,
              name: str, dyt_alpha_init: float = 0.5) -> nn.Module:
  """Builds the norm named by `ModelConfig.norm` (layernorm, rmsnorm, dyt or none)."""
  if kind == "dyt":
    return DynamicTanh(alpha_init=dyt_alpha_init, use_bias=use_bias, dtype=dtype,
                       param_dtype=param_dtype, name=name)
  if kind == "none":
    return Identity(name=name)
  if kind == "layernorm":
    return LayerNorm(epsilon=epsilon, use_bias=use_bias, dtype=dtype,
                     param_dtype=param_dtype, name=name)
  if kind == "rmsnorm":
    return RMSNorm(epsilon=epsilon, dtype=dtype, param_dtype=param_dtype, name=name)
  raise ValueError(f"Unknown norm {kind!r}; choose {options_text(NORMS)}.")
