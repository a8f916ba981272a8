"""Two local processes with 2 CPU devices each (`jax.distributed` on 127.0.0.1, gloo
collectives) train, checkpoint, resume, and end with the parameters of one process with 4."""

import os
import socket
import subprocess
import sys

import jax
import numpy as np

from tests import multihost_worker as worker
from transformer.config import ParallelConfig
from transformer.train import optim
from transformer.train.checkpoint import Checkpointer
from transformer.train.parallel import Parallel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(devices):
  env = dict(os.environ)
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  env["JAX_PLATFORMS"] = "cpu"
  return env


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run(workdir, processes, devices, stop_after=None):
  port = _free_port()
  procs = []
  for pid in range(processes):
    args = [sys.executable, os.path.join(ROOT, "tests", "multihost_worker.py"),
            f"--workdir={workdir}"]
    if stop_after:
      args.append(f"--stop_after={stop_after}")
    if processes > 1:
      args += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
               f"--process_id={pid}"]
    procs.append(subprocess.Popen(args, cwd=ROOT, env=_env(devices), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True))
  outs = []
  for p in procs:
    try:
      outs.append(p.communicate(timeout=400)[0])
    finally:
      p.kill()
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out
  return outs


def _final_params(workdir, step):
  """Restores `step` onto one device of this (pytest) process."""
  config = worker.make_config()
  task = worker.make_task(config)
  par = Parallel(ParallelConfig(data=1), init_params=task.init_params,
                 tx=optim.build_optimizer(config.optim, config.train.num_steps),
                 loss_sums=task.loss_sums, eval_sums=task.eval_sums,
                 global_batch_size=config.train.batch_size, devices=jax.devices()[:1],
                 init_boxed_params=task.init_boxed_params)
  ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=10)
  state = ckpt.restore(step, par.checkpoint_target(), task.data.train_iterator)
  ckpt.close()
  return jax.device_get(state.params)


def test_two_processes_resume_and_match_one_process(tmp_path):
  multi, single = str(tmp_path / "multi"), str(tmp_path / "single")
  outs = _run(multi, processes=2, devices=2, stop_after=4)
  assert "process 1 of 2: 2 local / 4 devices" in outs[1]
  assert "Stopped at step 4" in outs[0] and "Stopped at step 4" not in outs[1]  # only 0 logs
  data_files = set(os.listdir(os.path.join(multi, "checkpoints", "4", "data")))
  assert {"process_0.index", "process_1.index"} <= data_files  # each process's input position
  outs = _run(multi, processes=2, devices=2)
  assert "Resumed from" in outs[0] and "at step 4" in outs[0]
  _run(single, processes=1, devices=4)

  a, b = _final_params(multi, 8), _final_params(single, 8)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7, err_msg=jax.tree_util.keystr(path))
