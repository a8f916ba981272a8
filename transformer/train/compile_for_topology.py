"""`python launch.py --mode=compile --topology=v5p-8`: the config's real train step (and, with
`--compile_eval`, its eval step) compiled ahead of time for a TPU slice that is not here.

The `libtpu` wheel (the `[tpu]` extra) supplies XLA's TPU compiler and
`jax.experimental.topologies.get_topology_desc` the slice's devices (`transformer.train.topologies`
names them). The step is the one training runs: the kind's task on the facts the config gives
(as `--mode=bench` builds it, no dataset), `transformer.train.parallel`'s jit step over the
config's mesh on those devices, fed `jax.ShapeDtypeStruct`s, so nothing is allocated.

What the compiled program tells, per device: the bytes of its arguments, outputs and
temporaries (XLA's `memory_analysis`; total = arguments + outputs - aliased + temporaries, the
figure `--mode=bench` prints too) against the chip's HBM, and its FLOPs (`cost_analysis`),
beside the project's FLOPs formula (`transformer.model.flops`). Two things make them differ:
XLA computes the masked half of causal attention that the formula's convention leaves out
(`masked_too=True` counts it), and remat's recompute is in the program but not in the model
FLOPs. A third makes the compiled count low: XLA's cost analysis counts the body of a loop once,
so `model.scan_layers`, `train.loss_chunk` (a `lax.map` over chunks) and `train.micro_batches`
> 1 undercount; the report says so. Its time estimate (`optimal_seconds`, negative on v5e and
v6e) is not used.

A config over the chip's HBM fails to compile; `compile_steps` turns XLA's error into a
`RunError` of one line naming the GiB needed and available, and what to try.
`largest_batches` (`--compile_sweep`) finds, for remat none / minimal / full and data vs fsdp
layouts, the largest batch per device that compiles within HBM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import time
from typing import Callable, Optional, Sequence

import numpy as np

from transformer import kinds
from transformer.config import ConfigError, ExperimentConfig
from transformer.errors import RunError
from transformer.train import topologies
from transformer.train.topologies import Topology

GIB = 2 ** 30


def format_bytes(n: float) -> str:
  return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 2 ** 20:.1f} MiB"


def format_flops(n: float) -> str:
  for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
    if n >= scale:
      return f"{n / scale:.3f} {unit}"
  return f"{n:.0f} FLOP"
INSTALL_HINT = ("--mode=compile needs XLA's TPU compiler, the libtpu wheel matching your jax: "
                "pip install -e '.[tpu]' (or pip install 'jax[tpu]==<your jax version>').")
OVER_HBM_HINT = ("try --config.model.remat=full (or minimal), --config.parallel.fsdp=-1 "
                 "--config.parallel.data=1, a smaller --config.train.batch_size (or "
                 "--config.train.micro_batches), or --config.train.loss_chunk=1024")
REMATS = ("none", "minimal", "full")
LAYOUTS = ("data", "fsdp")  # all devices on the data axis, or all on fsdp (tensor as given)


@dataclasses.dataclass
class CompiledStep:
  """What XLA reports of one compiled step, per device (bytes, FLOPs)."""
  name: str  # "train step" or "eval step"
  seconds: float  # lowering and compiling
  argument_bytes: int
  output_bytes: int
  alias_bytes: int  # outputs that reuse argument buffers (the donated train state)
  temp_bytes: int
  flops: Optional[float]  # per device, XLA's cost analysis (None if not reported)

  @property
  def total_bytes(self) -> int:
    return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes


class OverHbm(RunError):
  """The step does not fit the chip's HBM; `needed` / `available` in bytes when XLA said."""

  def __init__(self, message: str, needed: Optional[float], available: Optional[float]):
    super().__init__(message)
    self.needed, self.available = needed, available


def check_compiler() -> None:
  """A one-line RunError naming the extra to install when libtpu is missing."""
  if importlib.util.find_spec("libtpu") is None and not os.environ.get("TPU_LIBRARY_PATH"):
    raise RunError(INSTALL_HINT)


def topology_devices(topology: Topology, num_slices: int = 1) -> list:
  """The compile-only devices of `num_slices` slices of `topology` (no TPU needed)."""
  check_compiler()
  from jax.experimental import topologies as jax_topologies
  with _libtpu_environment(topology):
    return list(jax_topologies.get_topology_desc(**topology.desc_kwargs(num_slices)).devices)


@contextlib.contextmanager
def _libtpu_environment(topology: Topology):
  """While libtpu loads (its first use in the process): without these it takes
  /tmp/libtpu_lockfile (one TPU user per machine, though a compile uses no TPU, so a second
  compile or a test worker would fail) and warns that it cannot find the TPU VM's hosts and
  type. Restored afterwards, so nothing later (JAX's cluster detectors) sees them."""
  wanted = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_WORKER_HOSTNAMES": "localhost",
            "TPU_ACCELERATOR_TYPE": topology.accelerator_type()}
  saved = {k: os.environ.get(k) for k in wanted}
  for k, v in wanted.items():
    os.environ.setdefault(k, v)
  try:
    yield
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


