"""Preemption, for real: `python launch.py` in a subprocess, stopped by SIGTERM and by kill -9.

SIGTERM must finish the step, save, release the workdir's lock and exit 0; kill -9 at a random
step loses at most the steps since the last checkpoint (its lock is taken over on resume); the
run that resumes after both ends with parameters bitwise equal to an uninterrupted run's.
"""

import os
import random
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs.default import get_config
from tests.test_train import _final_params
from transformer.config import from_config_dict
from transformer.train.loop import train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 14


def _overrides(corpus):
  return {
      "data.source_dir": corpus["source_dir"], "data.data_dir": corpus["data_dir"],
      "data.validation_percent": 20, "data.seq_len": 32, "data.shuffle_buffer": 64,
      "data.eval_batches": 2, "model.d_model": 32, "model.num_heads": 4, "model.num_layers": 2,
      "model.d_ff": 64, "model.dropout_rate": 0.1, "train.batch_size": 8,
      "train.num_steps": NUM_STEPS, "train.log_every": 1, "train.eval_every": 7,
      "checkpoint.every_steps": 3, "checkpoint.keep": 10,
  }


def _launch(workdir, corpus, signal_at=None, sig=None):
  """Runs launch.py; sends `sig` once it has logged step >= `signal_at`. Returns (rc, output)."""
  args = [sys.executable, os.path.join(ROOT, "launch.py"), "--config=configs/default.py:smoke",
          f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in _overrides(corpus).items()]
  proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=dict(os.environ))
  lines = []
  try:
    for line in proc.stdout:
      lines.append(line)
      m = re.match(r"step\s+(\d+)/", line)
      if sig is not None and m and int(m.group(1)) >= signal_at:
        proc.send_signal(sig)
        sig = None
    proc.wait(timeout=600)
  finally:  # a failed or timed-out test leaves no run behind
    proc.kill()
    proc.wait()
  return proc.returncode, "".join(lines)


def _steps_on_disk(workdir):
  d = os.path.join(workdir, "checkpoints")
  return sorted(int(p) for p in os.listdir(d) if p.isdigit())


# Four training processes in a row: 111 s on an idle 2-core machine, over the suite's 300 s
# timeout when two other trainings shared the cores (a CI run on 2026-11-25). Still bounded.
@pytest.mark.timeout(900)
def test_sigterm_then_kill9_then_resume_is_the_uninterrupted_run(tiny_corpus, tmp_path):
  c = get_config("smoke")
  with c.unlocked():
    for k, v in _overrides(tiny_corpus).items():
      section, field = k.split(".")
      c[section][field] = v
  straight = str(tmp_path / "straight")
  train_and_evaluate(from_config_dict(c), straight)

  workdir = str(tmp_path / "preempted")
  rc, out = _launch(workdir, tiny_corpus, signal_at=2, sig=signal.SIGTERM)
  assert rc == 0, out
  stopped = int(re.search(r"Stopped at step (\d+) \(SIGTERM\)", out).group(1))
  assert "SIGTERM received" in out and stopped < NUM_STEPS
  assert _steps_on_disk(workdir)[-1] == stopped  # saved where it stopped
  lock = os.path.join(workdir, ".lock")
  assert not os.path.exists(lock)  # released on the way out

  kill_at = random.Random().randrange(stopped + 2, NUM_STEPS - 1)
  rc, out = _launch(workdir, tiny_corpus, signal_at=kill_at, sig=signal.SIGKILL)
  assert rc == -signal.SIGKILL, f"kill -9 at step {kill_at} did not land:\n{out}"
  assert f"Resumed from {workdir}/checkpoints at step {stopped}" in out
  assert os.path.exists(lock)  # a kill -9 leaves it (stale: its pid is gone)

  rc, out = _launch(workdir, tiny_corpus)
  assert rc == 0, out
  assert "Resumed from" in out and _steps_on_disk(workdir)[-1] == NUM_STEPS
  assert "no longer runs on this host" in out and not os.path.exists(lock)  # taken over, freed
  a, b = _final_params(straight, NUM_STEPS), _final_params(workdir, NUM_STEPS)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y, err_msg=f"{jax.tree_util.keystr(path)} "
                                  f"(killed at step {kill_at})")
