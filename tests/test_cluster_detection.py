"""`--distributed=auto|on|off` and JAX's own cluster detectors (`transformer/cli/cluster.py`).

No cluster and no network: the environments are the variables SLURM and Open MPI set, and
`jax.distributed.initialize` is replaced by a recorder, so nothing joins anything.
"""

import os
import subprocess
import sys
import time

import jax
import pytest

from transformer.cli import cluster
from transformer.cli.launch import initialize_distributed
from transformer.config import ConfigError
from transformer.errors import RunError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What `srun --ntasks=2` sets in task 1 (as seen on the local cluster of scripts/slurm_local.sh).
SLURM_STEP = {"SLURM_JOB_ID": "41", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_NTASKS": "2",
              "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}
# mpirun -np 4 (ORTE-based Open MPI 4).
OPEN_MPI = {"OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.0.0.1:34911",
            "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1"}


@pytest.fixture
def plain_env(monkeypatch):
  """No cluster variables, whatever shell runs pytest; returns a setter for some."""
  for name in list(os.environ):
    if name.startswith(("SLURM_", "OMPI_", "PMI_", "TPU_", "MEGASCALE_", "JAX_COORDINATOR")):
      monkeypatch.delenv(name)
  monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

  def set_env(variables):
    for k, v in variables.items():
      monkeypatch.setenv(k, v)
  return set_env


@pytest.fixture
def joins(monkeypatch):
  """Records jax.distributed.initialize calls instead of joining; leaves jax.config alone."""
  calls = []
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setattr(jax.config, "update", lambda *a, **kw: None)
  return calls


def test_a_plain_machine_is_no_cluster_and_asks_no_network(plain_env):
  start = time.monotonic()
  assert cluster.detect() is None
  # The Cloud TPU detectors would ask a metadata server; off a TPU VM JAX skips them.
  assert time.monotonic() - start < 5


def test_jax_detects_a_slurm_job_step_and_open_mpi(plain_env):
  plain_env(SLURM_STEP)
  assert cluster.detect() == cluster.Cluster("slurm", "SlurmCluster", 2)
  for name in SLURM_STEP:
    os.environ.pop(name)
  plain_env(OPEN_MPI)
  assert cluster.detect() == cluster.Cluster("ompi", "OmpiCluster", 4)


def test_a_batch_script_outside_srun_is_not_a_multi_process_step(plain_env, joins):
  """sbatch --ntasks=2 sets SLURM_NTASKS=2 for the batch shell too, but only `srun` starts the
  tasks; a python run straight from the script must not wait for a second process."""
  plain_env({k: v for k, v in SLURM_STEP.items() if k != "SLURM_STEP_NODELIST"})
  assert cluster.detect() is None
  assert initialize_distributed() is False and not joins


def test_auto_joins_a_detected_cluster_of_several_processes_only(plain_env, joins):
  plain_env(SLURM_STEP)
  assert initialize_distributed(distributed="auto") is True
  assert joins[0]["cluster_detection_method"] == "slurm"
  assert "coordinator_address" not in joins[0]  # JAX's SlurmCluster works it out
  plain_env({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"})
  assert initialize_distributed(distributed="auto") is False and len(joins) == 1


def test_off_ignores_the_cluster_and_on_insists(plain_env, joins):
  plain_env(OPEN_MPI)
  assert initialize_distributed(distributed="off") is False and not joins
  with pytest.raises(ConfigError, match="--distributed=off runs one process"):
    initialize_distributed("10.0.0.1:1234", 2, 0, distributed="off")
  assert initialize_distributed(distributed="on") is True
  assert joins[-1]["cluster_detection_method"] == "ompi"
  plain_env({"OMPI_COMM_WORLD_SIZE": "1"})
  assert initialize_distributed(distributed="on") is True  # on: even a one-process job
  for name in OPEN_MPI:
    os.environ.pop(name)
  with pytest.raises(ConfigError, match="--distributed=on, but JAX's cluster detectors find"):
    initialize_distributed(distributed="on")
  assert initialize_distributed("10.0.0.1:1234", 2, 1, distributed="on") is True
  assert joins[-1]["coordinator_address"] == "10.0.0.1:1234"


def test_a_detector_that_does_not_answer_is_an_error_not_a_hang(monkeypatch):
  monkeypatch.setattr(cluster, "_detect_now", lambda: time.sleep(30))
  start = time.monotonic()
  with pytest.raises(RunError, match="did not answer within 1s"):
    cluster.detect(timeout_s=1)
  assert time.monotonic() - start < 5


def test_launch_with_distributed_on_and_no_cluster_is_one_line(plain_env, tmp_path):
  r = subprocess.run([sys.executable, "launch.py", "--config=configs/default.py:smoke",
                      f"--workdir={tmp_path / 'w'}", "--distributed=on"], cwd=ROOT,
                     capture_output=True, text=True, timeout=240, env=dict(os.environ))
  assert r.returncode != 0
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert lines[-1].startswith("Config error: --distributed=on, but"), r.stderr[-2000:]
  assert not (tmp_path / "w").exists()  # nothing written, nothing compiled


def test_the_private_cluster_api_this_code_reads_still_exists():
  """Fails when a JAX upgrade moves `jax._src.clusters` or the names cluster.py reads: the
  launcher would then fall back to jax.distributed.initialize()'s own detection (still working,
  but without --distributed=auto's process count); update transformer/cli/cluster.py."""
  from jax._src import clusters
  for owner, names in cluster.PRIVATE_NAMES.items():
    cls = getattr(clusters, owner)
    for name in names:
      assert hasattr(cls, name), f"jax._src.clusters.{owner}.{name} is gone"
  detectors = cluster._cluster_types()
  assert {"SlurmCluster", "OmpiCluster"} <= {d.__name__ for d in detectors}
  assert all(isinstance(d.name, str) for d in detectors)


def test_a_moved_private_api_falls_back_to_jax_own_detection(plain_env, joins, monkeypatch):
  def moved():
    raise ImportError("cannot import name 'clusters' from 'jax._src'")
  monkeypatch.setattr(cluster, "_cluster_types", moved)
  assert cluster.detect() is cluster.JAX_DETECTS
  assert initialize_distributed(distributed="auto") is True  # jax.distributed decides
  assert joins[-1].keys() == {"heartbeat_timeout_seconds", "initialization_timeout"}

  def no_cluster(**kw):
    raise ValueError("coordinator_address should be defined.")
  monkeypatch.setattr(jax.distributed, "initialize", no_cluster)
  assert initialize_distributed(distributed="auto") is False  # a plain machine: one process
  with pytest.raises(ConfigError, match="--distributed=on, but jax.distributed.initialize"):
    initialize_distributed(distributed="on")