def check_config(config: ExperimentConfig, num_slices: int = 1) -> None:
  """What `--mode=compile` needs of the config, before anything compiles."""
  if config.parallel.strategy != "jit":
    raise ConfigError("--mode=compile compiles the jit strategy's step over a mesh; drop "
                      "--config.parallel.strategy=pmap.")
  if num_slices > 1 and config.parallel.dcn_data != num_slices:
    raise ConfigError(f"--num_slices={num_slices}: set --config.parallel.dcn_data={num_slices} "
                      "so that only data parallelism crosses the network between slices.")


def _batch_shapes(task, global_batch: int) -> dict:
  """`jax.ShapeDtypeStruct`s of a global batch of the task's shapes (one row is drawn)."""
  import jax
  row = task.random_batch(1, np.random.default_rng(0))
  return {k: jax.ShapeDtypeStruct((global_batch,) + v.shape[1:], v.dtype) for k, v in row.items()}


def _over_hbm(error: Exception) -> Optional[OverHbm]:
  """XLA's out-of-memory error as an `OverHbm` (None for any other error)."""
  text = str(error)
  if not re.search(r"RESOURCE_EXHAUSTED|HbmOom|[Oo]ut of memory|exceeds the memory", text):
    return None
  # "... required for HLO temporaries (17.50G) exceeds available HBM (15.75G)" (libtpu 0.0.50),
  # or "15.98G > 15.75G": the first two sizes are the needed and the available bytes.
  sizes = re.findall(r"(?<![\w.])([0-9]+(?:\.[0-9]+)?)([KMGT])(?:i?B)?\b", text)
  needed = available = None
  if len(sizes) >= 2:
    scale = {"K": 2 ** 10, "M": 2 ** 20, "G": GIB, "T": 2 ** 40}
    needed, available = (float(v) * scale[u] for v, u in sizes[:2])
  return OverHbm("over HBM", needed, available)


def _first_line(error: Exception, limit: int = 300) -> str:
  line = (str(error).strip().splitlines() or [type(error).__name__])[0]
  return line if len(line) <= limit else line[:limit] + " ..."


def _describe_oom(oom: OverHbm, config: ExperimentConfig, where: str) -> str:
  m, p = config.model, config.parallel
  now = (f"batch {config.train.batch_size}, remat={m.remat}, data={p.data} fsdp={p.fsdp} "
         f"tensor={p.tensor}, loss_chunk={config.train.loss_chunk}")
  if oom.needed:
    need = (f"needs {oom.needed / GIB:.2f} GiB per device and {where} has "
            f"{oom.available / GIB:.2f} GiB (XLA's figures)")
  else:
    need = f"needs more HBM per device than {where} has"
  return f"the train step does not fit: it {need} ({now}); {OVER_HBM_HINT}."


def _stats(name: str, compiled, seconds: float) -> CompiledStep:
  m = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0] if cost else {}
  flops = (cost or {}).get("flops")
  return CompiledStep(name, seconds, int(m.argument_size_in_bytes), int(m.output_size_in_bytes),
                      int(m.alias_size_in_bytes), int(m.temp_size_in_bytes),
                      float(flops) if flops is not None and flops >= 0 else None)


def compile_steps(config: ExperimentConfig, devices: Sequence, *, eval_step: bool = False,
                  where: str = "the chip"):
  """Compiles `config`'s train step (and eval step) for `devices`.

  Returns `(config as the task completed it, the Parallel, [CompiledStep, ...])`. Raises
  `OverHbm` (one line, for launch) when a step does not fit `where`'s HBM.
  """
  from transformer.train import bench, optim  # JAX, Flax
  from transformer.train.parallel import build_parallel
  task = bench.bench_task(config)
  config = task.config
  par = build_parallel(config, task, optim.build_optimizer(config.optim, config.train.num_steps),
                       devices=devices)
  shapes = _batch_shapes(task, config.train.batch_size)
  steps = [("train step", par.lower_train_step)]
  if eval_step:
    steps.append(("eval step", par.lower_eval_step))
  results = []
  for name, lower in steps:
    t0 = time.perf_counter()
    try:
      compiled = lower(shapes).compile()
    except Exception as e:  # noqa: BLE001 -- XLA raises its runtime error type
      oom = _over_hbm(e)
      if oom is None:
        raise RunError(f"XLA could not compile the {name} for {where}: "
                       f"{_first_line(e)} (a compiler error, not a config error: the README's "
                       "'Compile for a TPU slice' section lists the known ones).") from None
      raise OverHbm(_describe_oom(oom, config, where).replace("the train step", f"the {name}"),
                    oom.needed, oom.available) from None
    results.append(_stats(name, compiled, time.perf_counter() - t0))
  return config, par, results


