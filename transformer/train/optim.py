"""optax optimizer and learning-rate schedule, from `OptimConfig`."""

import jax
import optax

from transformer.config import DECAY_MASKS, OptimConfig


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
    decay = lambda count: peak * jax.lax.rsqrt((count + warm) / warm)
  else:
    decay = optax.constant_schedule(peak)
  return optax.join_schedules([warmup, decay], [cfg.warmup_steps])


# Weight decay by a parameter's role, read off its name (the last key of its path), so that a
# scanned stack (`model.scan_layers`: every layer's leaves stacked to `[layers, ...]`) decays
# exactly the leaves its unrolled twin decays.
#   decayed: the matrices that multiply an input (dense and attention `kernel`s) and the
#     embedding tables: token `embedding`s, learned position tables (`table`, the ViT's
#     `position_embedding`) and the ViT's `cls_token` (an embedding of the class position).
#   not decayed: every `bias` (dense, attention, norm offsets; `mlm_output_bias`), norm
#     `scale`s (LayerNorm, RMSNorm, DyT, qk-norm), DyT's `alpha` and Admin's `*_omega`.
# A leaf with any other name is an error: a new kind of parameter must be placed here.
DECAYED_NAMES = ("kernel", "embedding", "table", "position_embedding", "cls_token")
UNDECAYED_NAMES = ("bias", "mlm_output_bias", "scale", "alpha")
UNDECAYED_SUFFIXES = ("_omega",)


def _leaf_name(path) -> str:
  """The parameter's name: the last dict key of its path (after it may come attribute keys
  of a wrapper, e.g. `.value`)."""
  keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
  return str(keys[-1]) if keys else jax.tree_util.keystr(path)


def decays_by_role(path) -> bool:
  """Whether the leaf at `path` (a `jax.tree_util` key path) is weight-decayed (see above)."""
  name = _leaf_name(path)
  if name in DECAYED_NAMES:
    return True
  if name in UNDECAYED_NAMES or name.endswith(UNDECAYED_SUFFIXES):
    return False
  raise ValueError(
      f"No weight-decay role for the parameter {jax.tree_util.keystr(path)}: name it in "
      "transformer/train/optim.py's DECAYED_NAMES or UNDECAYED_NAMES.")


def decay_mask(params, rule: str = "role"):
  """The tree of bools over `params` (same structure) that AdamW decays.

  `role` (the default): by name, as above; the same leaves whether or not the layers are
  scanned. `ndim`: every leaf with ndim >= 2, the rule of runs made before `role` existed: it
  also decayed the 2-D `[heads, head_dim]` query/key/value biases, and, in scanned stacks,
  every `[layers, d]` norm scale and offset, dense bias, qk-norm scale and Admin omega."""
  if rule == "ndim":
    return jax.tree.map(lambda p: p.ndim >= 2, params)
  if rule != "role":
    raise ValueError(f"Unknown weight-decay mask {rule!r}; choose one of {DECAY_MASKS}.")
  return jax.tree_util.tree_map_with_path(lambda path, _: decays_by_role(path), params)


def build_optimizer(cfg: OptimConfig, num_steps: int) -> optax.GradientTransformation:
  """Global-norm clipping (if `clip_norm` > 0), then AdamW with the schedule above, decaying
  the leaves `decay_mask(params, cfg.decay_mask)` selects."""
  adamw = optax.adamw(learning_rate_schedule(cfg, num_steps), b1=cfg.b1, b2=cfg.b2,
                      eps=cfg.eps, weight_decay=cfg.weight_decay,
                      mask=lambda params: decay_mask(params, cfg.decay_mask))
  if cfg.clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), adamw)
  return adamw
