"""Checkpoints: restore onto another mesh, keep last K + best, fall back from a corrupt one."""

import os

import jax
import numpy as np
import pytest
import tensorflow as tf

from tests.test_parallel import _batches, _parallel
from transformer.config import ParallelConfig
from transformer.train.checkpoint import CheckpointError, Checkpointer


def _iterator():
  return iter(tf.data.Dataset.range(1000))


def _trained(par, steps=1):
  state = par.init_state(jax.random.PRNGKey(0))
  for b in _batches(steps):
    state, _ = par.train_step(state, b, jax.random.PRNGKey(1))
  return state


def test_restore_onto_other_meshes(tmp_path):
  saver = _parallel(ParallelConfig(data=1, fsdp=8))
  state = _trained(saver)
  kernel = state.params["decoder"]["layer_0"]["feed_forward"]["wi"]["kernel"]
  assert len({str(s.index) for s in kernel.addressable_shards}) == 8  # really split in 8
  ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=2)
  it = _iterator()
  next(it), next(it)
  ckpt.save(1, saver.to_checkpoint(state), it, {"note": "fsdp=8"})
  ckpt.wait()
  saved = jax.device_get(state)

  for pcfg, devices in ((ParallelConfig(data=1), jax.devices()[:1]),
                        (ParallelConfig(data=2, tensor=4), None)):
    par = _parallel(pcfg, devices=devices)
    it = _iterator()
    step, restored = ckpt.restore_latest(par.checkpoint_target(), it)
    assert step == 1 and int(next(it)) == 2  # the input position came back too
    restored = par.from_checkpoint(restored)
    for a, b, target in zip(jax.tree.leaves(restored), jax.tree.leaves(saved),
                            jax.tree.leaves(par.state_shardings)):
      np.testing.assert_array_equal(np.asarray(a), b)  # bitwise
      assert a.sharding == target
    # ... and training continues from it.
    restored, metrics = par.train_step(restored, _batches(2)[1], jax.random.PRNGKey(1))
    assert np.isfinite(float(metrics["loss"]))
  assert par.state_shardings.params["decoder"]["layer_0"]["feed_forward"]["wi"]["kernel"].spec \
      == jax.sharding.PartitionSpec("fsdp", "tensor")
  ckpt.close()


def _small_state():
  return {"w": np.arange(6, dtype=np.float32)}


def test_keeps_last_k_and_best_by_eval_loss(tmp_path):
  ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=2, keep_best=1)
  losses = {2: 3.0, 4: 1.5, 6: 2.5, 8: 2.0}  # evaluated at even steps; best is step 4
  for step in range(1, 10):
    ckpt.save(step, _small_state(), _iterator(), {}, eval_loss=losses.get(step))
  ckpt.wait()
  assert ckpt.all_steps() == [4, 8, 9]
  ckpt.close()


