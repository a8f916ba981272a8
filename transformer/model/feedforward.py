"""The position-wise feed-forward net: FFN(x) = W_2 act(W_1 x + b_1) + b_2."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.model.common import fan_in_init, zeros_init

ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu}


class FeedForward(nn.Module):
  """Applies the same two-layer MLP at every position. `[..., d_model] -> [..., d_model]`."""
  d_ff: int
  activation: str = "relu"
  use_bias: bool = True
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    d_model = x.shape[-1]
    h = nn.Dense(self.d_ff, use_bias=self.use_bias, dtype=self.dtype,
                 param_dtype=self.param_dtype, name="wi",
                 kernel_init=fan_in_init(("embed", "mlp")),
                 bias_init=zeros_init(("mlp",)))(x)
    h = ACTIVATIONS[self.activation](h)
    return nn.Dense(d_model, use_bias=self.use_bias, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="wo",
                    kernel_init=fan_in_init(("mlp", "embed")),
                    bias_init=zeros_init(("embed",)))(h)
