"""Process-wide settings the launcher applies before anything compiles: XLA flags for GPUs, the
CPU backend alone where libtpu is installed without a TPU, and the persistent compilation
cache.

XLA reads `XLA_FLAGS` once, when JAX creates its first backend, so `add_gpu_xla_flags` must
run before any device is touched; it decides whether a GPU is present from the environment
(the CUDA/ROCm plugin and the device nodes), not by starting JAX. A flag the user already put
in `XLA_FLAGS` is never overridden, whatever its value.
"""

from __future__ import annotations

import importlib.util
import os

# Flags known to help training on GPUs (JAX's GPU performance tips, MaxText's GPU scripts): the
# latency-hiding scheduler overlaps collectives and copies with compute. Only flags that
# the pinned XLA accepts (tests/test_runtime.py checks they parse): XLA aborts on unknown ones.
GPU_XLA_FLAGS = ("--xla_gpu_enable_latency_hiding_scheduler=true",)

_GPU_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm7_plugin", "jax_rocm60_plugin")
_GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def gpu_present(environ=os.environ) -> bool:
  """Whether JAX will run on a GPU here: a GPU plugin is installed, a GPU device node exists,
  and `JAX_PLATFORMS` (if set) allows cuda / rocm / gpu."""
  platforms = environ.get("JAX_PLATFORMS", "").lower()
  if platforms and not any(p in platforms for p in ("cuda", "rocm", "gpu")):
    return False
  if not any(importlib.util.find_spec(p) is not None for p in _GPU_PLUGINS):
    return False
  return any(os.path.exists(node) for node in _GPU_DEVICE_NODES)


def _flag_name(flag: str) -> str:
  return flag.split("=", 1)[0].strip()


def with_flags(xla_flags: str, extra: tuple[str, ...]) -> str:
  """`xla_flags` plus each flag of `extra` whose name it does not set yet."""
  present = {_flag_name(f) for f in xla_flags.split()}
  added = [f for f in extra if _flag_name(f) not in present]
  return " ".join([xla_flags.strip()] + added).strip()


def add_gpu_xla_flags(enabled: bool, environ=os.environ) -> list[str]:
  """Adds `GPU_XLA_FLAGS` to `environ["XLA_FLAGS"]` when `enabled` and a GPU is present;
  returns the flags added."""
  if not enabled or not gpu_present(environ):
    return []
  before = environ.get("XLA_FLAGS", "")
  environ["XLA_FLAGS"] = with_flags(before, GPU_XLA_FLAGS)
  return environ["XLA_FLAGS"][len(before):].split()


def skip_absent_tpu(environ=os.environ) -> bool:
  """Restricts JAX to the CPU where libtpu is installed (the `[tpu]` and `[test]` extras, for
  `--mode=compile`) but this machine has no TPU chip and no GPU plugin: JAX would otherwise
  start libtpu, which prints five lines of errors looking for a TPU on every launch. A set
  `JAX_PLATFORMS`, a TPU VM (JAX's own chip count, from the PCI devices) and a GPU plugin are
  left alone. Must run before JAX starts a backend; returns whether it restricted JAX."""
  if "JAX_PLATFORMS" in environ or importlib.util.find_spec("libtpu") is None:
    return False
  if any(importlib.util.find_spec(p) is not None for p in _GPU_PLUGINS):
    return False
  try:
    from jax._src import hardware_utils  # private: guarded below
    chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
  except Exception:  # noqa: BLE001 -- JAX moved it: change nothing rather than guess
    return False
  if chips:
    return False
  import jax  # imported already by hardware_utils; no backend started yet
  environ["JAX_PLATFORMS"] = "cpu"  # for child processes (sweep points, multihost workers)
  jax.config.update("jax_platforms", "cpu")  # JAX read the environment at its import
  return True


def enable_compilation_cache(directory: str) -> None:
  """Keeps compiled programs in `directory` across runs (JAX's persistent compilation cache);
  programs that compile in under a second are not worth a file and are not kept."""
  import jax
  directory = os.path.abspath(os.path.expanduser(directory))
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