def _truncate_largest_file(step_dir):
  files = [os.path.join(d, f) for d, _, fs in os.walk(step_dir) for f in fs]
  biggest = max(files, key=os.path.getsize)
  with open(biggest, "r+b") as f:
    f.truncate(os.path.getsize(biggest) // 2)


def test_a_run_without_a_fault_leaves_no_error_log(tmp_path):
  """The log appears only after a fault: neither a fresh start (nothing to restore) nor a save
  and a clean restore create it, not even empty."""
  directory = str(tmp_path / "ckpt")
  ckpt = Checkpointer(directory, keep=2)
  target = {"w": jax.ShapeDtypeStruct((1000,), np.float32)}
  assert ckpt.restore_latest(target, _iterator()) == (None, None)
  ckpt.save(1, {"w": np.ones(1000, np.float32)}, _iterator(), {})
  ckpt.wait()
  assert ckpt.restore_latest(target, _iterator())[0] == 1
  ckpt.close()
  assert not os.path.exists(ckpt.log_path), open(ckpt.log_path).read()


@pytest.mark.parametrize("damage", ["truncate", "remove_state"])
def test_corrupt_latest_falls_back_to_previous(tmp_path, damage):
  directory = str(tmp_path / "ckpt")
  ckpt = Checkpointer(directory, keep=5)
  for step in (2, 4):
    ckpt.save(step, {"w": np.full(50_000, step, np.float32)}, _iterator(), {})
  ckpt.close()
  if damage == "truncate":
    _truncate_largest_file(os.path.join(directory, "4", "state"))
  else:  # a save that died after creating the step folder
    import shutil
    shutil.rmtree(os.path.join(directory, "4", "state"))

  ckpt = Checkpointer(directory, keep=5)
  warnings = []
  target = {"w": jax.ShapeDtypeStruct((50_000,), np.float32)}
  step, state = ckpt.restore_latest(target, _iterator(), warn=warnings.append)
  assert step == 2 and (np.asarray(state["w"]) == 2).all()
  assert any("4 could not be restored" in w for w in warnings)
  assert os.path.isdir(os.path.join(directory, "2"))  # the good one is untouched
  moved = os.listdir(directory + ".corrupt")
  assert len(moved) == 1 and moved[0].startswith("4-")  # set aside, not deleted
  # The run can now save step 4 again.
  ckpt.save(4, {"w": np.full(50_000, 4, np.float32)}, _iterator(), {})
  ckpt.wait()
  assert ckpt.restore_latest(target, _iterator())[0] == 4
  ckpt.close()


def test_every_checkpoint_unreadable_is_one_summary_and_moves_nothing(tmp_path, capfd):
  directory = str(tmp_path / "ckpt")
  ckpt = Checkpointer(directory, keep=5)
  for step in (1, 2):
    ckpt.save(step, {"w": np.ones(50_000, np.float32)}, _iterator(), {})
  ckpt.wait()
  for step in (1, 2):
    _truncate_largest_file(os.path.join(directory, str(step), "state"))
  capfd.readouterr()
  warnings = []
  with pytest.raises(CheckpointError) as info:
    ckpt.restore_latest({"w": jax.ShapeDtypeStruct((50_000,), np.float32)}, _iterator(),
                        warn=warnings.append)
  assert len(warnings) == 2  # one line per checkpoint, newest first
  assert "/2 could not be restored" in warnings[0] and "trying the previous one" in warnings[0]
  assert "/1 could not be restored" in warnings[1] and "oldest" in warnings[1]
  assert all("\n" not in w for w in warnings)
  message = str(info.value)
  assert "None of the 2 checkpoint(s)" in message and "nothing was moved" in message
  assert ckpt.log_path in message
  assert ckpt.all_steps() == [1, 2] and not os.path.exists(directory + ".corrupt")
  with open(ckpt.log_path) as f:
    assert f.read().count("Traceback") >= 2  # the full errors are kept, in the log file
  assert "Traceback" not in "".join(capfd.readouterr())  # and not on the console
  ckpt.close()


def _disk_full(calls):
  """A `tf.train.Checkpoint.write` that fails as TensorFlow does on a full disk (after leaving
  a partial file behind); appends to `calls`."""

  def write(checkpoint, prefix, *args, **kwargs):
    calls.append(prefix)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with open(prefix + ".data-00000-of-00001.tempstate1", "wb") as f:
      f.write(b"\0" * 1000)
    raise tf.errors.ResourceExhaustedError(
        None, None, f"{prefix}.data-00000-of-00001.tempstate1; No space left on device "
        "[Op:SaveV2]")
  return write


@pytest.mark.parametrize("async_save", [True, False])
def test_disk_full_during_save_names_the_last_good_checkpoint(tmp_path, monkeypatch, capfd,
                                                               async_save):
  directory = str(tmp_path / "ckpt")
  ckpt = Checkpointer(directory, keep=5, async_save=async_save)
  ckpt.save(1, {"w": np.full(1000, 1.0, np.float32)}, _iterator(), {})
  ckpt.wait()
  calls = []
  monkeypatch.setattr(tf.train.Checkpoint, "write", _disk_full(calls))
  capfd.readouterr()
  with pytest.raises(CheckpointError) as info:
    ckpt.save(2, {"w": np.full(1000, 2.0, np.float32)}, _iterator(), {})
    ckpt.wait()
  assert len(calls) == 1
  message = str(info.value)
  assert message.startswith("No space left on device while saving checkpoint 2")
  assert f"the last good checkpoint is {directory}/1" in message and "resume from step 1" in message
  assert "Removed the partial 2.orbax-checkpoint-tmp" in message
  assert [p for p in os.listdir(directory) if "tmp" in p] == []  # no partial folder left
  assert "Traceback" not in "".join(capfd.readouterr())
  monkeypatch.undo()
  ckpt.close()
  # The good checkpoint is intact and restores.
  step, state = Checkpointer(directory, keep=5).restore_latest(
      {"w": jax.ShapeDtypeStruct((1000,), np.float32)}, _iterator())
  assert step == 1 and (np.asarray(state["w"]) == 1.0).all()


def test_orbax_unraisable_errors_go_to_the_log_file(tmp_path, monkeypatch):
  """What orbax's abandoned reads print when collected ("Exception ignored in <coroutine>",
  a tensorstore spec each) lands in the log file; other unraisables reach the previous hook."""
  import sys
  import types
  reached = []
  monkeypatch.setattr(sys, "unraisablehook", reached.append)
  ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=1)
  namespace = {}
  exec(compile("async def _read_array_index_and_device_put():\n  pass\n",
               os.path.join(os.sep, "site-packages", "orbax", "serialization.py"), "exec"),
       namespace)
  coroutine = namespace["_read_array_index_and_device_put"]()
  error = ValueError("OUT_OF_RANGE: tensorstore spec ...")
  sys.unraisablehook(types.SimpleNamespace(object=coroutine, exc_type=ValueError,
                                           exc_value=error, exc_traceback=None, err_msg=None))
  coroutine.close()
  other = types.SimpleNamespace(object=None, exc_type=ValueError,
                                exc_value=ValueError("not from orbax"), exc_traceback=None,
                                err_msg=None)
  sys.unraisablehook(other)
  assert reached == [other]
  with open(ckpt.log_path) as f:
    assert "OUT_OF_RANGE" in f.read()
  ckpt.close()
