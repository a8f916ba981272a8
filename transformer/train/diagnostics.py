"""Per-layer statistics for norm-placement studies.

What is measured, per stack, layer and sublayer (self_attention, cross_attention,
feed_forward; a sublayer's norms and Admin omega count with it):

  <stack>/layer_<i>/<sublayer>/grad_norm      ||dL/dW|| of the sublayer's weights
  <stack>/layer_<i>/<sublayer>/param_norm     ||W||
  <stack>/layer_<i>/<sublayer>/update_ratio   ||optimizer update|| / ||W|| (the update the
                                              optimizer would apply to this batch's gradient)
  <stack>/layer_<i>/grad_norm, param_norm, update_ratio   the same over the whole block
  <stack>/layer_<i>/<sublayer>/<matrix>/grad_norm   ||dL/dW|| of one weight matrix of the
                                              sublayer (e.g. `feed_forward/wo`, the second
                                              feed-forward matrix of Xiong et al.'s Theorem 1)
  <stack>/layer_<i>/residual_rms              sqrt(mean ||x_l||^2 / d) after the block
  <stack>/layer_<i>/residual_max_abs          max |x_l| over batch, positions and features
  <stack>/layer_<i>/residual_median_abs       median |x_l| (massive activations: the ratio)
  <stack>/layer_<i>/<sublayer>/out_rms        RMS of the sublayer's (branch) output
  <stack>/layer_<i>/<sublayer>/attn_entropy   mean attention entropy (nats) over the visible keys
  <stack>/layer_<i>/<sublayer>/attn_max_logit largest attention logit Q K^T / sqrt(d_k)
  <group>/grad_norm, param_norm, update_ratio for parameters outside the blocks (embedder, ...)
  output/log_z                                mean log Z of the output softmax
  loss                                        the training loss on the batch

`<stack>` is the module path of a `TransformerStack` ("decoder", "encoder/stack"). Names are the
same for unrolled stacks (`layer_<i>`) and scanned ones (`layers`, or `post_layers` and
`pre_layers` with Mix-LN), whose values carry a leading layer axis that is split here.

How it is wired: the modules sow scalars into the "diagnostics" collection only when that
collection is mutable (`Block`, `MultiHeadAttention`), which only `diagnostic_stats` makes it;
the train step never does, so with diagnostics off (or between diagnostics steps) the compiled
train step is exactly the one without them. `diagnostic_stats` runs the task's own training
forward pass with the "diagnostics" collection asked for (`task.train_forward(..., sow=True)`)
and the task's own loss on it (`task.train_loss`), so it works for every task.
`Recorder` is what the training loop calls (`train.diagnostics_every`); `run_diagnose` is
`launch.py --mode=diagnose`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer import figure_file, kinds, paths
from transformer.model.block import SELF_ATTENTION, SUBLAYERS
from transformer.model.stacks import POST_LAYERS, PRE_LAYERS, SCANNED
from transformer.train import optim
from transformer.train.checkpoint import Checkpointer
from transformer.train.state import create_state
from transformer.workdir import check_workdir_config
_LAYER = re.compile(r"layer_(\d+)$")


def _key_name(k) -> str:
  return str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))


def _flatten(tree) -> list[tuple[tuple[str, ...], Any]]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [(tuple(_key_name(k) for k in path), leaf) for path, leaf in leaves]


def _scan_offsets(flat) -> dict:
  """{(stack path, "pre_layers"): number of post-norm layers before it} for Mix-LN scans."""
  offsets = {}
  for path, leaf in flat:
    for k, part in enumerate(path):
      if part == POST_LAYERS:
        offsets[(path[:k], PRE_LAYERS)] = int(np.shape(leaf)[0])
  return offsets


def _per_layer(flat):
  """Yields (stack, layer index or None, rest of path, value) with scanned leaves split per
  layer, so unrolled and scanned stacks give the same names."""
  offsets = _scan_offsets(flat)
  for path, leaf in flat:
    for k, part in enumerate(path):
      m = _LAYER.match(part)
      if m:
        yield "/".join(path[:k]), int(m.group(1)), path[k + 1:], leaf
        break
      if part in SCANNED:
        offset = offsets.get((path[:k], part), 0)
        for i in range(leaf.shape[0]):
          yield "/".join(path[:k]), offset + i, path[k + 1:], leaf[i]
        break
    else:
      yield None, None, path, leaf


def _sublayer(name: str) -> str:
  for s in SUBLAYERS:
    if name == s or name.startswith(s + "_"):
      return s
  return name


def norm_stats(grads, params, updates) -> dict:
  """Gradient norm, parameter norm and update/parameter ratio per layer and sublayer (and
  per group of parameters outside the blocks), as float32 scalars."""
  sums = {}  # name -> [grad sq, param sq, update sq]
  kernel_sq = {}  # name of one weight matrix -> grad sq

  def add(name, g, p, u):
    acc = sums.setdefault(name, [0.0, 0.0, 0.0])
    for j, a in enumerate((g, p, u)):
      acc[j] = acc[j] + jnp.sum(jnp.square(a.astype(jnp.float32)))

  flat = list(zip(_per_layer(_flatten(grads)), _per_layer(_flatten(params)),
                  _per_layer(_flatten(updates))))
  for (stack, layer, rest, g), (_, _, _, p), (_, _, _, u) in flat:
    if layer is None:
      add("/".join(rest[:-1]) or rest[0], g, p, u)
      continue
    add(f"{stack}/layer_{layer}", g, p, u)
    add(f"{stack}/layer_{layer}/{_sublayer(rest[0])}", g, p, u)
    if len(rest) >= 3 and rest[-1] == "kernel":
      name = f"{stack}/layer_{layer}/{_sublayer(rest[0])}/{'/'.join(rest[1:-1])}/grad_norm"
      kernel_sq[name] = jnp.sum(jnp.square(g.astype(jnp.float32)))
  out = {name: jnp.sqrt(sq) for name, sq in kernel_sq.items()}
  for name, (g, p, u) in sums.items():
    out[f"{name}/grad_norm"] = jnp.sqrt(g)
    out[f"{name}/param_norm"] = jnp.sqrt(p)
    out[f"{name}/update_ratio"] = jnp.sqrt(u) / jnp.maximum(jnp.sqrt(p), 1e-30)
  return out


def sown_stats(sown) -> dict:
  """The sown scalars under their per-layer names (see the module docstring)."""
  out = {}
  for stack, layer, rest, value in _per_layer(_flatten(sown)):
    if layer is None:
      out["/".join(rest)] = value
      continue
    leaf = rest[-1]
    if leaf.endswith("_out_rms"):
      rest = rest[:-1] + (leaf[:-len("_out_rms")], "out_rms")
    out[f"{stack}/layer_{layer}/" + "/".join(rest)] = value
  return out


def diagnostic_stats(task, tx, params, opt_state, batch: dict, rng: jax.Array) -> dict:
  """All statistics for one batch, as a flat `{name: float32 scalar}` (pure; jit it).

  The gradient is that of the task's mean training loss (`task.train_loss` of
  `task.train_forward`, which is the task's `loss_sums`), as in the train step; the update
  is `tx.update` of it from `opt_state` (not applied)."""

  def loss(p):
    forward = task.train_forward(p, batch, rng, sow=True)
    loss_sum, weight_sum = task.train_loss(forward)
    log_z = jnp.mean(jax.nn.logsumexp(forward.logits.astype(jnp.float32), axis=-1))
    return loss_sum, (weight_sum, forward.sown, log_z)

  (loss_sum, (weight_sum, sown, log_z)), grads = jax.value_and_grad(loss, has_aux=True)(params)
  denom = jnp.maximum(weight_sum, 1.0)
  grads = jax.tree.map(lambda g: g / denom.astype(g.dtype), grads)
  updates, _ = tx.update(grads, opt_state, params)
  stats = norm_stats(grads, params, updates)
  stats.update(sown_stats(sown))
  stats["output/log_z"] = log_z
  stats["loss"] = loss_sum / denom
  return stats


class Recorder:
  """What the training loop calls: every `train.diagnostics_every` steps, the statistics of
  the state before the step on the step's batch, written as a `"diagnostics"` metrics row."""

  def __init__(self, config, task, par):
    self.every = config.train.diagnostics_every
    self.par = par
    tx = optim.build_optimizer(config.optim, config.train.num_steps)

    def stats(state, batch, rng, step):
      single, batch = par.one_view(state, batch)
      return diagnostic_stats(task, tx, single.params, single.opt_state, batch,
                              jax.random.fold_in(rng, step))
    self._stats = jax.jit(stats)

  def maybe_record(self, step: int, state, batch: dict, rng: jax.Array, writer) -> bool:
    """Writes `step`'s diagnostics row if `step` is due; whether it was."""
    if step % self.every:
      return False
    step_placed = self.par.place_replicated(np.uint32(step))  # the row's one copy, explicit
    stats = self._stats(state, batch, rng, step_placed)
    writer.write(step, "diagnostics", jax.device_get(stats))
    return True


