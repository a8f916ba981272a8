"""Pure step functions: `train_step(state, batch, rng) -> (state, metrics)` and
`eval_step(params, batch) -> sums`. The same functions serve jit, tests and benchmarks."""

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from transformer.train.state import TrainState

# loss_sums(params, batch, rng) -> (sum of per-token losses, sum of weights)
LossSums = Callable[[object, dict, jax.Array], tuple[jax.Array, jax.Array]]


def make_train_step(loss_sums: LossSums, tx: optax.GradientTransformation) -> Callable:
  """One optimizer step on the mean loss over the batch's weighted tokens.

  Dropout is keyed by `fold_in(rng, step)`, so a resumed run draws the same dropout masks as
  an uninterrupted one.
  """

  def train_step(state: TrainState, batch: dict, rng: jax.Array):
    step_rng = jax.random.fold_in(rng, state.step)

    def loss_fn(params):
      loss_sum, weight_sum = loss_sums(params, batch, step_rng)
      return loss_sum / jnp.maximum(weight_sum, 1.0), weight_sum

    (loss, weight_sum), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), "tokens": weight_sum}
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step
