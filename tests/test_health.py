"""The training-health guard: a non-finite loss or gradient stops the run (or, with
`train.nonfinite=skip`, skips that update), and nothing non-finite is ever saved."""

import dataclasses
import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.test_train import _tiny_config
from transformer.config import CheckpointConfig, ConfigError, OptimConfig, TrainConfig
from transformer import kinds
from transformer.train import optim, steps
from transformer.train.health import HealthGuard, NonFiniteError
from transformer.train.loop import train_and_evaluate
from transformer.train.state import create_state


def _quadratic_step(skip):
  """A train step on loss = sum(weights * (bias - 1)^2) (a bias: no weight decay), finite
  unless the weights are not."""
  tx = optim.build_optimizer(OptimConfig(learning_rate=0.1, warmup_steps=0), 10)

  def loss_sums(params, batch, rng):
    del rng
    return jax.numpy.sum(batch["weights"] * (params["bias"] - 1.0) ** 2), jax.numpy.float32(1.0)

  state = create_state({"bias": jax.numpy.zeros(3)}, tx)
  return jax.jit(steps.make_train_step(loss_sums, tx, skip_nonfinite=skip)), state


@pytest.mark.parametrize("skip", [False, True])
def test_step_reports_finiteness_and_skip_keeps_the_old_state(skip):
  step, state = _quadratic_step(skip)
  good = {"weights": np.ones(3, np.float32)}
  bad = {"weights": np.array([1.0, np.nan, 1.0], np.float32)}
  state, metrics = step(state, good, jax.random.PRNGKey(0))
  assert bool(metrics["finite"])
  before = jax.device_get(state)
  after, metrics = step(state, bad, jax.random.PRNGKey(0))
  assert not bool(metrics["finite"]) and int(after.step) == 2  # the step counter moves on
  after = jax.device_get(after)
  for old, new in zip(jax.tree.leaves((before.params, before.opt_state)),
                      jax.tree.leaves((after.params, after.opt_state))):
    if skip:
      np.testing.assert_array_equal(old, new)  # the update was skipped, bit for bit
  assert skip == all(np.isfinite(x).all() for x in jax.tree.leaves(after.params))


def test_guard_stops_at_the_first_bad_step_or_counts_skips():
  flags = [(1, True, 3.0), (2, True, 2.5), (3, False, np.nan), (4, False, np.inf)]
  rows = [(s, {"finite": np.bool_(f), "loss": np.float32(l), "grad_norm": np.float32(1.0)})
          for s, f, l in flags]
  stop = HealthGuard("stop", log=lambda m: None)
  for s, m in rows:
    stop.record(s, m)
  with pytest.raises(NonFiniteError) as info:
    stop.check()
  assert info.value.step == 3 and info.value.last_finite == (2, 2.5, 1.0)
  assert "step 3" in str(info.value) and "Last finite step 2: loss 2.5000" in str(info.value)
  logged = []
  skip = HealthGuard("skip", log=logged.append)
  for s, m in rows:
    skip.record(s, m)
  skip.check()
  assert skip.skipped == 2 and len(logged) == 1 and "step 3" in logged[0]


def test_nonfinite_mode_is_validated():
  with pytest.raises(ConfigError, match="nonfinite"):
    TrainConfig(nonfinite="ignore")


def _poisoned_run(cfg, bad_batches):
  """The real data and task, with NaN loss weights in the training batches numbered
  `bad_batches` (1-based), as corrupt input or an overflow would give."""
  data, task = kinds.build_data_and_task(cfg)
  real, count = data.next_train_batch, [0]

  def next_train_batch():
    batch = real()
    count[0] += 1
    if count[0] in bad_batches:
      batch = dict(batch, weights=np.full_like(batch["weights"], np.nan))
    return batch
  data.next_train_batch = next_train_batch
  return {"data": data, "task": task}


def _saved(workdir, step):
  mngr = ocp.CheckpointManager(f"{workdir}/checkpoints", item_names=("state",))
  state = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  mngr.close()
  return state


def _steps_on_disk(workdir):
  return sorted(int(p) for p in os.listdir(os.path.join(workdir, "checkpoints")) if p.isdigit())


def test_a_run_stops_at_the_first_nonfinite_step_and_keeps_its_good_checkpoints(
    tiny_corpus, tmp_path):
  # Checkpoints every 2 steps, keep 2, logs every 5: a guard that only looked at log time
  # (step 10) would first save step 8, rotating out the good step 4.
  cfg = _tiny_config(tiny_corpus, num_steps=16, log_every=5, eval_every=100)
  cfg = dataclasses.replace(cfg, checkpoint=CheckpointConfig(every_steps=2, keep=2, keep_best=0))
  workdir = str(tmp_path / "w")
  with pytest.raises(NonFiniteError) as info:
    train_and_evaluate(cfg, workdir, **_poisoned_run(cfg, bad_batches=range(7, 100)))
  e = info.value
  assert e.step == 7 and e.last_finite[0] == 6
  assert e.last_checkpoint == os.path.join(workdir, "checkpoints", "6")
  assert _steps_on_disk(workdir) == [4, 6]  # nothing after the bad step, nothing rotated out
  for leaf in jax.tree.leaves(_saved(workdir, 6)):
    assert np.isfinite(np.asarray(leaf)).all()
  message = str(e)
  assert "step 7" in message and "checkpoints/6" in message and "nonfinite=skip" in message
  # The metrics end with the divergence: a report marks the run diverged, a sweep is done.
  from transformer.sweep import points as sweep
  from transformer.report import runs as report_runs
  from transformer.workdir import read_metrics
  last = read_metrics(workdir)["train"][-1]
  assert last["step"] == 7 and last["diverged"] == 1 and not np.isfinite(last["loss"])
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    written = json.loads(f.read().splitlines()[-1])
  assert list(written) == ["step", "split", "time", "loss", "grad_norm", "diverged"]
  assert sweep.is_finished(workdir, 16)
  run = report_runs.Run("w", {}, 16, workdir, read_metrics(workdir))
  report_runs.classify(run, None)
  assert run.status == "diverged" and "step 7" in run.detail


def test_skip_mode_skips_the_bad_update_and_counts_it(tiny_corpus, tmp_path):
  cfg = _tiny_config(tiny_corpus, num_steps=6, log_every=6, eval_every=100, nonfinite="skip")
  cfg = dataclasses.replace(cfg, checkpoint=CheckpointConfig(every_steps=1, keep=10, keep_best=0))
  workdir = str(tmp_path / "w")
  final = train_and_evaluate(cfg, workdir, **_poisoned_run(cfg, bad_batches={4}))
  assert np.isfinite(final["loss"])
  before, after = _saved(workdir, 3), _saved(workdir, 4)
  for a, b in zip(jax.tree.leaves((before["params"], before["opt_state"])),
                  jax.tree.leaves((after["params"], after["opt_state"]))):
    np.testing.assert_array_equal(a, b)  # step 4's update was not applied
  assert int(after["step"]) == 4
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    train_rows = [json.loads(line) for line in f if '"train"' in line]
  assert train_rows[-1]["skipped_steps"] == 1 and np.isfinite(train_rows[-1]["loss"])