def maybe_recorder(config, task, par) -> Optional[Recorder]:
  """A `Recorder` when `train.diagnostics_every > 0`, else None (nothing is compiled)."""
  return Recorder(config, task, par) if config.train.diagnostics_every else None


# --- launch.py --mode=diagnose -------------------------------------------------------------

_COLUMNS = ("grad_norm", "param_norm", "update_ratio", "residual_rms",
            f"{SELF_ATTENTION}/attn_entropy", f"{SELF_ATTENTION}/attn_max_logit")


def layer_table(stats: dict) -> list[dict]:
  """One row per (stack, layer): the block-level figures and self-attention's."""
  rows = {}
  for name, value in stats.items():
    m = re.match(r"(.+)/layer_(\d+)/(.+)$", name)
    if m and m.group(3) in _COLUMNS:
      row = rows.setdefault((m.group(1), int(m.group(2))),
                            {"stack": m.group(1), "layer": int(m.group(2))})
      row[m.group(3)] = float(value)
  return [rows[k] for k in sorted(rows)]


def format_table(rows: list[dict]) -> str:
  heads = ("stack", "layer", "grad_norm", "param_norm", "update_ratio", "residual_rms",
           "attn_entropy", "attn_max_logit")
  lines = ["  ".join(f"{h:>14}" for h in heads)]
  for r in rows:
    vals = [r["stack"], str(r["layer"])] + [
        f"{r.get(c, float('nan')):.4g}" for c in _COLUMNS]
    lines.append("  ".join(f"{v:>14}" for v in vals))
  return "\n".join(lines)