def lower_for_platform(config: ExperimentConfig, devices: Sequence, platform: str) -> str:
  """The train step's StableHLO lowered for `platform` (e.g. "cuda") on `devices`' mesh.

  JAX 0.12 lowers for CUDA without a GPU but cannot compile for it (no CUDA topology without
  the CUDA plugin), and cuDNN attention cannot even be traced without cuDNN
  (`jax.nn.dot_product_attention` asks cuDNN its version): this checks what the lowering
  shows, e.g. a GPU config's padded vocabulary (README, "Compile for a TPU slice")."""
  from transformer.train import bench, optim
  from transformer.train.parallel import build_parallel
  task = bench.bench_task(config)
  config = task.config
  par = build_parallel(config, task, optim.build_optimizer(config.optim, config.train.num_steps),
                       devices=devices)
  return par.lower_train_step(_batch_shapes(task, config.train.batch_size),
                              platforms=(platform,)).as_text()


def compiled_flops_note(config: ExperimentConfig) -> str:
  """Why the compiled FLOPs count may be low for `config` ("" when it should not be)."""
  loops = [name for name, on in (("model.scan_layers", config.model.scan_layers),
                                 ("train.loss_chunk", config.train.loss_chunk > 0),
                                 ("train.micro_batches", config.train.micro_batches > 1)) if on]
  if not loops:
    return ""
  return (f"low: XLA's cost analysis counts a loop's body once, and {', '.join(loops)} "
          "make loops")


def report(config: ExperimentConfig, topology: Topology, num_slices: int, par,
           steps: list[CompiledStep]) -> list[str]:
  """The lines `--mode=compile` prints: mesh, memory and FLOPs per device, compile times."""
  from transformer.train.state import count_params
  import jax
  n = par.num_devices
  hbm = topology.hbm_gib
  kind = kinds.get(config.model.kind)
  params = count_params(jax.eval_shape(lambda s: s.params, par.abstract_state))
  m = config.model
  lines = [f"compile: {topology.describe(num_slices)}; {n} devices ({par.devices[0].device_kind})",
           f"  mesh            {par.describe().replace(', 1 process(es)', '')}",
           f"  model           {m.kind}, {params / 1e6:.1f}M params, batch "
           f"{config.train.batch_size} x {kind.row_shape(config)} tokens "
           f"({config.train.batch_size / n:g} rows per device); dtype {m.dtype}, params "
           f"{m.param_dtype}, remat {m.remat}, scan {m.scan_layers}, attention {m.attention_impl}"]
  for step in steps:
    b = format_bytes
    lines += [f"  {step.name}",
              f"    memory/device  arguments {b(step.argument_bytes)} + outputs "
              f"{b(step.output_bytes)} - aliased {b(step.alias_bytes)} + temporaries "
              f"{b(step.temp_bytes)} = {b(step.total_bytes)} of {hbm:g} GiB HBM "
              f"(headroom {hbm - step.total_bytes / GIB:.2f} GiB; XLA's own limit is a "
              "little lower)"]
    if step.name == "train step":
      lines += _flops_lines(config, step, n)
    elif step.flops is not None:
      lines.append(f"    FLOPs          {format_flops(step.flops)} per device, "
                   f"{format_flops(step.flops * n)} per step (compiled)")
    lines.append(f"    compile time   {step.seconds:.1f} s")
  return lines


def _flops_lines(config: ExperimentConfig, step: CompiledStep, n: int) -> list[str]:
  model = kinds.experiment_flops_per_step(config)
  whole = kinds.experiment_flops_per_step(config, masked_too=True)
  f = format_flops
  lines = [f"    model FLOPs    {f(model)} per step, {f(model / n)} per device "
           "(transformer/model/flops.py: matmuls x 3, causal attention halved); "
           f"{f(whole)} per step with the masked half of attention, as XLA computes it"]
  if step.flops is None:
    return lines + ["    FLOPs          not reported by this compiler"]
  note = compiled_flops_note(config)
  remat = (f"; remat={config.model.remat} recomputes the forward pass, which the compiled "
           "count includes" if config.model.remat != "none" else "")
  lines.append(f"    compiled FLOPs {f(step.flops)} per device, "
               f"{f(step.flops * n)} per step: {step.flops * n / whole:.3f} x the "
               f"formula with masked attention, {step.flops * n / model:.3f} x model FLOPs"
               + (f" ({note})" if note else "") + remat)
  return lines


