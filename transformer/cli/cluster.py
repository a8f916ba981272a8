"""Which multi-process environment this process runs in, asked of JAX's own cluster detectors.

JAX keeps one `ClusterEnv` subclass per environment in `jax._src.clusters` (SLURM, Open MPI,
Cloud TPU VM, GKE TPU, Kubernetes, mpi4py; the same set in jax 0.10.2 and 0.12), and
`jax.distributed.initialize()` uses the first whose `is_env_present()` is true. `detect()` asks
them in the same order, skipping the opt-in ones (mpi4py) as JAX does, and says how many
processes the environment has, so `--distributed=auto` starts the distributed runtime only for
more than one.

Cost: the SLURM and Open MPI detectors read environment variables. The Cloud TPU detectors run
only where `import jax` found TPU chips and libtpu (`running_in_cloud_tpu_vm`); there they ask
the VM's metadata server, which answers at once on a real TPU VM. Any detector that has not
answered within `timeout_s` seconds is an error naming it, never a hang.

`jax._src.clusters` is private. If it moves (an import or attribute error), `detect()` returns
`JAX_DETECTS`: the caller then leaves detection to `jax.distributed.initialize()` itself.
`PRIVATE_NAMES` lists what this module reads there; tests/test_cluster_detection.py fails when
one of them disappears, so a JAX upgrade that moves them is noticed, not silently degraded.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

from transformer.errors import RunError


@dataclasses.dataclass(frozen=True)
class Cluster:
  """A detected environment: JAX's detector name (`slurm`, `ompi`, `gcetpu`, ...) and size."""
  name: str
  kind: str  # the ClusterEnv subclass, e.g. SlurmCluster
  num_processes: int


# Unknown environment: jax._src.clusters could not be read, so jax.distributed.initialize()
# is left to detect the cluster (or to find none) on its own.
JAX_DETECTS = Cluster("", "jax.distributed.initialize's own detection", -1)

# What this module reads in the private module: (attribute of jax._src.clusters.ClusterEnv or
# of each detector class). A test asserts each exists.
PRIVATE_NAMES = {"ClusterEnv": ("_cluster_types", "is_env_present", "get_process_count",
                                "opt_in_only_method", "name")}


def _cluster_types() -> list:
  """JAX's ClusterEnv subclasses in its detection order (importing jax registers them).
  Raises ImportError or AttributeError if the private module has moved."""
  import jax  # noqa: F401 -- registers the detectors; callers are past flag parsing
  from jax._src import clusters  # private, but the detectors live only here
  return [env for env in clusters.ClusterEnv._cluster_types  # noqa: SLF001
          if not getattr(env, "opt_in_only_method", False)]


def _detect_now() -> Optional[Cluster]:
  try:
    types = _cluster_types()
  except (ImportError, AttributeError):
    return JAX_DETECTS
  for env in types:
    if env.is_env_present():
      return Cluster(getattr(env, "name", env.__name__), env.__name__,
                     int(env.get_process_count()))
  return None


def detect(timeout_s: float = 30.0) -> Optional[Cluster]:
  """The first cluster environment JAX's detectors find here (None: a plain machine;
  `JAX_DETECTS` when the private detectors cannot be read).

  Raises RunError if the detectors have not answered within `timeout_s` seconds (a
  metadata server that does not respond) or one of them fails.
  """
  result: dict = {}

  def run():
    try:
      result["cluster"] = _detect_now()
    except Exception as e:  # noqa: BLE001 -- reported below, in one line
      result["error"] = e

  thread = threading.Thread(target=run, name="cluster-detection", daemon=True)
  thread.start()
  thread.join(timeout_s)
  if thread.is_alive():
    raise RunError(f"JAX's cluster detection did not answer within {timeout_s:.0f}s (a Cloud "
                      "TPU or Kubernetes metadata query?); pass --distributed=off for one "
                      "process, or --coordinator_address/--num_processes/--process_id.")
  if "error" in result:
    e = result["error"]
    raise RunError(f"JAX's cluster detection failed: {type(e).__name__}: {e}; pass "
                      "--distributed=off for one process, or --coordinator_address/"
                      "--num_processes/--process_id.")
  return result["cluster"]
