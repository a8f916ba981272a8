"""orbax checkpoints of the train state, the input pipeline's position and the config.

Each step directory holds three items: `state` (the `TrainState` pytree), `data` (one
tf.data iterator checkpoint per process, so input resumes exactly) and `config` (JSON).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

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
  """Keeps the last `keep` checkpoints under `<workdir>/checkpoints/<step>/`."""

  def __init__(self, directory: str, keep: int, async_save: bool = True):
    self.directory = os.path.abspath(directory)
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                             enable_async_checkpointing=async_save),
        item_names=("state", "data", "config"),
        item_handlers={"data": TfIteratorHandler()})

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def save(self, step: int, state, data_iterator, config: dict) -> None:
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=TfIteratorSave(data_iterator),
        config=ocp.args.JsonSave(config)), force=True)

  def restore(self, step: int, abstract_state, data_iterator) -> Any:
    """Restores `data_iterator` in place and returns the train state for `step`."""
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data=TfIteratorRestore(data_iterator)))
    return restored["state"]

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
