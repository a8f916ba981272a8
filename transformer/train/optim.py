"""optax optimizer and learning-rate schedule, from `OptimConfig`.

The optimizer is chosen by `optim.name` (`OPTIMIZERS`: adamw, adam, sgd, lion, adafactor,
muon), each built from optax's own transformation; the schedule by `optim.decay` (cosine,
linear, constant, rsqrt, wsd). Decoupled weight decay (adamw, lion, adafactor, muon) applies
to the leaves `decay_mask` selects.
"""

import jax
import jax.numpy as jnp
import optax

from transformer.config import DECAY_MASKS, OptimConfig


def wsd_schedule(cfg: OptimConfig, num_steps: int) -> optax.Schedule:
  """Warmup-stable-decay after the warm-up (Hägele et al. 2024), as a function of the steps
  since the warm-up ended: the peak until the last `round(decay_fraction * num_steps)` steps
  (never before the warm-up's end), then down to `end = end_lr_factor * peak` at `num_steps`:
  `peak - (peak - end) * s(p)` with p the fraction of the decay done and s(p) = p (`linear`)
  or sqrt(p) (`1-sqrt`: lr falls as 1 - sqrt(p)); `end` from then on."""
  peak, end = cfg.learning_rate, cfg.learning_rate * cfg.end_lr_factor
  decay_steps = round(cfg.decay_fraction * num_steps)
  start = max(num_steps - decay_steps, cfg.warmup_steps) - cfg.warmup_steps
  length = max(num_steps - cfg.warmup_steps - start, 1)
  shape = jnp.sqrt if cfg.cooldown_shape == "1-sqrt" else (lambda p: p)
  def schedule(count):
    done = jnp.clip((count - start) / length, 0.0, 1.0)
    return peak - (peak - end) * shape(done)
  return schedule


def learning_rate_schedule(cfg: OptimConfig, num_steps: int) -> optax.Schedule:
  """Linear warm-up from 0 to the peak, then cosine / linear decay to `end_lr_factor * peak`
  at `num_steps`, a constant peak, warmup-stable-decay (`wsd`, see `wsd_schedule`), or
  (`rsqrt`) the inverse square root of the step, `peak * sqrt(warmup_steps / step)`: Vaswani
  et al.'s schedule `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)` with peak
  `(d_model * warmup)^-0.5`."""
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
  elif cfg.decay == "wsd":
    decay = wsd_schedule(cfg, num_steps)
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


# Muon (optax.contrib.muon) orthogonalizes the update of each hidden matrix: every `kernel`
# except those of the layers that map tokens, patches or classes in or out (`ADAM_KERNELS`,
# Adam's as in Jordan et al.'s recipe); embeddings, position tables, biases and scales go to
# Adam too. Which axes form the matrix, the rest being batch axes each orthogonalized apart
# (a scanned stack's leading `layers` axis): attention's query/key/value kernels
# `[d, heads, head_dim]` are the `d x (heads * head_dim)` matrix of the projection, its `out`
# kernel `[heads, head_dim, d]` the `(heads * head_dim) x d` one, a dense kernel `[in, out]`.
ADAM_KERNELS = ("logits", "classifier", "head", "patch_embedding")
ATTENTION_IN_KERNELS = ("query", "key", "value")


def _muon_dims(path, leaf):
  """The `MuonDimensionNumbers` of the leaf at `path` (see above), or None: Adam's leaf."""
  keys = [str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey)]
  if len(keys) < 2 or keys[-1] != "kernel" or keys[-2] in ADAM_KERNELS:
    return None
  n = leaf.ndim
  if keys[-2] in ATTENTION_IN_KERNELS:
    return optax.contrib.MuonDimensionNumbers(reduction_axis=(n - 3,), output_axis=(n - 2, n - 1))
  if keys[-2] == "out" and n >= 3:
    return optax.contrib.MuonDimensionNumbers(reduction_axis=(n - 3, n - 2), output_axis=(n - 1,))
  return optax.contrib.MuonDimensionNumbers(reduction_axis=(n - 2,), output_axis=(n - 1,))


