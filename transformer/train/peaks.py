"""The devices' peak FLOP/s behind MFU: data-sheet figures per accelerator, a measured matmul
rate for CPUs (cached per machine), or `train.peak_flops_per_device`. The FLOPs of a step are
counted in `transformer.model.flops` (its docstring states the convention)."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from typing import NamedTuple, Optional

import jax

from transformer import paths

# Dense peak FLOP/s per device by compute dtype, from the vendors' data sheets (no sparsity:
# NVIDIA's sheets print the 2:4-sparse figure with a footnote; the dense one is half of it).
# GPUs: "bfloat16" is the BF16 tensor-core peak; "float32" the TF32 tensor-core peak, which is
# what XLA uses for float32 matmuls at JAX's default precision. TPUs run float32 matmuls at
# default precision as bfloat16 passes on the MXU, so both dtypes get the bf16 peak. Keys are
# prefixes of `jax.Device.device_kind`; the longest matching one wins.
PEAK_FLOPS = {  # device_kind prefix -> {model.dtype: FLOP/s}
    # NVIDIA H100 Tensor Core GPU data sheet: SXM5 1,979 / 989 TFLOPS sparse BF16 / TF32.
    "NVIDIA H100 80GB HBM3": {"bfloat16": 989e12, "float32": 495e12},  # H100 SXM5
    # Same data sheet, H100 PCIe: 1,513 / 756 sparse.
    "NVIDIA H100 PCIe": {"bfloat16": 756e12, "float32": 378e12},
    # Same data sheet, H100 NVL (per GPU): 1,671 / 835 sparse.
    "NVIDIA H100 NVL": {"bfloat16": 835e12, "float32": 418e12},
    # NVIDIA H200 Tensor Core GPU data sheet: H200 SXM 1,979 / 989 sparse.
    "NVIDIA H200": {"bfloat16": 989e12, "float32": 495e12},
    # Same data sheet, H200 NVL: 1,671 / 835 sparse.
    "NVIDIA H200 NVL": {"bfloat16": 835e12, "float32": 418e12},
    # NVIDIA GH200 Grace Hopper Superchip data sheet: the H100 SXM5 figures.
    "NVIDIA GH200": {"bfloat16": 989e12, "float32": 495e12},
    # NVIDIA A100 Tensor Core GPU data sheet: 312 / 156 dense BF16 / TF32 for SXM and PCIe,
    # 40 and 80 GB alike ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", ...).
    "NVIDIA A100": {"bfloat16": 312e12, "float32": 156e12},
    # Google Cloud TPU documentation, system architecture pages (peak bf16 per chip).
    "TPU v4": {"bfloat16": 275e12, "float32": 275e12},  # TPU v4: 275 TFLOPS
    "TPU v5 lite": {"bfloat16": 197e12, "float32": 197e12},  # TPU v5e: 197 TFLOPS
    "TPU v5e": {"bfloat16": 197e12, "float32": 197e12},
    "TPU v5p": {"bfloat16": 459e12, "float32": 459e12},  # TPU v5p: 459 TFLOPS
    "TPU v5": {"bfloat16": 459e12, "float32": 459e12},  # v5p reports itself as "TPU v5"
    "TPU v6 lite": {"bfloat16": 918e12, "float32": 918e12},  # TPU v6e (Trillium): 918 TFLOPS
    "TPU v6e": {"bfloat16": 918e12, "float32": 918e12},
}

# NVIDIA GPUs when float32 matmuls run in full float32 (`JAX_DEFAULT_MATMUL_PRECISION=highest`
# or `float32`): the CUDA-core FP32 peak of the same data sheets (H100 SXM5 67, PCIe 51, NVL 60;
# H200 SXM 67, NVL 60; GH200 as H100 SXM5; A100 19.5 TFLOPS), not the TF32 tensor-core one.
FULL_FLOAT32_PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 67e12, "NVIDIA H100 PCIe": 51e12, "NVIDIA H100 NVL": 60e12,
    "NVIDIA H200": 67e12, "NVIDIA H200 NVL": 60e12, "NVIDIA GH200": 67e12, "NVIDIA A100": 19.5e12,
}
FULL_FLOAT32_PRECISIONS = ("highest", "float32")

# CPU: no data sheet fits every machine, so the peak is measured: the best rate of a square
# float32 matmul of this size (jit-compiled, timed a few times), cached per machine.
CPU_PEAK_MATMUL_SIZE = 2048
CPU_PEAK_REPEATS = 5
# A measurement taken while the 1-minute load average was at least this many runnable
# processes per core shared the cores with other work (a sweep's other runs): likely too low.
BUSY_LOAD_PER_CORE = 0.75
# No CPU core reaches this float32 rate (two AVX-512 FMA units at 4 GHz give 256 GFLOP/s): a
# cached figure above it per core was never a measurement (before the fix in measure_matmul_flops,
# every process but the first of a multi-process run timed another process's device) and is
# measured again.
IMPOSSIBLE_CPU_FLOPS_PER_CORE = 1e12


def cache_dir() -> str:
  """Where measured figures are cached: `$TRANSFORMER_CACHE_DIR`, else
  `$XDG_CACHE_HOME/transformer`, else `~/.cache/transformer`."""
  if os.environ.get("TRANSFORMER_CACHE_DIR"):
    return os.environ["TRANSFORMER_CACHE_DIR"]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "transformer")


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.lower().startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _cpu_cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def measure_matmul_flops(size: int = CPU_PEAK_MATMUL_SIZE, repeats: int = CPU_PEAK_REPEATS,
                         device: Optional[jax.Device] = None, dtype: str = "float32") -> float:
  """FLOP/s of the fastest of `repeats` runs of a jit-compiled `[size, size] @ [size, size]`
  matmul in `dtype` (2 size^3 FLOPs) on `device` (default: this process's first device), after
  a warm-up. A device of another process would time nothing: its arrays are not computed here."""
  import jax.numpy as jnp
  device = device or jax.local_devices()[0]
  a, b = (jax.device_put(jax.random.normal(jax.random.PRNGKey(i), (size, size),
                                           jnp.dtype(dtype)), device) for i in (0, 1))
  matmul = jax.jit(jnp.matmul)
  jax.block_until_ready(matmul(a, b))  # compile and warm up
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(matmul(a, b))
    best = min(best, time.perf_counter() - t0)
  return 2.0 * size ** 3 / best


def cpu_peak_path(directory: Optional[str] = None) -> str:
  """The file the measured CPU peaks are cached in: `<directory or cache_dir()>/cpu_peak.json`."""
  return os.path.join(directory or cache_dir(), "cpu_peak.json")


def _cpu_key() -> str:
  return f"{_cpu_model()} | {_cpu_cores()} cores | jax {jax.__version__}"


def _load_average() -> Optional[float]:
  """The 1-minute load average (runnable processes), or None where the OS gives none."""
  try:
    return round(os.getloadavg()[0], 2)
  except (OSError, AttributeError):
    return None


def _busy(load: Optional[float]) -> bool:
  return load is not None and load >= BUSY_LOAD_PER_CORE * _cpu_cores()


def _measured_entry() -> dict:
  """A new measurement, with the load the cores carried when it started."""
  load = _load_average()
  return {"flops_per_sec": measure_matmul_flops(), "matmul_size": CPU_PEAK_MATMUL_SIZE,
          "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "load_average": load}


def _write_cache(path: str, cache: dict) -> None:
  """Writes `cache` to `path` atomically (`paths.write_text`: concurrent runs never read half
  a file); a read-only folder is ignored (the figure is still right for this process)."""
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    paths.write_text(path, json.dumps(cache, indent=2, sort_keys=True))
  except OSError:
    pass


def _cpu_source(entry: dict, path: str) -> str:
  n = entry.get("matmul_size", CPU_PEAK_MATMUL_SIZE)
  load = entry.get("load_average")
  busy = (f", load average {load} on {_cpu_cores()} cores: other work shared them, so the "
          "peak is likely low and MFU high; it is measured again once they are free"
          if _busy(load) else "")
  return (f"measured float32 {n}x{n} matmul on {_cpu_cores()} CPU cores, "
          f"{entry['flops_per_sec'] / 1e9:,.0f} GFLOP/s ({entry['measured']}{busy}; cached in "
          f"{path})")


def cpu_peak_flops(directory: Optional[str] = None) -> tuple[float, str]:
  """Measured float32 matmul FLOP/s of this machine's CPU cores, and how it was obtained.

  Measured once per (CPU model, cores usable by this process, JAX version) and cached in
  `cpu_peak_path(directory)`; delete that file to measure again. A figure measured while other
  processes shared the cores is too low: its source says so (the load average it was measured
  at), and it is measured again (`remeasure_cpu_peak`, which never lowers it) by the first call
  that finds the cores free.
  """
  path = cpu_peak_path(directory)
  key = _cpu_key()
  cache = _read_cache(path)
  entry = cache.get(key)
  if not _valid_entry(entry):
    entry = cache[key] = _measured_entry()
    _write_cache(path, cache)
  elif _busy(entry.get("load_average")) and not _busy(_load_average()):
    return remeasure_cpu_peak(directory)
  return entry["flops_per_sec"], _cpu_source(entry, path)


def remeasure_cpu_peak(directory: Optional[str] = None) -> tuple[float, str]:
  """Measures the CPU matmul rate again and keeps the best figure: returns (max(cached, new)
  FLOP/s of the whole CPU, its source), and stores it in `cpu_peak_path(directory)`
  atomically when the new measurement is higher (or the cached entry is missing or unusable).
  A peak only goes up: a measurement on busy cores never lowers it."""
  path = cpu_peak_path(directory)
  key = _cpu_key()
  new = _measured_entry()
  cache = _read_cache(path)  # read after measuring: keep what a concurrent run wrote meanwhile
  entry = cache.get(key)
  if not _valid_entry(entry) or new["flops_per_sec"] > entry["flops_per_sec"]:
    entry = cache[key] = new
    _write_cache(path, cache)
  elif _busy(entry.get("load_average")) and not _busy(new["load_average"]):
    # a measurement on free cores found no more: the busy one was not low after all
    entry = cache[key] = {**entry, "load_average": new["load_average"]}
    _write_cache(path, cache)
  return entry["flops_per_sec"], _cpu_source(entry, path)


def _read_cache(path: str) -> dict:
  """The cache's entries; `{}` (so: measure again) for a missing, corrupt or foreign file."""
  try:
    with open(path, encoding="utf-8") as f:
      cache = json.load(f)
  except (OSError, ValueError):  # ValueError: invalid JSON or UTF-8 (a torn write)
    return {}
  return cache if isinstance(cache, dict) else {}


def _valid_entry(entry) -> bool:
  flops = entry.get("flops_per_sec") if isinstance(entry, dict) else None
  return (isinstance(flops, (int, float)) and not isinstance(flops, bool) and
          math.isfinite(flops) and 0 < flops < IMPOSSIBLE_CPU_FLOPS_PER_CORE * _cpu_cores()
          and isinstance(entry.get("measured"), str))


def data_sheet_peak(device_kind: str, dtype: str) -> Optional[float]:
  """Data-sheet peak FLOP/s of `device_kind` for compute dtype `dtype` (`float32` or
  `bfloat16`), or None where the device is not in `PEAK_FLOPS`. The longest matching
  prefix wins ("NVIDIA H100 PCIe" before a plain "NVIDIA H100")."""
  for name in sorted(PEAK_FLOPS, key=len, reverse=True):
    if device_kind.startswith(name):
      return PEAK_FLOPS[name].get(dtype)
  return None


def full_float32_matmuls() -> bool:
  """True when JAX's default matmul precision makes float32 matmuls full float32 (no TF32)."""
  return str(jax.config.jax_default_matmul_precision or "").lower() in FULL_FLOAT32_PRECISIONS


def _longest_prefix(table: dict, device_kind: str) -> Optional[float]:
  name = max((n for n in table if device_kind.startswith(n)), key=len, default=None)
  return table[name] if name else None


def peak_flops_per_device(override: float = 0.0, dtype: str = "float32",
                          cache: Optional[str] = None) -> tuple[Optional[float], str]:
  """Peak FLOP/s of one device of this run for compute `dtype`, and where the figure comes from.

  GPUs and TPUs: the data sheet for `dtype`. CPUs: a measured float32 matmul (`cpu_peak_flops`;
  `cache` is its cache folder); the fake devices of `--xla_force_host_platform_device_count`
  share the same cores, so that peak is divided among them. None (no MFU) for an unknown
  accelerator unless `override` (`train.peak_flops_per_device`) is given.
  """
  if override > 0:
    return override, "train.peak_flops_per_device"
  device = jax.devices()[0]
  if device.platform == "cpu":
    return _per_cpu_device(*cpu_peak_flops(cache))
  if device.platform == "gpu" and dtype == "float32" and full_float32_matmuls():
    peak = _longest_prefix(FULL_FLOAT32_PEAK_FLOPS, device.device_kind)
    if peak:
      return peak, (f"data sheet, FP32 (CUDA-core) dense peak of {device.device_kind}: "
                    "float32 matmuls at jax_default_matmul_precision="
                    f"{jax.config.jax_default_matmul_precision}")
  peak = data_sheet_peak(device.device_kind, dtype)
  if peak:
    kind = "TF32 tensor-core" if dtype == "float32" and device.platform == "gpu" else dtype
    return peak, f"data sheet, {kind} dense peak of {device.device_kind}"
  return None, (f"no data-sheet peak for {device.device_kind} ({dtype}); set "
                "train.peak_flops_per_device")


def _per_cpu_device(peak: float, how: str) -> tuple[float, str]:
  """A whole-CPU peak split among the fake CPU devices of this process, and its source."""
  n = jax.local_device_count()
  return peak / n, how + (f", shared by {n} CPU devices" if n > 1 else "")


def peak_is_measured(override: float = 0.0) -> bool:
  """True where `peak_flops_per_device(override, ...)` is the measured CPU peak (one that
  `checked_mfu` may measure again): on CPU, with no `train.peak_flops_per_device` given."""
  return not override > 0 and jax.devices()[0].platform == "cpu"


class MfuCheck(NamedTuple):
  """`checked_mfu`'s answer: `mfu` (a fraction, never above 1) or None; the `peak` FLOP/s per
  device and its `source` it was computed against (raised where the CPU was measured again);
  `problem`, why there is no MFU (None when there is one)."""
  mfu: Optional[float]
  peak: Optional[float]
  source: str
  problem: Optional[str]


def checked_mfu(achieved: float, peak: Optional[float], source: str, measured_cpu: bool = False,
                cache: Optional[str] = None) -> MfuCheck:
  """The MFU of `achieved` model FLOP/s per device against `peak` FLOP/s per device (from
  `source`), as an `MfuCheck`; the one guard bench and the train log share.

  achieved <= peak: that fraction. Above a measured CPU peak (`measured_cpu`, see
  `peak_is_measured`; `cache` its folder): the CPU is measured once more (`remeasure_cpu_peak`,
  which keeps the best figure) and the raised peak is used if it now covers the rate. Otherwise
  no MFU (a figure above 100% is false, not good news): mfu None and a `problem` saying the
  peak is below the achieved rate and how to fix it. No peak at all: mfu None, problem `source`.
  """
  if not peak or not peak > 0:
    return MfuCheck(None, None, source, source)
  if not (math.isfinite(achieved) and achieved >= 0):
    return MfuCheck(None, peak, source, f"no finite achieved rate ({achieved} FLOP/s)")
  if achieved > peak and measured_cpu:
    peak, source = _per_cpu_device(*remeasure_cpu_peak(cache))
  if achieved <= peak:
    return MfuCheck(achieved / peak, peak, source, None)
  return MfuCheck(None, peak, source, _peak_too_low(achieved, peak, source, measured_cpu, cache))


def _peak_too_low(achieved: float, peak: float, source: str, measured_cpu: bool,
                  cache: Optional[str]) -> str:
  """Why a peak below the achieved rate gives no MFU, and how to fix it."""
  rates = (f"{peak / 1e12:.4g} TFLOP/s per device is below the achieved "
           f"{achieved / 1e12:.4g} TFLOP/s, so the peak is wrong")
  if measured_cpu:
    return (f"the cached CPU peak {rates} (too low even measured again now: other work shares "
            f"the cores?): delete {cpu_peak_path(cache)} on a quiet machine to measure it "
            "afresh, or set train.peak_flops_per_device")
  if source == "train.peak_flops_per_device":
    return f"the given peak train.peak_flops_per_device {rates}: raise it"
  return f"the peak {rates} ({source}): set train.peak_flops_per_device"
