"""The position-wise feed-forward net: FFN(x) = W_2 act(W_1 x + b_1) + b_2.

With `activation="swiglu"` (Shazeer, 2020): FFN(x) = W_2 (swish(W_1 x) * (W_3 x)), the gate
W_1 ("wi") and the linear unit W_3 ("wi_linear") each `d_model -> d_ff`.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.config import ACTIVATIONS, options_text
from transformer.model.common import fan_in_init, zeros_init

# The activations applied elementwise; with "swiglu" (gated, built below) they are
# config.ACTIVATIONS (tests/test_options.py checks it).
ELEMENTWISE = {"relu": jax.nn.relu, "gelu": jax.nn.gelu}


class FeedForward(nn.Module):
  """Applies the same two-layer MLP at every position. `[..., d_model] -> [..., d_model]`."""
  d_ff: int
  activation: str = "relu"
  use_bias: bool = True
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32
  init_gain: float = 1.0  # multiplies the init std of every kernel (DeepNorm's beta)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    d_model = x.shape[-1]
    h = nn.Dense(self.d_ff, use_bias=self.use_bias, dtype=self.dtype,
                 param_dtype=self.param_dtype, name="wi",
                 kernel_init=fan_in_init(("embed", "mlp"), self.init_gain),
                 bias_init=zeros_init(("mlp",)))(x)
    if self.activation == "swiglu":
      linear = nn.Dense(self.d_ff, use_bias=self.use_bias, dtype=self.dtype,
                        param_dtype=self.param_dtype, name="wi_linear",
                        kernel_init=fan_in_init(("embed", "mlp"), self.init_gain),
                        bias_init=zeros_init(("mlp",)))(x)
      h = jax.nn.silu(h) * linear
    elif self.activation in ELEMENTWISE:
      h = ELEMENTWISE[self.activation](h)
    else:
      raise ValueError(f"Unknown activation {self.activation!r}; choose "
                       f"{options_text(ACTIVATIONS)}.")
    return nn.Dense(d_model, use_bias=self.use_bias, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="wo",
                    kernel_init=fan_in_init(("mlp", "embed"), self.init_gain),
                    bias_init=zeros_init(("embed",)))(h)