def _plot(rows: list[dict], stats: dict, title: str, path: str) -> None:
  import matplotlib  # only --mode=diagnose draws
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # after choosing the Agg backend
  fig, axes = plt.subplots(2, 2, figsize=(11, 8))
  panels = [("grad_norm", "gradient norm", True), ("residual_rms", "residual RMS", False),
            (f"{SELF_ATTENTION}/attn_entropy", "attention entropy (nats)", False),
            (f"{SELF_ATTENTION}/attn_max_logit", "max attention logit", False)]
  for ax, (col, label, log) in zip(axes.flat, panels):
    for stack in sorted({r["stack"] for r in rows}):
      rs = [r for r in rows if r["stack"] == stack and col in r]
      ax.plot([r["layer"] for r in rs], [r[col] for r in rs], marker="o", label=stack)
      if col == "grad_norm":
        for sub in SUBLAYERS:
          ys = [(r["layer"], stats.get(f"{stack}/layer_{r['layer']}/{sub}/grad_norm"))
                for r in rs]
          ys = [(x, float(y)) for x, y in ys if y is not None]
          if ys:
            ax.plot(*zip(*ys), linestyle="--", label=f"{stack} {sub}")
    ax.set_xlabel("layer")
    ax.set_ylabel(label)
    if log:
      ax.set_yscale("log")
    else:
      ax.ticklabel_format(axis="y", useOffset=False)
    ax.legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  figure_file.save_figure(plt, fig, path, dpi=100)


def run_diagnose(config, workdir: str, log=print) -> dict:
  """The statistics on one training batch, at init or (if `workdir` holds checkpoints) from
  its latest one; prints the per-layer table and writes `diagnose.json` and `diagnose.webp`
  into `workdir`. Reads the run's checkpoints without changing them. Returns the stats."""
  workdir = paths.absolute(workdir)
  paths.makedirs(workdir)
  check_workdir_config(workdir, config)
  data, task = kinds.build_data_and_task(config, workdir)
  config = task.config
  tx = optim.build_optimizer(config.optim, config.train.num_steps)
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  make_state = lambda r: create_state(task.init_params(r), tx)
  where, step = "initialization", 0
  ckpt_dir = paths.join(workdir, "checkpoints")
  latest = None
  if paths.isdir(ckpt_dir):
    checkpointer = Checkpointer(ckpt_dir, config.checkpoint.keep, async_save=False)
    latest = checkpointer.latest_step()
    if latest is not None:
      state = checkpointer.restore(latest, jax.eval_shape(make_state, init_rng),
                                   data.train_iterator)
      where, step = f"checkpoint step {latest}", int(latest)
    checkpointer.close()
  batch = data.next_train_batch()
  if latest is None:  # as a training run starts: Admin's omegas profiled on its first batch
    state = jax.jit(lambda r, b: create_state(task.init_params(r, b), tx))(init_rng, batch)
  stats = jax.jit(lambda p, o, b, r: diagnostic_stats(task, tx, p, o, b, r))(
      state.params, state.opt_state, batch, jax.random.fold_in(dropout_rng, step))
  stats = {k: float(v) for k, v in jax.device_get(stats).items()}
  rows = layer_table(stats)
  m = config.model
  title = (f"{m.kind}, {m.num_layers} layers, norm_placement={m.norm_placement}, "
           f"norm={m.norm}, at {where}")
  log(f"Diagnostics on one batch of {config.train.batch_size} rows at {where} ({title}); "
      f"loss {stats['loss']:.4f}, output log Z {stats['output/log_z']:.3f}")
  log(format_table(rows))
  paths.write_text(paths.join(workdir, "diagnose.json"), json.dumps(
      {"title": title, "step": step, "layers": rows, "stats": stats}, indent=1, sort_keys=True))
  _plot(rows, stats, title, paths.join(workdir, "diagnose.webp"))
  log(f"Wrote {workdir}/diagnose.json and {workdir}/diagnose.webp")
  return stats
