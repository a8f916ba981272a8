"""XLA flags that the tests' processes share.

FAST_COMPILE: the tests' programs are tiny, so XLA compiling them costs far more than running
them. LLVM at -O0 about halves a tiny training run's compile time on CPU (its train step: 15 s
to 8 s on 2 loaded cores). The numbers move in the last bits (a 2-layer model's loss after 5
steps: 3.0028338 against 3.0028336), so a test never compares a number computed under the flag
with one computed without it; every test process gets it from conftest's XLA_FLAGS, and a test
that builds its subprocess's XLA_FLAGS itself adds it (`cpu_devices`).
"""

FAST_COMPILE = "--xla_backend_optimization_level=0"


def cpu_devices(count: int) -> str:
  """XLA_FLAGS for a test's subprocess: `count` fake CPU devices, compiled fast."""
  return f"--xla_force_host_platform_device_count={count} {FAST_COMPILE}"
