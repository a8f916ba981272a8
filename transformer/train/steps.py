"""Pure step functions: `train_step(state, batch, rng) -> (state, metrics)` and
`eval_step(params, batch) -> sums`. The same functions serve jit, pmap, tests and benchmarks.
The train step's metrics dict is the train row: a key added there is logged by the loop
(`loop.train_means`). Eval metrics are the task's (`eval_sums` / `summarize` in `tasks/`)."""

from __future__ import annotations

import collections
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from transformer.train import health
from transformer.train.state import TrainState

# loss_sums(params, batch, rng) -> (sum of per-token losses, sum of weights[, aux sums]): the
# optional third part is a dict of scalar sums over the same weighted tokens (a metric the
# forward pass computes), reported divided by the same denominator as the loss.
LossSums = Callable[[object, dict, jax.Array], tuple]
# Metric names the step sets itself: an aux sum may not take them.
STEP_METRICS = ("loss", "grad_norm", "tokens", "finite")


def split_micro_batches(batch: dict, micro_batches: int) -> dict:
  """`[batch, ...]` leaves -> `[micro_batches, batch / micro_batches, ...]`.

  Micro-batch i takes rows i, i + k, i + 2k, ... (k = micro_batches), so when the batch
  dimension is sharded over devices in contiguous blocks, every micro-batch is spread over all
  of them and splitting needs no communication.
  """
  def one(x):
    rows = x.shape[0]
    if rows % micro_batches:
      raise ValueError(f"A batch of {rows} rows cannot be split into {micro_batches} "
                       "micro-batches; train.batch_size must be divisible by micro_batches.")
    return jnp.swapaxes(x.reshape((rows // micro_batches, micro_batches) + x.shape[1:]), 0, 1)
  return jax.tree.map(one, batch)


def make_train_step(loss_sums: LossSums, tx: optax.GradientTransformation, *,
                    micro_batches: int = 1, axis_name: Optional[str] = None,
                    skip_nonfinite: bool = False) -> Callable:
  """One optimizer step on the mean loss over the batch's weighted tokens.

  The gradient of the loss *sum* is accumulated over `micro_batches` pieces of the batch (a
  `lax.scan`, so memory is that of one piece) and, under `pmap`, summed over the devices of
  `axis_name`; only then is it divided by the total weight. Every split therefore gives the
  gradient of the same global mean, up to float summation order.

  Dropout is keyed by `fold_in(rng, step)` (and the micro-batch index when accumulating), so a
  resumed run draws the same dropout masks as an uninterrupted one.

  `metrics` are scalars, the same on every device: `loss` (the step's mean loss),
  `grad_norm`, then each aux sum the loss returns (`LossSums`) divided by the same total
  weight as the loss (summed over micro-batches and devices first, like the loss), `tokens`
  (the batch's total weight) and `finite` (whether the loss and gradients were finite; with
  `skip_nonfinite` a step where they were not keeps the previous params and opt_state, see
  `health.py`). Every key but `tokens` and `finite`, which the loop reads itself, is a column
  of the train row, averaged over the row's steps (`loop.train_means`): a metric added here,
  or an aux sum a task's loss returns, is logged with no change to the loop. The keys keep
  their order through jit and pmap (an `OrderedDict`: a plain dict's come back sorted), and
  so do the row's columns.
  """

  def sums_and_grads(params, batch, rng):
    (loss_sum, (weight_sum, aux)), grads = jax.value_and_grad(
        lambda p: _with_aux(loss_sums(p, batch, rng)), has_aux=True)(params)
    return loss_sum, weight_sum, aux, grads

  def train_step(state: TrainState, batch: dict, rng: jax.Array):
    step_rng = jax.random.fold_in(rng, state.step)
    if micro_batches == 1:
      loss_sum, weight_sum, aux, grads = sums_and_grads(state.params, batch, step_rng)
    else:
      loss_sum, weight_sum, aux, grads = _accumulate(sums_and_grads, state.params, batch,
                                                     step_rng, micro_batches)
    if axis_name is not None:
      loss_sum, weight_sum, aux, grads = jax.lax.psum((loss_sum, weight_sum, aux, grads),
                                                      axis_name)
    denom = jnp.maximum(weight_sum, 1.0)
    grads = jax.tree.map(lambda g: g / denom.astype(g.dtype), grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = collections.OrderedDict(loss=loss_sum / denom, grad_norm=optax.global_norm(grads))
    metrics.update((name, value / denom) for name, value in aux.items())
    metrics["tokens"] = weight_sum
    metrics["finite"] = health.all_finite(metrics["loss"], metrics["grad_norm"])
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    if skip_nonfinite:
      new_state = health.keep_previous_if_not_finite(metrics["finite"], new_state, state)
    return new_state, metrics

  return train_step


def _accumulate(sums_and_grads: Callable, params, batch: dict, step_rng: jax.Array,
                micro_batches: int) -> tuple:
  """`sums_and_grads`' (loss sum, weight sum, aux sums, gradient) summed over `micro_batches`
  pieces of `batch` (a `lax.scan`, float32 sums; the gradient cast back to the params' dtype),
  dropout keyed by `fold_in(step_rng, i)` for piece i."""
  micro = split_micro_batches(batch, micro_batches)

  def body(carry, xs):
    i, piece = xs
    parts = sums_and_grads(params, piece, jax.random.fold_in(step_rng, i))
    return jax.tree.map(lambda a, b: a + b.astype(jnp.float32), carry, parts), None

  shapes = jax.eval_shape(sums_and_grads, params, jax.tree.map(lambda x: x[0], micro), step_rng)
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes)
  (loss_sum, weight_sum, aux, grads), _ = jax.lax.scan(
      body, zeros, (jnp.arange(micro_batches), micro))
  return loss_sum, weight_sum, aux, jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)


def _with_aux(out: tuple) -> tuple[jax.Array, tuple[jax.Array, dict]]:
  """`loss_sums`' `(loss, weight)` or `(loss, weight, aux)` as `(loss, (weight, aux))`, the
  aux sums checked for names the step sets itself (`STEP_METRICS`), at trace time."""
  loss_sum, weight_sum, *rest = out
  aux = dict(rest[0]) if rest else {}
  taken = [k for k in aux if k in STEP_METRICS]
  if taken:
    raise ValueError(f"The task's loss returns aux sums named {taken}, which the train step "
                     f"sets itself ({', '.join(STEP_METRICS)}); rename them in the task.")
  return loss_sum, (weight_sum, aux)