def muon_dimension_numbers(params):
  """The tree over `params` of each leaf's `MuonDimensionNumbers` (None: an Adam leaf)."""
  return jax.tree_util.tree_map_with_path(_muon_dims, params)


def _decoupled_decay(schedule: optax.Schedule, weight_decay: float, mask_fn
                     ) -> optax.GradientTransformation:
  """Adds `-schedule(count) * weight_decay * param` to the update of each leaf `mask_fn(params)`
  selects: AdamW's decoupled decay, for the Adam leaves of muon (whose optax Adam decays every
  leaf or none)."""
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params):
    lr = schedule(state.count)
    updates = jax.tree.map(lambda u, p, m: u - (lr * weight_decay * p).astype(u.dtype) if m else u,
                           updates, params, mask_fn(params))
    return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))
  return optax.GradientTransformation(init, update)


def _muon(cfg: OptimConfig, lr: optax.Schedule, mask_fn) -> optax.GradientTransformation:
  """optax's muon on the hidden matrices (decayed by `mask_fn`), Adam (Nesterov, as optax's
  muon has it, b1/b2/eps) on the rest, with AdamW's decoupled decay on the rest's leaves
  `mask_fn` selects (embedding tables)."""
  def adam_decayed(params):
    is_adam = jax.tree_util.tree_map_with_path(lambda path, p: _muon_dims(path, p) is None,
                                               params)
    return jax.tree.map(lambda m, a: bool(m) and a, mask_fn(params), is_adam)
  muon = optax.contrib.muon(lr, ns_steps=cfg.muon_ns_steps, beta=cfg.muon_momentum, eps=cfg.eps,
                            weight_decay=cfg.weight_decay, weight_decay_mask=mask_fn,
                            adam_b1=cfg.b1, adam_b2=cfg.b2,
                            muon_weight_dimension_numbers=muon_dimension_numbers)
  if not cfg.weight_decay:
    return muon
  return optax.chain(muon, _decoupled_decay(lr, cfg.weight_decay, adam_decayed))


def _optimizer(cfg: OptimConfig, lr: optax.Schedule) -> optax.GradientTransformation:
  """The transformation `cfg.name` names, with the schedule `lr` (no clipping)."""
  mask = lambda params: decay_mask(params, cfg.decay_mask)
  if cfg.name == "adamw":
    return optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                       mask=mask)
  if cfg.name == "adam":
    return optax.adam(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  if cfg.name == "sgd":
    return optax.sgd(lr, momentum=cfg.momentum or None, nesterov=cfg.nesterov)
  if cfg.name == "lion":
    return optax.lion(lr, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=mask)
  if cfg.name == "adafactor":
    return optax.adafactor(lr, min_dim_size_to_factor=cfg.adafactor_min_dim,
                           decay_rate=cfg.adafactor_decay_rate,
                           clipping_threshold=cfg.adafactor_clipping or None,
                           weight_decay_rate=cfg.weight_decay or None, weight_decay_mask=mask)
  if cfg.name == "muon":
    return _muon(cfg, lr, mask)
  raise ValueError(f"Unknown optimizer {cfg.name!r}; choose one of {OptimConfig.OPTIMIZER_FIELDS}.")


def build_optimizer(cfg: OptimConfig, num_steps: int) -> optax.GradientTransformation:
  """Global-norm clipping (if `clip_norm` > 0), then the optimizer `cfg.name` names with the
  schedule above, decaying (if it has decoupled weight decay) the leaves
  `decay_mask(params, cfg.decay_mask)` selects. adamw is `optax.adamw` exactly as before
  optimizers had names (same state tree: its checkpoints resume)."""
  tx = _optimizer(cfg, learning_rate_schedule(cfg, num_steps))
  if cfg.clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), tx)
  return tx
