"""orbax checkpoints of the train state, the input pipeline's position and the config.

Each step directory holds three items: `state` (the `TrainState` pytree), `data` (one
tf.data iterator checkpoint per process, so input resumes exactly) and `config` (JSON).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import warnings
from typing import Any, Callable, Optional

import jax
import orbax.checkpoint as ocp
import tensorflow as tf
from etils import epath


class TfIteratorHandler(ocp.CheckpointHandler):
  """Saves / restores a tf.data iterator's position; one file set per process."""

  def _prefix(self, directory: epath.Path) -> str:
    return os.fspath(directory / f"process_{jax.process_index()}")

  def save(self, directory: epath.Path, args: "TfIteratorSave"):
    tf.train.Checkpoint(iterator=args.iterator).write(self._prefix(directory))

  def restore(self, directory: epath.Path, args: "TfIteratorRestore"):
    tf.train.Checkpoint(iterator=args.iterator).read(self._prefix(directory)).assert_consumed()
    return args.iterator

  def metadata(self, directory: epath.Path):
    return None

  def finalize(self, directory: epath.Path):
    pass

  def close(self):
    pass


@ocp.args.register_with_handler(TfIteratorHandler, for_save=True)
@dataclasses.dataclass
class TfIteratorSave(ocp.args.CheckpointArgs):
  iterator: Any


@ocp.args.register_with_handler(TfIteratorHandler, for_restore=True)
@dataclasses.dataclass
class TfIteratorRestore(ocp.args.CheckpointArgs):
  iterator: Any


class Checkpointer:
  """orbax `CheckpointManager` under `<workdir>/checkpoints/<step>/`.

  Keeps the last `keep` checkpoints and, among those saved with an eval loss, the `keep_best`
  lowest. Saves are asynchronous (the arrays are copied off the devices before `save`
  returns; files are written in the background). `restore_latest` falls back to older
  checkpoints when the newest cannot be read, and moves only the unreadable ones aside.
  """

  def __init__(self, directory: str, keep: int, async_save: bool = True, keep_best: int = 0):
    self.directory = os.path.abspath(directory)
    policies = [ocp.checkpoint_managers.LatestN(n=keep)]
    if keep_best:
      policies.append(ocp.checkpoint_managers.BestN(
          get_metric_fn=lambda m: m["eval_loss"], reverse=True, n=keep_best,
          keep_checkpoints_without_metrics=False))
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            create=True, enable_async_checkpointing=async_save, cleanup_tmp_directories=True,
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies)),
        item_names=("state", "data", "config"),
        item_handlers={"data": TfIteratorHandler()})

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state, data_iterator, config: dict,
           eval_loss: Optional[float] = None) -> None:
    """Starts saving `step`; `eval_loss` (if this step was evaluated) ranks it for keep_best."""
    metrics = None if eval_loss is None else {"eval_loss": float(eval_loss)}
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=TfIteratorSave(data_iterator),
        config=ocp.args.JsonSave(config)), metrics=metrics, force=True)

  def restore(self, step: int, abstract_state, data_iterator) -> Any:
    """Restores `data_iterator` in place and returns the train state for `step`.

    `abstract_state` leaves are `jax.ShapeDtypeStruct`s; where they carry a `sharding` the
    arrays are restored straight into it, whatever the mesh the checkpoint was saved from.
    """
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data=TfIteratorRestore(data_iterator)))
    return restored["state"]

  def restore_latest(self, abstract_state, data_iterator,
                     warn: Callable[[str], None] = warnings.warn) -> tuple[Optional[int], Any]:
    """The newest checkpoint that reads back: `(step, state)`, or `(None, None)` if none exist.

    A checkpoint that fails to restore while an older one succeeds is partial or corrupt
    (same code, same config): it is moved to `<directory>.corrupt/` (never deleted) so that
    the run can save that step again. If every checkpoint fails, nothing is moved and the
    newest one's error is raised: that is a problem with this run, not with the files.
    """
    failed = []
    for step in reversed(self.all_steps()):
      try:
        state = self.restore(step, abstract_state, data_iterator)
      except Exception as e:  # noqa: BLE001 -- any read failure means "try the previous one"
        warn(f"Checkpoint {self.directory}/{step} could not be restored "
             f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
             "falling back to the previous checkpoint.")
        failed.append((step, e))
        continue
      if failed:
        self._quarantine([s for s, _ in failed], warn)
      return step, state
    if failed:
      raise failed[0][1]
    return None, None

  def _quarantine(self, bad_steps: list[int], warn: Callable[[str], None]) -> None:
    aside = self.directory + ".corrupt"
    if jax.process_index() == 0:
      os.makedirs(aside, exist_ok=True)
      for step in bad_steps:
        target = os.path.join(aside, f"{step}-{int(time.time())}")
        shutil.move(os.path.join(self.directory, str(step)), target)
        warn(f"Moved unreadable checkpoint {step} to {target}.")
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices("checkpoint_quarantine")
    self.manager.reload()

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
