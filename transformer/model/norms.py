"""Normalization layers over the last (feature) axis."""

import flax.linen as nn
import jax
import jax.numpy as jnp

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
    features = x.shape[-1]
    z = x.astype(jnp.float32)
    mean = jnp.mean(z, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(z - mean), axis=-1, keepdims=True)
    y = (z - mean) * jax.lax.rsqrt(var + self.epsilon)
    scale = self.param("scale", ones_init(("norm",)), (features,), self.param_dtype)
    y = y * scale.astype(jnp.float32)
    if self.use_bias:
      bias = self.param("bias", zeros_init(("norm",)), (features,), self.param_dtype)
      y = y + bias.astype(jnp.float32)
    return y.astype(self.dtype)


class RMSNorm(nn.Module):
  """RMSNorm(z; gamma) = gamma * z / sqrt(mean(z^2) + eps) (Zhang & Sennrich, 2019).

  Input and output: `[..., features]`.
  """
  epsilon: float = 1e-6
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    features = x.shape[-1]
    z = x.astype(jnp.float32)
    y = z * jax.lax.rsqrt(jnp.mean(jnp.square(z), axis=-1, keepdims=True) + self.epsilon)
    scale = self.param("scale", ones_init(("norm",)), (features,), self.param_dtype)
    return (y * scale.astype(jnp.float32)).astype(self.dtype)


def make_norm(kind: str, *, epsilon: float, use_bias: bool, dtype, param_dtype,
              name: str) -> nn.Module:
  """Builds the norm named by `ModelConfig.norm` ("layernorm" or "rmsnorm")."""
  if kind == "layernorm":
    return LayerNorm(epsilon=epsilon, use_bias=use_bias, dtype=dtype,
                     param_dtype=param_dtype, name=name)
  if kind == "rmsnorm":
    return RMSNorm(epsilon=epsilon, dtype=dtype, param_dtype=param_dtype, name=name)
  raise ValueError(f"Unknown norm {kind!r}; choose 'layernorm' or 'rmsnorm'.")
