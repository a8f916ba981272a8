"""Spreading a run over devices: the mesh, logical-axis rules, shardings, and the jit / pmap steps.

Two strategies, one step function (`transformer.train.steps.make_train_step`), one interface
(`Parallel`; `Parallel(cfg, ...)` builds the class `cfg.strategy` names):

- `jit` (default, `JitParallel`): a `Mesh` with axes `(data, fsdp, tensor)`. Parameters carry
  logical axis names (`nn.with_logical_partitioning` in `transformer/model`);
  `ParallelConfig.rules` maps them onto mesh axes, which gives every parameter and
  optimizer-state leaf a `NamedSharding`.
  Batches are sharded on their leading (batch) dimension over `(data, fsdp)`. The step is
  `jax.jit` with these explicit in/out shardings and the state donated; XLA inserts the
  collectives. Each process feeds only its own rows
  (`jax.make_array_from_process_local_data`).
- `pmap` (`PmapParallel`): classic data parallelism. The state is replicated on every local
  device, each device takes `batch / devices` rows, and the step sums losses, weights and
  gradients over the device axis (`lax.psum`) before normalizing, which is the exact
  single-device mean.

A dimension that a mesh axis does not divide is left replicated (e.g. a 259-token vocabulary
with `tensor=2`): sharding it would need padding, and replicating a small table is cheap.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer.config import MESH_AXES, ConfigError, ExperimentConfig, ParallelConfig
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
  dcn = getattr(cfg, "dcn_data", 1)
  if sizes["data"] % dcn:
    raise ConfigError(f"--config.parallel.dcn_data={dcn} must divide the data axis, which is "
                      f"{sizes['data']} here.")
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

  `jax.make_mesh` picks the device order (on TPUs, one that follows the chips' torus; on GPUs
  and CPUs, device order, process by process, so the data-like axes, which come first, span
  processes and `tensor` stays within one where it can). With `parallel.dcn_data` > 1 the data
  axis is split into `dcn_data` blocks, one per TPU slice (or process, off TPU), by
  `mesh_utils.create_hybrid_device_mesh`: only data parallelism crosses the slow network.
  Axis types are `Auto` (sharding by annotation), not `jax.make_mesh`'s default `Explicit`.
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = mesh_shape(cfg, len(devices))
  auto = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
  if getattr(cfg, "dcn_data", 1) == 1:
    return jax.make_mesh([sizes[a] for a in MESH_AXES], MESH_AXES, axis_types=auto,
                         devices=devices)
  return Mesh(hybrid_device_grid(cfg, devices), MESH_AXES, axis_types=auto)


def hybrid_device_grid(cfg: ParallelConfig, devices: Sequence[Any]) -> np.ndarray:
  """The `(data, fsdp, tensor)` array of devices whose data axis is `dcn_data` blocks, one per
  slice (devices' `slice_index`, on multi-slice TPUs) or else one per process."""
  from jax.experimental import mesh_utils  # only for multi-slice meshes
  sizes = mesh_shape(cfg, len(devices))
  dcn = cfg.dcn_data
  by_slice = len({getattr(d, "slice_index", 0) for d in devices}) > 1
  granules = sorted({d.slice_index if by_slice else d.process_index for d in devices})
  if len(granules) != dcn:
    what = "TPU slices" if by_slice else "processes"
    raise ConfigError(f"--config.parallel.dcn_data={dcn}, but the devices are in "
                      f"{len(granules)} {what}: it must be their number (or 1).")
  return mesh_utils.create_hybrid_device_mesh(
      [sizes["data"] // dcn, sizes["fsdp"], sizes["tensor"]], [dcn, 1, 1], devices,
      process_is_granule=not by_slice)


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
    if isinstance(leaf, optax.MaskedNode):  # a leaf an optimizer leaves out (muon's Adam part)
      return leaf
    mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules) if len(spec) else P()
    return NamedSharding(mesh, _fit_to_shape(mesh_spec, leaf.shape, mesh))

  return jax.tree.map(one, logical_specs, abstract, is_leaf=lambda x: isinstance(x, P))


def with_shardings(abstract: Any, shardings: Any) -> Any:
  """`ShapeDtypeStruct`s carrying shardings: what orbax restores onto."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract, shardings)


def on_any_process(flag: bool) -> bool:
  """True on every process if `flag` is true on one (a signal may reach only some of them;
  all must stop after the same step, or the next collective hangs). A collective: every
  process must call it at the same point."""
  if jax.process_count() == 1:
    return flag
  return bool(np.max(multihost_utils.process_allgather(np.int32(flag))))


class Parallel:
  """Places the train state and batches on devices and runs compiled train / eval steps.

  `Parallel(cfg, init_params=..., tx=..., loss_sums=..., eval_sums=..., ...)` builds the
  strategy `cfg.strategy` names: `JitParallel` (a mesh) or `PmapParallel` (replicas); the
  choice is made there, once. Then `init_state(rng)`, `train_step(state, batch, rng)` (batch:
  this process's rows, NumPy), `eval_step(state, batch)`, and `to_checkpoint(state)` /
  `from_checkpoint(state)` around saves and restores. `abstract_state` (shapes, dtypes and,
  under jit, shardings) is what a checkpoint is restored onto, so a run saved on one layout
  resumes on another.
  """

  strategy: str
  devices: list  # the devices this process steps on
  num_devices: int  # over all processes
  abstract_state: Any
  mesh: Optional[Mesh] = None

  def __new__(cls, cfg: ParallelConfig, **kwargs):
    del kwargs
    if cls is Parallel:
      cls = PmapParallel if cfg.strategy == "pmap" else JitParallel
    return super().__new__(cls)

  def __init__(self, cfg: ParallelConfig, *, init_params: Callable[[jax.Array], Any],
               tx: optax.GradientTransformation, loss_sums: steps.LossSums,
               global_batch_size: int, micro_batches: int = 1, skip_nonfinite: bool = False):
    """What both strategies keep; each strategy's own `__init__` also takes `eval_sums`,
    `devices` (default: all, or this process's under pmap) and `init_boxed_params`
    (parameters with logical axis names, for sharding them over a mesh)."""
    self.cfg = cfg
    self.global_batch_size = global_batch_size
    self.micro_batches = micro_batches
    self._init_params, self._tx = init_params, tx
    self._init_state_fn = lambda rng: create_state(init_params(rng), tx)
    self._make_train_step = lambda **kw: steps.make_train_step(
        loss_sums, tx, micro_batches=micro_batches, skip_nonfinite=skip_nonfinite, **kw)

  # --- what differs between the strategies --------------------------------------------------

  def init_state(self, rng: jax.Array, profile_batch: Optional[dict] = None) -> TrainState:
    """Initializes the state directly in its training layout. `profile_batch` (this process's
    rows of a training batch, NumPy) is handed to `init_params(rng, profile_batch)`, which
    profiles Admin's omegas on it (`TaskBase.init_params`); without it, `init_params(rng)`."""
    raise NotImplementedError

  def _init_fn(self, profile_batch: Optional[dict]) -> Callable:
    """`(rng[, batch]) -> TrainState`: the state's initializer, with or without a batch."""
    if profile_batch is None:
      return self._init_state_fn
    return lambda rng, batch: create_state(self._init_params(rng, batch), self._tx)

  def to_checkpoint(self, state: TrainState) -> TrainState:
    """The state as it is saved: one copy."""
    raise NotImplementedError

  def from_checkpoint(self, state: TrainState) -> TrainState:
    """A restored (or freshly initialized) single copy, placed for training."""
    raise NotImplementedError

  def shard_batch(self, batch: dict) -> dict:
    """This process's rows `[local_batch, ...]` -> arrays the compiled step takes."""
    raise NotImplementedError

  def place_batch(self, batch: dict) -> dict:
    """What may be done to a batch before its step (`transformer.train.prefetch`)."""
    raise NotImplementedError

  def place_replicated(self, tree: Any) -> Any:
    """`tree` (e.g. the dropout key) where every step takes it, so that no step copies it
    again (the loop's steps run under `jax.transfer_guard("disallow")` in the tests)."""
    raise NotImplementedError

  def host_outputs(self, fn: Callable[[Any, dict], Any]) -> Callable[[TrainState, dict], Any]:
    """`fn(params, batch)` compiled for this layout: `(state, this process's batch) -> host
    arrays` for all of the batch's rows."""
    raise NotImplementedError

  def describe(self) -> str:
    raise NotImplementedError

  def _one_copy(self, tree: Any) -> Any:
    """A result of a compiled step, one copy (pmap returns one per device)."""
    raise NotImplementedError

  def one_view(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """Inside a traced function: the step's `state` and placed `batch` as one state and the
    whole batch `[batch, ...]` (the diagnostics read them so, where they lie)."""
    raise NotImplementedError

  # --- the same for both --------------------------------------------------------------------

  def checkpoint_target(self) -> Any:
    """Abstract state (with shardings under jit) that a checkpoint is restored onto."""
    return self.abstract_state

  def params(self, state: TrainState) -> Any:
    return self.to_checkpoint(state).params

  def train_step(self, state: TrainState, batch: dict, rng: jax.Array
                 ) -> tuple[TrainState, dict]:
    """One optimizer step on the global batch; returns the new state and scalar metrics."""
    state, metrics = self._train(state, self.shard_batch(batch), rng)
    return state, self._one_copy(metrics)

  def compile_train_step(self, state: TrainState, batch: dict, rng: jax.Array):
    """Ahead-of-time compiled train step (for timing compilation apart from running)."""
    return self._train.lower(state, self.shard_batch(batch), rng).compile()

  def run_compiled(self, compiled, state: TrainState, batch: dict, rng: jax.Array
                   ) -> tuple[TrainState, dict]:
    state, metrics = compiled(state, self.shard_batch(batch), rng)
    return state, self._one_copy(metrics)

  def eval_step(self, state: TrainState, batch: dict) -> dict:
    """Eval sums over the global batch (replicated scalars)."""
    return self._one_copy(self._eval(state.params, self.shard_batch(batch)))


class JitParallel(Parallel):
  """`jax.jit` over a `(data, fsdp, tensor)` mesh: sharded state, explicit in/out shardings,
  donated state; each process feeds its own rows of global batch arrays."""

  strategy = "jit"

  def __init__(self, cfg: ParallelConfig, *, init_params: Callable[[jax.Array], Any],
               eval_sums: Callable[[Any, dict], dict], tx: optax.GradientTransformation,
               init_boxed_params: Optional[Callable[[jax.Array], Any]] = None,
               devices: Optional[Sequence[jax.Device]] = None, **kwargs):
    super().__init__(cfg, init_params=init_params, tx=tx, **kwargs)
    self.mesh = make_mesh(cfg, devices)
    self.devices = list(self.mesh.devices.flat)
    self.num_devices = self.mesh.size
    self.shape = dict(self.mesh.shape)
    check_batch_split(cfg, self.global_batch_size, self.micro_batches, self.num_devices,
                      jax.process_count())
    if init_boxed_params is None:
      if self.shape["fsdp"] > 1 or self.shape["tensor"] > 1:
        raise ConfigError(
            "parallel.fsdp > 1 or parallel.tensor > 1 needs the task to expose "
            "`init_boxed_params` (parameters with logical axis names); this task has none.")
      init_boxed_params = init_params  # no names: everything replicated
    rng = jax.random.PRNGKey(0)  # shapes only
    boxed = jax.eval_shape(lambda r: create_state(init_boxed_params(r), tx), rng)
    self.rules = logical_rules(cfg)
    self.state_shardings = state_shardings(boxed, self.mesh, self.rules)
    self.abstract_state = with_shardings(jax.eval_shape(self._init_state_fn, rng),
                                         self.state_shardings)
    self.batch_sharding = NamedSharding(self.mesh, P(BATCH_AXES))
    self.replicated = NamedSharding(self.mesh, P())
    self._train = jax.jit(
        self._under_mesh(self._make_train_step()),
        in_shardings=(self.state_shardings, self.batch_sharding, self.replicated),
        out_shardings=(self.state_shardings, self.replicated), donate_argnums=0)
    self._eval = jax.jit(self._under_mesh(eval_sums),
                         in_shardings=(self.state_shardings.params, self.batch_sharding),
                         out_shardings=self.replicated)

  def _under_mesh(self, fn: Callable) -> Callable:
    """`fn` traced with the mesh's abstract form in context, so that the model's activation
    constraints (`transformer.model.common.constrain_residual`) name its axes. (`jax.set_mesh`
    cannot be entered inside `jit`; flax's `logical_axis_rules` context would also rename the
    parameters' axes.)"""
    @functools.wraps(fn)
    def traced(*args):
      with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh):
        return fn(*args)
    return traced

  def init_state(self, rng: jax.Array, profile_batch: Optional[dict] = None) -> TrainState:
    args = (rng,) if profile_batch is None else (rng, profile_batch)
    return jax.jit(self._init_fn(profile_batch), in_shardings=(self.replicated,) * len(args),
                   out_shardings=self.state_shardings)(*args)

  def lower_train_step(self, batch_shapes: dict,
                       platforms: Optional[Sequence[str]] = None) -> jax.stages.Lowered:
    """The train step lowered on abstract inputs, for ahead-of-time compilation on devices
    that need not exist (`transformer.train.compile_for_topology`): `batch_shapes` maps each
    batch key to a `jax.ShapeDtypeStruct` of the global batch `[batch, ...]`. `platforms` (e.g.
    `("cuda",)`) lowers for another platform than the devices' (StableHLO only: not compilable
    here)."""
    rng = jax.eval_shape(lambda: jax.random.PRNGKey(0))
    traced = self._train.trace(self.abstract_state, self._abstract_batch(batch_shapes),
                               jax.ShapeDtypeStruct(rng.shape, rng.dtype,
                                                    sharding=self.replicated))
    return traced.lower(lowering_platforms=tuple(platforms)) if platforms else traced.lower()

  def lower_eval_step(self, batch_shapes: dict) -> jax.stages.Lowered:
    """The eval step (`eval_sums`) lowered on abstract inputs, as `lower_train_step`."""
    return self._eval.lower(self.abstract_state.params, self._abstract_batch(batch_shapes))

  def _abstract_batch(self, batch_shapes: dict) -> dict:
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=self.batch_sharding)
            for k, v in batch_shapes.items()}

  def to_checkpoint(self, state: TrainState) -> TrainState:
    return state

  def from_checkpoint(self, state: TrainState) -> TrainState:
    return state  # orbax restored it onto `abstract_state`'s shardings

  def shard_batch(self, batch: dict) -> dict:
    """The rows are copied to the devices (asynchronously); a batch this method already
    placed (`jax.Array`s, e.g. from `transformer.train.prefetch`) passes through as it is."""
    return {k: v if isinstance(v, jax.Array)
            else jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(v))
            for k, v in batch.items()}

  def place_batch(self, batch: dict) -> dict:
    """Starts copying the rows to the devices (`shard_batch`)."""
    return self.shard_batch(batch)

  def place_replicated(self, tree: Any) -> Any:
    return jax.device_put(tree, self.replicated)

  def host_outputs(self, fn: Callable[[Any, dict], Any]) -> Callable[[TrainState, dict], Any]:
    fn = jax.jit(fn, in_shardings=(self.state_shardings.params, self.batch_sharding),
                 out_shardings=self.replicated)
    return lambda state, batch: jax.device_get(fn(state.params, self.shard_batch(batch)))

  def describe(self) -> str:
    return ("jit on mesh " + ", ".join(f"{a}={self.shape[a]}" for a in MESH_AXES)
            + f" ({self.num_devices} device(s), {jax.process_count()} process(es))")

  def _one_copy(self, tree: Any) -> Any:
    return tree

  def one_view(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    return state, batch


class PmapParallel(Parallel):
  """`jax.pmap` over this process's devices: the state replicated on each, `batch / devices`
  rows per device, sums `psum`-ed over the device axis."""

  strategy = "pmap"

  def __init__(self, cfg: ParallelConfig, *, eval_sums: Callable[[Any, dict], dict],
               devices: Optional[Sequence[jax.Device]] = None,
               init_boxed_params: Optional[Callable[[jax.Array], Any]] = None, **kwargs):
    del init_boxed_params  # every device holds the whole state
    if jax.process_count() > 1:  # its state is each process's own: no checkpoint could save it
      raise ConfigError(f"--config.parallel.strategy=pmap runs in one process, and this run has "
                        f"{jax.process_count()}: use --config.parallel.strategy=jit (its mesh "
                        "spans every process's devices).")
    super().__init__(cfg, **kwargs)
    self.devices = list(jax.local_devices() if devices is None else devices)
    n = len(self.devices)
    check_batch_split(cfg, self.global_batch_size, self.micro_batches, n * jax.process_count(),
                      jax.process_count())
    self.num_devices = n * jax.process_count()
    self.abstract_state = jax.eval_shape(self._init_state_fn, jax.random.PRNGKey(0))
    self._train = jax.pmap(self._make_train_step(axis_name=PMAP_AXIS), axis_name=PMAP_AXIS,
                           in_axes=(0, 0, None), donate_argnums=0, devices=self.devices)
    self._eval = jax.pmap(lambda p, b: jax.lax.psum(eval_sums(p, b), PMAP_AXIS),
                          axis_name=PMAP_AXIS, devices=self.devices)
    # Placements on this process's devices, in pmap's layout (a leading axis of one entry per
    # device; or every device holding the whole value, for an `in_axes=None` argument), so that
    # a step copies nothing it was not given placed.
    mesh = Mesh(np.asarray(self.devices), (PMAP_AXIS,))
    self._split = NamedSharding(mesh, P(PMAP_AXIS))
    self._whole = NamedSharding(mesh, P())

  def init_state(self, rng: jax.Array, profile_batch: Optional[dict] = None) -> TrainState:
    args = (rng,) if profile_batch is None else (rng, profile_batch)
    return self.from_checkpoint(jax.jit(self._init_fn(profile_batch))(*args))

  def to_checkpoint(self, state: TrainState) -> TrainState:
    return self._one_copy(state)

  def from_checkpoint(self, state: TrainState) -> TrainState:
    """One copy of each leaf per local device, `[devices, ...]`, copied there now (from the
    host: a leaf on a device is fetched first, explicitly)."""
    def copies(x):
      entry = np.asarray(jax.device_get(x))[None]  # [1, ...]: each device's part, one host copy
      return jax.make_array_from_single_device_arrays(
          (len(self.devices),) + entry.shape[1:], self._split,
          [jax.device_put(entry, d) for d in self.devices])
    return jax.tree.map(copies, state)

  def shard_batch(self, batch: dict) -> dict:
    """The rows split per device, `[devices, rows / devices, ...]`, and copied there
    (asynchronously); a batch this method already placed passes through as it is."""
    n = len(self.devices)
    return {k: v if isinstance(v, jax.Array) else jax.device_put(
        np.asarray(v).reshape((n, -1) + np.shape(v)[1:]), self._split)
        for k, v in batch.items()}

  def place_batch(self, batch: dict) -> dict:
    """Starts copying the rows to the devices (`shard_batch`)."""
    return self.shard_batch(batch)

  def place_replicated(self, tree: Any) -> Any:
    """`tree` on every device (an `in_axes=None` argument of the step)."""
    return jax.device_put(tree, self._whole)

  def host_outputs(self, fn: Callable[[Any, dict], Any]) -> Callable[[TrainState, dict], Any]:
    fn = jax.jit(fn)  # one device decodes this process's rows
    return lambda state, batch: jax.device_get(fn(self.params(state), batch))

  def describe(self) -> str:
    return f"pmap over {self.num_devices} device(s)"

  def one_view(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """The first entry of the state (`[devices, ...]`), the rows of every device as one
    batch."""
    return (jax.tree.map(lambda x: x[0], state),
            {k: v.reshape((-1,) + v.shape[2:]) for k, v in batch.items()})

  def _one_copy(self, tree: Any) -> Any:
    """The first device's entry of each leaf (every device holds the same state and the same
    psum-ed metrics), as it lies there: no index is copied to the devices to take it."""
    def first(x):
      entry = x.addressable_data(0)  # [1, ...]
      return entry.reshape(entry.shape[1:])
    return jax.tree.map(first, tree)


def build_parallel(config: ExperimentConfig, task, tx: optax.GradientTransformation,
                   devices: Optional[Sequence[Any]] = None) -> Parallel:
  """The device placement and compiled steps of `task` for `config.parallel`, over `devices`
  (default: every device; `--mode=compile` gives a TPU topology's compile-only devices)."""
  return Parallel(config.parallel, init_params=task.init_params, tx=tx, devices=devices,
                  loss_sums=task.loss_sums, eval_sums=task.eval_sums,
                  global_batch_size=config.train.batch_size,
                  micro_batches=config.train.micro_batches,
                  init_boxed_params=getattr(task, "init_boxed_params", None),
                  skip_nonfinite=config.train.nonfinite == "skip")
