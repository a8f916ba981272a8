"""optax optimizer and learning-rate schedule, from `OptimConfig`."""

import jax
import optax

from transformer.config import OptimConfig


def learning_rate_schedule(cfg: OptimConfig, num_steps: int) -> optax.Schedule:
  """Linear warm-up from 0 to the peak, then cosine / linear decay to `end_lr_factor * peak`
  at `num_steps`, a constant peak, or (`rsqrt`) the inverse square root of the step,
  `peak * sqrt(warmup_steps / step)`: Vaswani et al.'s schedule
  `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)` with peak `(d_model * warmup)^-0.5`."""
  peak, end = cfg.learning_rate, cfg.learning_rate * cfg.end_lr_factor
  warmup = optax.linear_schedule(0.0, peak, max(cfg.warmup_steps, 1))
  decay_steps = max(num_steps - cfg.warmup_steps, 1)
  if cfg.decay == "cosine":
    decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=cfg.end_lr_factor)
  elif cfg.decay == "linear":
    decay = optax.linear_schedule(peak, end, decay_steps)
  elif cfg.decay == "rsqrt":
    warm = max(cfg.warmup_steps, 1)
    decay = lambda count: peak * jax.lax.rsqrt((count + warm) / warm)  # noqa: E731
  else:
    decay = optax.constant_schedule(peak)
  return optax.join_schedules([warmup, decay], [cfg.warmup_steps])


def _decay_mask(params):
  """Weight decay on matrices (ndim >= 2) only: not on biases, norm scales or offsets."""
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def build_optimizer(cfg: OptimConfig, num_steps: int) -> optax.GradientTransformation:
  """Global-norm clipping (if `clip_norm` > 0), then AdamW with the schedule above."""
  adamw = optax.adamw(learning_rate_schedule(cfg, num_steps), b1=cfg.b1, b2=cfg.b2,
                      eps=cfg.eps, weight_decay=cfg.weight_decay, mask=_decay_mask)
  if cfg.clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), adamw)
  return adamw
