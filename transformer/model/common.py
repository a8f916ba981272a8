"""Small shared pieces: dtypes and parameter initializers with logical axis names."""

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from transformer.config import DTYPES

JNP_DTYPES = {name: getattr(jnp, name) for name in DTYPES}  # "bfloat16" -> jnp.bfloat16


def dtype_of(name: str):
  return JNP_DTYPES[name]


def fan_in_init(logical: Sequence[str], gain: float = 1.0):
  """Truncated-normal init with variance gain^2/fan_in, tagged with logical axis names.

  `gain` != 1 is DeepNorm's beta (see `transformer/model/block.py`).

  `nn.DenseGeneral` initializes multi-axis kernels such as `[embed, heads, head_dim]` in their
  flattened 2-D form, so fan_in is the product of the contracted axes, as for a plain matrix.
  """
  init = nn.initializers.variance_scaling(gain ** 2, "fan_in", "truncated_normal")
  return nn.with_logical_partitioning(init, tuple(logical))


def zeros_init(logical: Sequence[str]):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), tuple(logical))


def ones_init(logical: Sequence[str]):
  return nn.with_logical_partitioning(nn.initializers.ones_init(), tuple(logical))
