"""orbax checkpoints of the train state, the input pipeline's position and the config.

Each step directory holds three items: `state` (the `TrainState` pytree), `data` (the input
position of each process, so input resumes exactly: a tf.data iterator checkpoint, or for an
iterator with `get_state` / `set_state` such as a token file's, a JSON file) and `config` (JSON).
TensorFlow is imported only to save or restore a tf.data iterator.

Faults are reported in one line each and raised as `CheckpointError` (a `RunError`: launch
prints it without a traceback); the libraries' own tracebacks and logs go to a log file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import glob
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable, Optional

import jax
import orbax.checkpoint as ocp
from etils import epath

from transformer import paths
from transformer.errors import RunError
from transformer.workdir import checkpoint_steps


class CheckpointError(RunError):
  """No checkpoint could be read, or one could not be written."""


def _rmtree(path: str) -> None:
  """Removes a folder, local or on a bucket, ignoring errors (as `shutil.rmtree` here did)."""
  if not paths.has_scheme(path):
    shutil.rmtree(path, ignore_errors=True)
    return
  try:
    paths.as_path(path).rmtree(missing_ok=True)
  except Exception:  # noqa: BLE001 -- best effort, as locally
    pass


def _move(source: str, target: str) -> None:
  """Moves a folder; on a bucket, a copy of every file then the removal of the source."""
  if not paths.has_scheme(source):
    shutil.move(source, target)
    return
  src, dst = paths.as_path(source), paths.as_path(target)
  for f in src.rglob("*"):
    if not f.is_dir():
      (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
      f.copy(dst / f.relative_to(src))
  src.rmtree()


def _root_cause(e: BaseException) -> BaseException:
  while e.__cause__ is not None:
    e = e.__cause__
  return e


def _one_line(e: BaseException, limit: int = 200) -> str:
  """`Type: first line of the message` of the innermost cause, at most `limit` characters."""
  root = _root_cause(e)
  text = f"{type(root).__name__}: {str(root).strip().splitlines()[0] if str(root).strip() else ''}"
  return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_disk_full(e: BaseException) -> bool:
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if ((isinstance(e, OSError) and e.errno == errno.ENOSPC)
        or _is_tf_resource_exhausted(e)
        or "No space left on device" in str(e)):
      return True
    e = e.__cause__ or e.__context__
  return False


def _is_tf_resource_exhausted(e: BaseException) -> bool:
  """A TensorFlow out-of-space error; only a run that imported TensorFlow can raise one."""
  tf = sys.modules.get("tensorflow")
  return tf is not None and isinstance(e, tf.errors.ResourceExhaustedError)


def _from_orbax(unraisable) -> bool:
  code = getattr(unraisable.object, "cr_code", None) or getattr(unraisable.object, "gi_code", None)
  tb = unraisable.exc_traceback
  files = [code.co_filename] if code else []
  while tb is not None:
    files.append(tb.tb_frame.f_code.co_filename)
    tb = tb.tb_next
  return any(f"{os.sep}orbax{os.sep}" in f for f in files)


def _route_orbax_unraisables(log_path: str) -> None:
  """orbax's failed reads leave coroutines whose errors Python prints ("Exception ignored
  in ...", a tensorstore spec each) whenever they are collected: send those to the log.
  Installed once; a later Checkpointer only points it at its own log."""
  if getattr(sys.unraisablehook, "orbax_log", None) is not None:
    sys.unraisablehook.orbax_log[0] = log_path
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if not _from_orbax(unraisable):
      return previous(unraisable)
    try:
      with open(hook.orbax_log[0], "a") as f:
        f.write(f"--- unraisable in {unraisable.object!r}:\n" + "".join(
            traceback.format_exception(unraisable.exc_type, unraisable.exc_value,
                                       unraisable.exc_traceback)))
    except OSError:
      pass
  hook.orbax_log = [log_path]
  sys.unraisablehook = hook


class _LibraryLogToFile(logging.Filter):
  """On the `absl` logger: orbax's records (errors with tracebacks from its save threads) go to
  a file instead of the console."""

  def __init__(self, path: str):
    super().__init__()
    self.path = path

  def filter(self, record: logging.LogRecord) -> bool:
    if f"{os.sep}orbax{os.sep}" not in record.pathname:
      return True
    try:
      with open(self.path, "a") as f:
        f.write(logging.Formatter("%(asctime)s %(levelname)s %(pathname)s:%(lineno)d "
                                  "%(message)s").format(record) + "\n")
    except OSError:  # a full disk must not turn a log line into a crash
      pass
    return False


def _has_json_state(iterator) -> bool:
  return hasattr(iterator, "get_state") and hasattr(iterator, "set_state")


class TfIteratorHandler(ocp.CheckpointHandler):
  """Saves / restores an input iterator's position; one file set per process.

  A tf.data iterator goes through `tf.train.Checkpoint` (`process_<i>.index`, ...); an iterator
  with `get_state()` / `set_state(state)` (a token file's) writes its state as
  `process_<i>.json`, without TensorFlow. (The class keeps its name: checkpoints record it.)
  """

  def _prefix(self, directory: epath.Path) -> str:
    return os.fspath(directory / f"process_{jax.process_index()}")

  def save(self, directory: epath.Path, args: "TfIteratorSave"):
    if _has_json_state(args.iterator):
      (directory / f"process_{jax.process_index()}.json").write_text(
          json.dumps(args.iterator.get_state()))
      return
    import tensorflow as tf  # the TFDS path only
    with _local_folder(directory, upload=True) as local:
      tf.train.Checkpoint(iterator=args.iterator).write(self._prefix(local))

  def restore(self, directory: epath.Path, args: "TfIteratorRestore"):
    if _has_json_state(args.iterator):
      path = directory / f"process_{jax.process_index()}.json"
      if not path.exists():
        raise FileNotFoundError(f"{path} is missing: this checkpoint's input position was not "
                                "saved by a token-file run")
      args.iterator.set_state(json.loads(path.read_text()))
      return args.iterator
    import tensorflow as tf  # the TFDS path only
    with _local_folder(directory, upload=False) as local:
      tf.train.Checkpoint(iterator=args.iterator).read(self._prefix(local)).assert_consumed()
    return args.iterator

  def metadata(self, directory: epath.Path):
    return None

  def finalize(self, directory: epath.Path):
    pass

  def close(self):
    pass


@contextlib.contextmanager
def _local_folder(directory: epath.Path, upload: bool):
  """`directory` itself when local. For a URL, a local temporary folder holding this process's
  files of it (`process_<i>.*`) and, with `upload`, copied back on exit: `tf.train.Checkpoint`
  writes through TensorFlow's own file systems, and everything else here through epath."""
  if not paths.has_scheme(os.fspath(directory)):
    yield directory
    return
  import tempfile
  with tempfile.TemporaryDirectory(prefix="transformer-iterator-") as tmp:
    local = epath.Path(tmp)
    if not upload:
      for f in directory.glob(f"process_{jax.process_index()}.*"):
        (local / f.name).write_bytes(f.read_bytes())
    yield local
    if upload:
      for f in local.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())


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

  def __init__(self, directory: str, keep: int, async_save: bool = True, keep_best: int = 0,
               log_path: Optional[str] = None):
    """`log_path`: where library errors and full tracebacks go (default:
    `<directory>/../checkpoint_errors.log`), created on the first fault."""
    self.directory = paths.absolute(directory)
    self.log_path = log_path or os.path.join(os.path.dirname(paths.local_mirror(self.directory)),
                                             "checkpoint_errors.log")
    if jax.process_count() > 1:
      self.log_path += f".process_{jax.process_index()}"
    if paths.has_scheme(self.directory):  # the log is local (stderr goes into it): its folder
      os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
    self._log_filter = _LibraryLogToFile(self.log_path)
    logging.getLogger("absl").addFilter(self._log_filter)
    _route_orbax_unraisables(self.log_path)
    self._saving: Optional[int] = None  # the step of the last save started
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
    try:
      self.manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state),
          data=TfIteratorSave(data_iterator),
          config=ocp.args.JsonSave(config)), metrics=metrics, force=True)
    except Exception as e:  # noqa: BLE001 -- includes an earlier async save failing now
      raise self._save_failed(step, e) from None
    self._saving = step

  def _save_failed(self, step: Optional[int], e: BaseException) -> CheckpointError:
    """Logs `e`, removes partial checkpoint folders, and says what is left. `step`: the save
    that failed, unless a partial folder names another (an earlier async save)."""
    removed = []
    for tmp in self._partial_folders():
      name = paths.basename(tmp)
      if name.split(".")[0].isdigit():
        step = int(name.split(".")[0])
      if jax.process_index() == 0:
        _rmtree(tmp)
        removed.append(name)
    self._log_exception(f"saving checkpoint {step}", e)
    # The failed save's coroutines are never awaited; Python would say so at exit.
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
    good = [s for s in checkpoint_steps(self.directory) if s != step]
    what = ("No space left on device" if _is_disk_full(e) else f"Error ({_one_line(e)})")
    last = (f"the last good checkpoint is {self.directory}/{good[-1]}" if good else
            "there is no earlier checkpoint")
    fix = ("Free some space (or move the workdir to a larger disk)" if _is_disk_full(e) else
           "Fix the cause")
    resume = f"resume from step {good[-1]}" if good else "start over"
    return CheckpointError(
        f"{what} while saving checkpoint {step} to {self.directory}. "
        + (f"Removed the partial {', '.join(removed)}; " if removed else "Nothing partial "
           "was left behind; ")
        + f"{last}. {fix}, then run the same command to {resume}. Full details: "
        f"{self.log_path}.")

  def _partial_folders(self) -> list[str]:
    """The folders orbax left unfinished (`<step>.orbax-checkpoint-tmp*`)."""
    pattern = "*.orbax-checkpoint-tmp*"
    if not paths.has_scheme(self.directory):
      return sorted(glob.glob(os.path.join(self.directory, pattern)))
    try:
      return sorted(os.fspath(p) for p in paths.as_path(self.directory).glob(pattern))
    except Exception:  # noqa: BLE001 -- an unreachable bucket: nothing to clean up from here
      return []

  def _log_exception(self, what: str, e: BaseException) -> None:
    try:
      with open(self.log_path, "a") as f:
        f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {what} failed:\n")
        f.write("".join(traceback.format_exception(e)))
    except OSError:
      pass

  @contextlib.contextmanager
  def _stderr_to_log(self):
    """Sends everything written to file descriptor 2 (C++ and Python alike) to the log. The
    output goes to a temporary file first and into the log only if there is some, so a run
    without a fault leaves no (empty) log."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
      held = tempfile.TemporaryFile()
    except OSError:
      os.close(saved)
      yield
      return
    os.dup2(held.fileno(), 2)
    try:
      yield
    finally:
      gc.collect()  # the failed reads' coroutines: collected (and reported) while redirected
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      with held:
        held.seek(0)
        self._append_to_log(held.read())

  def _append_to_log(self, data: bytes) -> None:
    """Appends `data` to the log, creating it: only when there is something to keep."""
    if not data:
      return
    try:
      with open(self.log_path, "ab") as f:
        f.write(data)
    except OSError:  # a full disk must not turn a log line into a crash
      pass

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
    the run can save that step again. If every checkpoint fails, nothing is moved and a
    `CheckpointError` sums up. Each failure is one `warn` line; the libraries' output while
    reading (tracebacks, tensorstore specs) and the full errors go to `log_path`.
    """
    steps = list(reversed(self.all_steps()))
    failed, found = [], (None, None)
    with self._stderr_to_log():
      for i, step in enumerate(steps):
        try:
          found = (step, self.restore(step, abstract_state, data_iterator))
          break
        except Exception as e:  # noqa: BLE001 -- any read failure means "try the previous one"
          self._log_exception(f"restoring checkpoint {step}", e)
          failed.append((step, e))
          warn(f"Checkpoint {self.directory}/{step} could not be restored ({_one_line(e)}); "
               + ("trying the previous one." if i + 1 < len(steps) else "it is the oldest."))
    if found[0] is not None:
      if failed:
        self._quarantine([s for s, _ in failed], warn)
      return found
    if failed:
      raise CheckpointError(
          f"None of the {len(failed)} checkpoint(s) in {self.directory} (steps "
          f"{', '.join(str(s) for s, _ in failed)}) could be restored; nothing was moved or "
          f"deleted (newest error: {_one_line(failed[0][1])}). Every checkpoint failing usually "
          "means the code or config differs from the run that wrote them (or the disk lost "
          "them all); run with the ones that wrote them, or move the checkpoints folder "
          f"aside to start over. Full details: {self.log_path}.")
    return None, None

  def _quarantine(self, bad_steps: list[int], warn: Callable[[str], None]) -> None:
    aside = self.directory + ".corrupt"
    if jax.process_index() == 0:
      paths.makedirs(aside)
      for step in bad_steps:
        target = paths.join(aside, f"{step}-{int(time.time())}")
        _move(paths.join(self.directory, str(step)), target)
        warn(f"Moved unreadable checkpoint {step} to {target}.")
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices("checkpoint_quarantine")
    self.manager.reload()

  def wait(self) -> None:
    try:
      self.manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 -- a background save failed
      raise self._save_failed(self._saving, e) from None

  def close(self) -> None:
    try:
      self.wait()
      self.manager.close()
    finally:
      logging.getLogger("absl").removeFilter(self._log_filter)
