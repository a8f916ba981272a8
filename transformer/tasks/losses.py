"""Losses, returned as (sum, weight) pairs so they can be summed across batches and devices."""

from typing import Callable

import jax
import jax.numpy as jnp


def cross_entropy_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array,
                       label_smoothing: float = 0.0,
                       z_loss: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Weighted token-level cross entropy in nats, plus `z_loss * log(Z)^2` per token when
  `z_loss > 0` (Z = sum_v exp(logit_v), the softmax normalizer; PaLM, Wortsman et al., 2023).

  Args:
    logits: `[batch, length, vocab]`.
    targets: `[batch, length]` int.
    weights: `[batch, length]` float; 0 for padding.
    label_smoothing: eps of Szegedy et al. (2016): the target distribution puts 1 - eps on
      the target and eps spread uniformly over the whole vocabulary, so the loss is
      `(1 - eps) * nll + eps * mean_v(-log p_v)` (training only; evals report plain nll).
    z_loss: coefficient of the log(Z)^2 term (training only; 0 = plain cross entropy).
  Returns:
    (sum of weighted per-token losses, sum of weights), both scalars float32.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  if label_smoothing:
    nll = (1.0 - label_smoothing) * nll - label_smoothing * jnp.mean(log_probs, axis=-1)
  if z_loss:
    nll = nll + z_loss * jnp.square(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1))
  return jnp.sum(nll * weights), jnp.sum(weights)


def chunked_cross_entropy_sums(hidden: jax.Array, project: Callable[[jax.Array], jax.Array],
                               targets: jax.Array, weights: jax.Array, chunk: int,
                               label_smoothing: float = 0.0,
                               z_loss: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """`cross_entropy_sums(project(hidden), ...)` computed `chunk` positions at a time, so the
  float32 `[batch, length, vocab]` logits are never held at once: a `jax.lax.map` over chunks
  of positions, each rematerialized (`jax.checkpoint`) so the backward pass recomputes a
  chunk's logits instead of keeping them. The batch axis is never split (it stays sharded).

  Args:
    hidden: `[batch, length, d_model]` final hidden states.
    project: `[batch, chunk, d_model] -> [batch, chunk, vocab]` float32 logits.
    targets: `[batch, length]` int; weights: `[batch, length]` float, 0 for padding.
    chunk: positions per chunk; the length is padded (with weight 0) to a multiple of it.
  Returns:
    (sum of weighted per-token losses, sum of weights), as `cross_entropy_sums`.
  """
  batch, length = targets.shape
  pad = -length % chunk
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets, weights = (jnp.pad(a, ((0, 0), (0, pad))) for a in (targets, weights))
  split = lambda a: jnp.moveaxis(a.reshape((batch, -1, chunk) + a.shape[2:]), 1, 0)

  @jax.checkpoint
  def one_chunk(args):
    h, t, w = args  # [batch, chunk, d_model], [batch, chunk], [batch, chunk]
    return cross_entropy_sums(project(h), t, w, label_smoothing, z_loss)

  loss_sums, weight_sums = jax.lax.map(one_chunk, (split(hidden), split(targets), split(weights)))
  return jnp.sum(loss_sums), jnp.sum(weight_sums)
