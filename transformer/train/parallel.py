"""Spreading a run over devices: the mesh, logical-axis rules, shardings, and the jit / pmap steps.

Two strategies, one step function (`transformer.train.steps.make_train_step`):

- `jit` (default): a `Mesh` with axes `(data, fsdp, tensor)`. Parameters carry logical axis
  names (`nn.with_logical_partitioning` in `transformer/model`); `ParallelConfig.rules` maps
  them onto mesh axes, which gives every parameter and optimizer-state leaf a `NamedSharding`.
  Batches are sharded on their leading (batch) dimension over `(data, fsdp)`. The step is
  `jax.jit` with these explicit in/out shardings and the state donated; XLA inserts the
  collectives. Each process feeds only its own rows
  (`jax.make_array_from_process_local_data`).
- `pmap`: classic data parallelism. The state is replicated on every local device, each
  device takes `batch / devices` rows, and the step sums losses, weights and gradients over
  the device axis (`lax.psum`) before normalizing, which is the exact single-device mean.

A dimension that a mesh axis does not divide is left replicated (e.g. a 259-token vocabulary
with `tensor=2`): sharding it would need padding, and replicating a small table is cheap.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer.config import MESH_AXES, ConfigError, ParallelConfig
from transformer.train import steps
from transformer.train.state import TrainState, create_state

BATCH_AXES = ("data", "fsdp")  # mesh axes the batch dimension is split over
PMAP_AXIS = "devices"


def mesh_shape(cfg: ParallelConfig, num_devices: int) -> dict[str, int]:
  """`{"data": d, "fsdp": f, "tensor": t}` with any -1 filled so that d * f * t = devices."""
  sizes = {a: getattr(cfg, a) for a in MESH_AXES}
  known = math.prod(v for v in sizes.values() if v != -1)
  for a, v in sizes.items():
    if v == -1:
      if num_devices % known:
        raise ConfigError(
            f"--config.parallel.{a}=-1 cannot fill {num_devices} devices: the other axes "
            f"multiply to {known}, which does not divide {num_devices}.")
      sizes[a] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise ConfigError(
        f"--config.parallel data={sizes['data']} x fsdp={sizes['fsdp']} x "
        f"tensor={sizes['tensor']} = {math.prod(sizes.values())} devices, but "
        f"{num_devices} are available; set one axis to -1 to use them all.")
  return sizes


def check_batch_split(cfg: ParallelConfig, global_batch_size: int, micro_batches: int,
                      num_devices: int, num_processes: int) -> None:
  """Raises `ConfigError` unless the batch splits over the devices (and micro-batches) as
  `cfg` asks; cheap, so launch calls it before any data is read or anything compiled."""
  if cfg.strategy == "pmap":
    n = num_devices // num_processes  # local devices
    per_device = global_batch_size // num_processes
    if per_device % n or (per_device // n) % micro_batches:
      raise ConfigError(
          f"--config.train.batch_size={global_batch_size} gives {per_device} rows per process, "
          f"which must split evenly over {n} local devices and then into "
          f"--config.train.micro_batches={micro_batches}.")
    return
  shape = mesh_shape(cfg, num_devices)
  batch_ways = shape["data"] * shape["fsdp"]
  if (global_batch_size // micro_batches) % batch_ways or global_batch_size % micro_batches:
    raise ConfigError(
        f"--config.train.batch_size={global_batch_size} / micro_batches={micro_batches} must "
        f"be divisible by parallel.data x parallel.fsdp = {batch_ways} (the batch is split "
        "over both).")
  if batch_ways % num_processes:
    raise ConfigError(
        f"parallel.data x parallel.fsdp = {batch_ways} must be a multiple of the "
        f"{num_processes} processes: each process feeds its own rows of the batch.")


def make_mesh(cfg: ParallelConfig, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The `(data, fsdp, tensor)` mesh over `devices` (default: all devices of all processes).

  Devices are laid out in `jax.devices()` order (process by process), so the data-like axes,
  which come first, span processes and `tensor` stays within a process where it can.
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = mesh_shape(cfg, len(devices))
  grid = np.asarray(devices, dtype=object).reshape([sizes[a] for a in MESH_AXES])
  return Mesh(grid, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def logical_rules(cfg: ParallelConfig) -> tuple[tuple[str, Optional[str]], ...]:
  """The config's rules in flax's form: `(logical name, mesh axis or None)`."""
  return tuple((name, axis or None) for name, axis in cfg.rules)


def _fit_to_shape(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
  """Drops the mesh axes that do not divide the dimension they would split."""
  out = []
  for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    size = math.prod(mesh.shape[n] for n in names)
    out.append(axes if names and dim % size == 0 else None)
  return P(*out)


def state_shardings(boxed_abstract_state: Any, mesh: Mesh,
                    rules: Sequence[tuple[str, Optional[str]]]) -> Any:
  """A `NamedSharding` for every leaf of the (unboxed) train state.

  Args:
    boxed_abstract_state: `jax.eval_shape` of a state built from parameters still wrapped in
      `nn.LogicallyPartitioned` boxes; leaves without a box (step counters) are replicated.
  """
  logical_specs = nn.get_partition_spec(boxed_abstract_state)
  abstract = nn.meta.unbox(boxed_abstract_state)

  def one(spec, leaf):
    mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules) if len(spec) else P()
    return NamedSharding(mesh, _fit_to_shape(mesh_spec, leaf.shape, mesh))

  return jax.tree.map(one, logical_specs, abstract, is_leaf=lambda x: isinstance(x, P))


def with_shardings(abstract: Any, shardings: Any) -> Any:
  """`ShapeDtypeStruct`s carrying shardings: what orbax restores onto."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract, shardings)


