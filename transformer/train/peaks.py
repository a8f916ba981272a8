"""The devices' peak FLOP/s behind MFU: data-sheet figures per accelerator, a measured matmul
rate for CPUs (cached per machine), or `train.peak_flops_per_device`. The FLOPs of a step are
counted in `transformer.train.flops` (its docstring states the convention)."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from typing import Optional

import jax

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

# CPU: no data sheet fits every machine, so the peak is measured: the best rate of a square
# float32 matmul of this size (jit-compiled, timed a few times), cached per machine.
CPU_PEAK_MATMUL_SIZE = 2048
CPU_PEAK_REPEATS = 5


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
                         device: Optional[jax.Device] = None) -> float:
  """FLOP/s of the fastest of `repeats` runs of a jit-compiled `[size, size] @ [size, size]`
  float32 matmul (2 size^3 FLOPs) on `device` (default: the first device), after a warm-up."""
  import jax.numpy as jnp  # noqa: PLC0415
  device = device or jax.devices()[0]
  a, b = (jax.device_put(jax.random.normal(jax.random.PRNGKey(i), (size, size), jnp.float32),
                         device) for i in (0, 1))
  matmul = jax.jit(jnp.matmul)
  jax.block_until_ready(matmul(a, b))  # compile and warm up
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(matmul(a, b))
    best = min(best, time.perf_counter() - t0)
  return 2.0 * size ** 3 / best


def cpu_peak_flops(directory: Optional[str] = None) -> tuple[float, str]:
  """Measured float32 matmul FLOP/s of this machine's CPU cores, and how it was obtained.

  Measured once per (CPU model, cores usable by this process, JAX version) and cached in
  `<directory or cache_dir()>/cpu_peak.json`; delete that file to measure again.
  """
  directory = directory or cache_dir()
  path = os.path.join(directory, "cpu_peak.json")
  key = f"{_cpu_model()} | {_cpu_cores()} cores | jax {jax.__version__}"
  cache = _read_cache(path)
  entry = cache.get(key)
  if not _valid_entry(entry):
    entry = {"flops_per_sec": measure_matmul_flops(), "matmul_size": CPU_PEAK_MATMUL_SIZE,
             "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    cache[key] = entry
    try:
      os.makedirs(directory, exist_ok=True)
      tmp = f"{path}.{os.getpid()}.tmp"
      with open(tmp, "w") as f:
        json.dump(cache, f, indent=2, sort_keys=True)
      os.replace(tmp, path)  # atomic: concurrent runs never read half a file
    except OSError:
      pass  # read-only home: the figure is still right for this process
  n = entry.get("matmul_size", CPU_PEAK_MATMUL_SIZE)
  return entry["flops_per_sec"], (
      f"measured float32 {n}x{n} matmul on {_cpu_cores()} CPU cores, "
      f"{entry['flops_per_sec'] / 1e9:,.0f} GFLOP/s ({entry['measured']}; cached in {path})")


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
          math.isfinite(flops) and flops > 0 and isinstance(entry.get("measured"), str))


def data_sheet_peak(device_kind: str, dtype: str) -> Optional[float]:
  """Data-sheet peak FLOP/s of `device_kind` for compute dtype `dtype` (`float32` or
  `bfloat16`), or None where the device is not in `PEAK_FLOPS`. The longest matching
  prefix wins ("NVIDIA H100 PCIe" before a plain "NVIDIA H100")."""
  for name in sorted(PEAK_FLOPS, key=len, reverse=True):
    if device_kind.startswith(name):
      return PEAK_FLOPS[name].get(dtype)
  return None


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
    peak, how = cpu_peak_flops(cache)
    n = jax.local_device_count()
    return peak / n, how + (f", shared by {n} CPU devices" if n > 1 else "")
  peak = data_sheet_peak(device.device_kind, dtype)
  if peak:
    kind = "TF32 tensor-core" if dtype == "float32" and device.platform == "gpu" else dtype
    return peak, f"data sheet, {kind} dense peak of {device.device_kind}"
  return None, (f"no data-sheet peak for {device.device_kind} ({dtype}); set "
                "train.peak_flops_per_device")
