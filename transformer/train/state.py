"""The train state: a pytree of arrays only, so orbax can save and restore it as it is."""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # scalar int32: optimizer steps taken
  params: Any
  opt_state: Any


def create_state(params, tx: optax.GradientTransformation) -> TrainState:
  return TrainState(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(params))


def count_params(params) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(params))
