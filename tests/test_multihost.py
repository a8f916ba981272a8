"""Two local processes with 2 CPU devices each (`jax.distributed` on 127.0.0.1, gloo
collectives) train, checkpoint, resume, and end with the parameters of one process with 4."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests import multihost_worker as worker
from tests.xla_flags import cpu_devices
from transformer.config import ParallelConfig
from transformer.train import optim, peaks
from transformer.train.checkpoint import Checkpointer
from transformer.train.parallel import Parallel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(devices):
  env = dict(os.environ)
  env["XLA_FLAGS"] = cpu_devices(devices)
  env["JAX_PLATFORMS"] = "cpu"
  return env


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def _workers(workdir, processes, devices, *extra):
  """Starts `processes` workers (output to files in workdir/..); kills every one on exit."""
  port = _free_port()
  procs, logs = [], []
  try:
    for pid in range(processes):
      args = [sys.executable, os.path.join(ROOT, "tests", "multihost_worker.py"),
              f"--workdir={workdir}", *extra]
      if processes > 1:
        args += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
                 f"--process_id={pid}"]
      logs.append(open(f"{workdir}.{pid}.log", "w+"))
      procs.append(subprocess.Popen(args, cwd=ROOT, env=_env(devices), stdout=logs[-1],
                                    stderr=subprocess.STDOUT, text=True))
    yield procs, logs
  finally:
    for p in procs:
      p.kill()
      p.wait()
    for f in logs:
      f.close()


def _output(log) -> str:
  log.seek(0)
  return log.read()


def _run(workdir, processes, devices, stop_after=None):
  with _workers(workdir, processes, devices,
                *([f"--stop_after={stop_after}"] if stop_after else [])) as (procs, logs):
    for p in procs:
      p.wait(timeout=400)
    outs = [_output(f) for f in logs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out
  return outs


def _final_params(workdir, step):
  """Restores `step` onto one device of this (pytest) process."""
  config = worker.make_config()
  data, task = worker.make_data_and_task(config)
  par = Parallel(ParallelConfig(data=1), init_params=task.init_params,
                 tx=optim.build_optimizer(config.optim, config.train.num_steps),
                 loss_sums=task.loss_sums, eval_sums=task.eval_sums,
                 global_batch_size=config.train.batch_size, devices=jax.devices()[:1],
                 init_boxed_params=task.init_boxed_params)
  ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=10)
  state = ckpt.restore(step, par.checkpoint_target(), data.train_iterator)
  ckpt.close()
  return jax.device_get(state.params)


# Two processes twice and one more run: 87 s on an idle 2-core machine, 188 s alone beside two
# low-priority trainings, and over the suite's 300 s when the other pytest worker shared the
# cores with them (a CI run on 2026-11-25). Still bounded.
@pytest.mark.timeout(900)
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


def test_every_process_times_the_cpu_peak_on_its_own_device(tmp_path):
  """Process 1 once timed a matmul on process 0's device, which it does not compute, and cached
  a figure of ~4e14 FLOP/s for 2 cores; both processes must time real work."""
  with _workers(str(tmp_path / "peak"), 2, 2, "--print_cpu_peak") as (procs, logs):
    for p in procs:
      p.wait(timeout=240)
    outs = [_output(f) for f in logs]
  assert [p.returncode for p in procs] == [0, 0], outs
  bound = peaks.IMPOSSIBLE_CPU_FLOPS_PER_CORE * len(os.sched_getaffinity(0))
  for out in outs:
    (flops,) = [float(line.split(":")[1]) for line in out.splitlines()
                if line.startswith("matmul FLOP/s:")]
    assert 0 < flops < bound, out[-2000:]


HEARTBEAT = 10  # seconds; the bound below allows for start-up noise on a loaded machine
STOP_BOUND = 60


def _wait_until_training(workdir, procs, timeout=240):
  start = time.time()
  while not os.path.exists(os.path.join(workdir, "metrics.jsonl")):  # step 2 was logged
    assert all(p.poll() is None for p in procs), "a worker ended before training"
    assert time.time() - start < timeout, "the workers did not start training"
    time.sleep(0.5)


def _seconds_until_exit(proc) -> float:
  start = time.time()
  proc.wait(timeout=STOP_BOUND + 30)  # a hang fails here instead of blocking the suite
  return time.time() - start


def test_killing_one_process_stops_the_other(tmp_path):
  """kill -9 of process 1: process 0 (the coordinator) notices the missing heartbeats."""
  workdir = str(tmp_path / "killed")
  with _workers(workdir, 2, 2, "--num_steps=100000",
                f"--heartbeat_timeout={HEARTBEAT}") as (procs, logs):
    _wait_until_training(workdir, procs)
    procs[1].send_signal(signal.SIGKILL)
    waited = _seconds_until_exit(procs[0])
    out = _output(logs[0])
  assert procs[0].returncode != 0, out[-3000:]
  assert waited < STOP_BOUND, f"process 0 took {waited:.0f}s to stop"
  # It says another process is gone: JAX's heartbeat check names task 1, or a collective
  # that lost its peer failed first and the launcher says so.
  assert ("stopped sending heartbeats):\n1" in out
          or "lost contact with another process" in out), out[-3000:]


def test_a_failing_process_stops_the_other(tmp_path):
  """Process 0 raises mid-run: it exits at once (no distributed shutdown barrier) and process
  1, blocked in the next collective, stops too."""
  workdir = str(tmp_path / "failed")
  with _workers(workdir, 2, 2, "--num_steps=100000", "--fail_at_step=6",
                f"--heartbeat_timeout={HEARTBEAT}") as (procs, logs):
    procs[0].wait(timeout=300)
    waited = _seconds_until_exit(procs[1])
    outs = [_output(f) for f in logs]
  assert procs[0].returncode == 1, outs[0][-3000:]
  assert "injected failure at step 6" in outs[0]
  assert "Process 0 of 2 failed" in outs[0]
  assert procs[1].returncode != 0, outs[1][-3000:]
  assert waited < STOP_BOUND, f"process 1 took {waited:.0f}s to stop"


def test_pmap_over_several_processes_is_refused_before_it_trains(tmp_path):
  """pmap's state is each process's own (orbax cannot save it: it stopped at the first
  checkpoint); a run of several processes is told to use jit when it sets up its devices,
  before its step compiles."""
  workdir = str(tmp_path / "pmap")
  with _workers(workdir, 2, 2, "--strategy=pmap") as (procs, logs):
    for p in procs:
      p.wait(timeout=300)
    outs = [_output(f) for f in logs]
  refusal = ("--config.parallel.strategy=pmap runs in one process, and this run has 2: use "
             "--config.parallel.strategy=jit")
  assert all(p.returncode != 0 for p in procs), [out[-3000:] for out in outs]
  # The first to refuse exits at once; the other may be stopped by that before it refuses.
  assert any(refusal in out for out in outs), [out[-3000:] for out in outs]
  assert not os.path.exists(os.path.join(workdir, "checkpoints"))