def with_layout(config: ExperimentConfig, *, remat: Optional[str] = None,
                layout: Optional[str] = None, batch: Optional[int] = None) -> ExperimentConfig:
  """`config` with another remat policy, layout ("data": batch over every device; "fsdp":
  parameters too, data = dcn_data) or global batch."""
  model, parallel, train = config.model, config.parallel, config.train
  if remat is not None:
    model = dataclasses.replace(model, remat=remat)
  if layout == "data":
    parallel = dataclasses.replace(parallel, data=-1, fsdp=1)
  elif layout == "fsdp":
    parallel = dataclasses.replace(parallel, data=parallel.dcn_data, fsdp=-1)
  if batch is not None:
    train = dataclasses.replace(train, batch_size=batch)
  return dataclasses.replace(config, model=model, parallel=parallel, train=train)


def largest_fitting(fits: Callable[[int], bool], limit: int) -> int:
  """The largest k in [1, limit] with `fits(k)`, 0 if not even 1 fits; `fits` must be
  monotone (true up to some k, false after). Doubles from 1, then bisects: about
  2 log2(answer) calls."""
  if not fits(1):
    return 0
  good, bad = 1, None
  while bad is None:
    nxt = min(good * 2, limit)
    if nxt == good:
      return good
    if fits(nxt):
      good = nxt
    else:
      bad = nxt
  while bad - good > 1:
    mid = (good + bad) // 2
    if fits(mid):
      good = mid
    else:
      bad = mid
  return good


SWEEP_HEADER = ("| remat | layout | batch per device | global batch | GiB per device | "
                "compiles | seconds |")


def largest_batches(config: ExperimentConfig, devices: Sequence, topology: Topology, *,
                    remats: Sequence[str] = REMATS, layouts: Sequence[str] = LAYOUTS,
                    limit: int = 256, log: Callable[[str], None] = print) -> list[dict]:
  """For each remat policy and layout, the largest batch per device whose train step fits
  `topology`'s HBM (searched up to `limit` rows per device, in multiples of
  `train.micro_batches`). Returns one dict per (remat, layout)."""
  from transformer.train.parallel import mesh_shape
  rows = []
  for remat in remats:
    for layout in layouts:
      base = with_layout(config, remat=remat, layout=layout)
      shape = mesh_shape(base.parallel, len(devices))
      ways = shape["data"] * shape["fsdp"]  # the batch is split over these (tensor shares rows)
      micro = config.train.micro_batches  # rows per device go in multiples of it
      found, count, t0 = {}, [0], time.perf_counter()

      def fits(k: int) -> bool:
        count[0] += 1  # noqa: B023 -- fits() runs within this iteration only
        try:
          _, _, (step,) = compile_steps(with_layout(base, batch=k * micro * ways), devices,  # noqa: B023
                                        where=topology.name)
        except OverHbm:
          return False
        found[k] = step.total_bytes  # noqa: B023
        return True

      k = largest_fitting(fits, max(1, limit // micro))
      row = {"remat": remat, "layout": layout, "per_device": k * micro,
             "global": k * micro * ways, "bytes": found.get(k),
             "capped": k * micro >= limit, "compiles": count[0],
             "seconds": time.perf_counter() - t0}
      rows.append(row)
      log(f"  {sweep_row(row)}")
  return rows


def sweep_row(row: dict) -> str:
  if not row["global"]:
    return (f"| {row['remat']} | {row['layout']} | OOM at 1 | - | - | {row['compiles']} | "
            f"{row['seconds']:.0f} |")
  more = "+" if row["capped"] else ""
  return (f"| {row['remat']} | {row['layout']} | {row['per_device']}{more} | {row['global']} "
          f"| {row['bytes'] / GIB:.2f} | {row['compiles']} | {row['seconds']:.0f} |")


def run_compile(config: ExperimentConfig, topology_name: str, num_slices: int = 1, *,
                eval_step: bool = False, sweep: bool = False,
                log: Callable[[str], None] = print) -> list[CompiledStep]:
  """`--mode=compile`: prints the report (and with `sweep`, the largest batches table)."""
  topology = topologies.get(topology_name)
  check_config(config, num_slices)
  devices = topology_devices(topology, num_slices)
  where = topology.name + (f" x {num_slices}" if num_slices > 1 else "")
  if sweep:
    log(f"compile sweep on {topology.describe(num_slices)}: the largest batch per device whose "
        f"train step fits, per remat policy and layout (data: batch over all {len(devices)} "
        "devices; fsdp: parameters and optimizer state sharded over them too)")
    log(f"  {SWEEP_HEADER}")
    log("  |---|---|---|---|---|---|---|")
    largest_batches(config, devices, topology, log=log)
    return []
  config, par, steps = compile_steps(config, devices, eval_step=eval_step, where=where)
  for line in report(config, topology, num_slices, par, steps):
    log(line)
  return steps
