"""Losses, returned as (sum, weight) pairs so they can be summed across batches and devices."""

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
