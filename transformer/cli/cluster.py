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


def _cluster_types() -> list:
  """JAX's ClusterEnv subclasses in its detection order (importing jax registers them)."""
  import jax  # noqa: PLC0415, F401 -- registers the detectors; callers are past flag parsing
  from jax._src import clusters  # noqa: PLC0415 -- private, but the detectors live only here
  return [env for env in clusters.ClusterEnv._cluster_types  # noqa: SLF001
          if not getattr(env, "opt_in_only_method", False)]


def _detect_now() -> Optional[Cluster]:
  for env in _cluster_types():
    if env.is_env_present():
      return Cluster(getattr(env, "name", env.__name__), env.__name__,
                     int(env.get_process_count()))
  return None


def detect(timeout_s: float = 30.0) -> Optional[Cluster]:
  """The first cluster environment JAX's detectors find here (None: a plain machine).

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