class Parallel:
  """Places the train state and batches on devices and runs compiled train / eval steps.

  Build with `Parallel(cfg, init_params, tx, loss_sums, eval_sums, ...)`; then
  `init_state(rng)`, `train_step(state, batch, rng)` (batch: this process's rows, NumPy),
  `eval_step(state, batch)`, and `to_checkpoint(state)` / `from_checkpoint(state)` around
  saves and restores. `abstract_state` (shapes, dtypes and shardings) is what a checkpoint is
  restored onto, so a run saved on one mesh resumes on another.
  """

  def __init__(self, cfg: ParallelConfig, *, init_params: Callable[[jax.Array], Any],
               tx: optax.GradientTransformation, loss_sums: steps.LossSums,
               eval_sums: Callable[[Any, dict], dict], global_batch_size: int,
               micro_batches: int = 1,
               init_boxed_params: Optional[Callable[[jax.Array], Any]] = None,
               devices: Optional[Sequence[jax.Device]] = None, skip_nonfinite: bool = False):
    self.cfg = cfg
    self.strategy = cfg.strategy
    self.global_batch_size = global_batch_size
    self.micro_batches = micro_batches
    self._init_state_fn = lambda rng: create_state(init_params(rng), tx)
    rng = jax.random.PRNGKey(0)  # shapes only
    if self.strategy == "pmap":
      self.devices = list(jax.local_devices() if devices is None else devices)
      self.mesh = None
      n = len(self.devices)
      check_batch_split(cfg, global_batch_size, micro_batches, n * jax.process_count(),
                        jax.process_count())
      self.num_devices = n * jax.process_count()
      self.abstract_state = jax.eval_shape(self._init_state_fn, rng)
      self._train = jax.pmap(
          steps.make_train_step(loss_sums, tx, micro_batches=micro_batches, axis_name=PMAP_AXIS,
                                skip_nonfinite=skip_nonfinite),
          axis_name=PMAP_AXIS, in_axes=(0, 0, None), donate_argnums=0, devices=self.devices)
      self._eval = jax.pmap(lambda p, b: jax.lax.psum(eval_sums(p, b), PMAP_AXIS),
                            axis_name=PMAP_AXIS, devices=self.devices)
      return

    self.mesh = make_mesh(cfg, devices)
    self.devices = list(self.mesh.devices.flat)
    self.num_devices = self.mesh.size
    self.shape = dict(self.mesh.shape)
    check_batch_split(cfg, global_batch_size, micro_batches, self.num_devices,
                      jax.process_count())
    if init_boxed_params is None:
      if self.shape["fsdp"] > 1 or self.shape["tensor"] > 1:
        raise ConfigError(
            "parallel.fsdp > 1 or parallel.tensor > 1 needs the task to expose "
            "`init_boxed_params` (parameters with logical axis names); this task has none.")
      init_boxed_params = init_params  # no names: everything replicated
    boxed = jax.eval_shape(lambda r: create_state(init_boxed_params(r), tx), rng)
    self.rules = logical_rules(cfg)
    self.state_shardings = state_shardings(boxed, self.mesh, self.rules)
    self.abstract_state = with_shardings(jax.eval_shape(self._init_state_fn, rng),
                                         self.state_shardings)
    self.batch_sharding = NamedSharding(self.mesh, P(BATCH_AXES))
    self.replicated = NamedSharding(self.mesh, P())
    self._train = jax.jit(
        steps.make_train_step(loss_sums, tx, micro_batches=micro_batches,
                              skip_nonfinite=skip_nonfinite),
        in_shardings=(self.state_shardings, self.batch_sharding, self.replicated),
        out_shardings=(self.state_shardings, self.replicated), donate_argnums=0)
    self._eval = jax.jit(eval_sums,
                         in_shardings=(self.state_shardings.params, self.batch_sharding),
                         out_shardings=self.replicated)

  # --- state -------------------------------------------------------------------------------

  def init_state(self, rng: jax.Array) -> TrainState:
    """Initializes the state directly in its sharded (or replicated) layout."""
    if self.strategy == "pmap":
      return self.from_checkpoint(jax.jit(self._init_state_fn)(rng))
    return jax.jit(self._init_state_fn, in_shardings=self.replicated,
                   out_shardings=self.state_shardings)(rng)

  def checkpoint_target(self) -> Any:
    """Abstract state (with shardings under jit) that a checkpoint is restored onto."""
    return self.abstract_state

  def to_checkpoint(self, state: TrainState) -> TrainState:
    """The state as it is saved: one copy (pmap keeps one per device)."""
    if self.strategy == "pmap":
      return jax.tree.map(lambda x: x[0], state)
    return state

  def from_checkpoint(self, state: TrainState) -> TrainState:
    """A restored (or freshly initialized) single copy, placed for training."""
    if self.strategy == "pmap":
      n = len(self.devices)
      # One copy per local device (pmap transfers them on the first step).
      return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n,) + np.shape(x)), state)
    return state

  def params(self, state: TrainState) -> Any:
    return self.to_checkpoint(state).params

  # --- batches and steps --------------------------------------------------------------------

  def shard_batch(self, batch: dict) -> dict:
    """This process's rows `[local_batch, ...]` -> arrays the compiled step takes.

    Under jit the rows are copied to the devices (asynchronously); a batch this method already
    placed (`jax.Array`s, e.g. from `transformer.train.prefetch`) passes through as it is.
    Under pmap the rows are only split per device; pmap copies them when the step runs.
    """
    if self.strategy == "pmap":
      n = len(self.devices)
      return {k: np.asarray(v).reshape((n, -1) + np.shape(v)[1:]) for k, v in batch.items()}
    return {k: v if isinstance(v, jax.Array)
            else jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(v))
            for k, v in batch.items()}

  def place_batch(self, batch: dict) -> dict:
    """What may be done to a batch before its step: under jit, start copying its rows to the
    devices (`shard_batch`); under pmap nothing (pmap copies the rows when the step runs)."""
    return batch if self.strategy == "pmap" else self.shard_batch(batch)

  def train_step(self, state: TrainState, batch: dict, rng: jax.Array
                 ) -> tuple[TrainState, dict]:
    """One optimizer step on the global batch; returns the new state and scalar metrics."""
    state, metrics = self._train(state, self.shard_batch(batch), rng)
    if self.strategy == "pmap":
      metrics = jax.tree.map(lambda m: m[0], metrics)
    return state, metrics

  def compile_train_step(self, state: TrainState, batch: dict, rng: jax.Array):
    """Ahead-of-time compiled train step (for timing compilation apart from running)."""
    return self._train.lower(state, self.shard_batch(batch), rng).compile()

  def run_compiled(self, compiled, state: TrainState, batch: dict, rng: jax.Array
                   ) -> tuple[TrainState, dict]:
    state, metrics = compiled(state, self.shard_batch(batch), rng)
    if self.strategy == "pmap":
      metrics = jax.tree.map(lambda m: m[0], metrics)
    return state, metrics

  def eval_step(self, state: TrainState, batch: dict) -> dict:
    """Eval sums over the global batch (replicated scalars)."""
    if self.strategy == "pmap":
      return jax.tree.map(lambda m: m[0], self._eval(state.params, self.shard_batch(batch)))
    return self._eval(state.params, self.shard_batch(batch))

  def describe(self) -> str:
    if self.strategy == "pmap":
      return f"pmap over {self.num_devices} device(s)"
    return ("jit on mesh " + ", ".join(f"{a}={self.shape[a]}" for a in MESH_AXES)
            + f" ({self.num_devices} device(s), {jax.process_count()} process(es))")

