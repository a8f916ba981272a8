"""Checks that need this machine rather than the config's values alone (a writable workdir,
files the config names, the devices) and the workdir's lock: run by `launch.py` before any data
is read, anything is compiled or `config.json` is written, so a refused run leaves nothing
behind."""

from __future__ import annotations

import os
import tempfile
from typing import Optional

from transformer import datasets, paths, user_files, workdir_lock
from transformer.config import ConfigError, ExperimentConfig
from transformer.data import local_files
from transformer.errors import RunError
from transformer.workdir import resume_config


def check_workdir(workdir: str) -> None:
  """Creates `workdir` if needed and makes sure files can be written in it. A URL
  (`gs://...`) is left alone: launch.py's write check (`check_writable`, the first thing it
  does) has already written and removed a probe file there, and a second round trip to the
  bucket would only add its latency."""
  if paths.has_scheme(workdir):
    return
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise _unusable(workdir, e) from None


def check_writable(path: str, flag: str, mode: str, what: str) -> None:
  """`--mode=mode` will write `what` into the folder `path` (created if missing): a file can be
  created and removed there, or in its nearest existing parent when it does not exist yet, so
  the probe leaves nothing behind. A URL gets `paths.probe_write` (bounded in time). A one-line
  RunError naming `flag` otherwise: run before anything is read or compiled."""
  if paths.has_scheme(path):
    paths.probe_write(path, flag=flag)
    return
  where = os.path.abspath(path)
  while not os.path.exists(where) and os.path.dirname(where) != where:
    where = os.path.dirname(where)
  try:
    if not os.path.isdir(where):
      raise NotADirectoryError(20, "Not a directory", where)
    with tempfile.TemporaryFile(dir=where):
      pass
  except OSError as e:
    place = "" if where == os.path.abspath(path) else f" (its parent {where})"
    raise RunError(f"{flag}={path!r}{place} cannot be written: {e.strerror or e} "
                   f"({type(e).__name__}); --mode={mode} writes {what} there. Give a folder "
                   "you can write to.") from None


def _unusable(workdir: str, e: OSError) -> RunError:
  return RunError(f"--workdir={workdir!r} cannot be used: {e.strerror or e} "
                  f"({type(e).__name__}). Pass a --workdir in a directory you can write to.")


def lock_workdir(workdir: str) -> Optional[workdir_lock.WorkdirLock]:
  """Process 0 takes the workdir's lock (`transformer/workdir_lock.py`), creating the folder if
  needed but writing nothing else; the other processes do not touch it. All processes then
  agree (a collective) on whether it was taken, so if process 0 is refused every process stops
  at once, not at the heartbeat timeout. Returns the lock on process 0, else None."""
  import jax  # after distributed initialization
  from transformer.train.parallel import on_any_process  # as jax
  lock, error = None, None
  if jax.process_index() == 0:
    try:
      if not workdir_lock.is_remote(workdir):
        os.makedirs(workdir, exist_ok=True)
      lock = workdir_lock.acquire(workdir)
    except OSError as e:
      error = _unusable(workdir, e)
    except RunError as e:
      error = e
  if on_any_process(error is not None) and error is None:
    raise RunError(f"process 0 could not take the lock of workdir {workdir}; its log says "
                   "why.")
  if error is not None:
    raise error
  return lock


def check_saved_config(workdir: str) -> None:
  """A workdir holding a run (a checkpoint) has a `config.json` that reads as a JSON object,
  so that comparing it with this command's config cannot fail on the file itself. Without a
  checkpoint the file is simply replaced, whatever it holds."""
  path = paths.join(workdir, "config.json")
  checkpoints = paths.join(workdir, "checkpoints")
  has_run = paths.isdir(checkpoints) and any(d.isdigit() for d in paths.listdir(checkpoints))
  if has_run and paths.exists(path):
    user_files.read_json_object(path, user_files.SAVED_CONFIG, user_files.SAVED_CONFIG_FIX)


def check_files(config: ExperimentConfig) -> None:
  """Files and folders the config names exist."""
  src = config.data.source_dir
  ours = datasets.lookup(config.data.name)
  if ours and ours.identity == "local_files" and local_files.missing_message(src):
    raise ConfigError(local_files.missing_message(src))  # a prose corpus: apt-get install ...
  if ours and ours.identity == "local_files" and src and not os.path.isdir(src):
    raise ConfigError(f"--config.data.source_dir={src!r} is not a folder; point it at a folder "
                      "of text files, or set it to '' for this Python's standard library.")
  spm = config.data.spm_model
  if config.data.tokenizer == "sentencepiece" and spm and not os.path.isfile(spm):
    raise ConfigError(f"--config.data.spm_model={spm!r}: no such file. Point it at a "
                      "SentencePiece .model file, or set it to '' to train one into the workdir.")
  kind, colon, file = config.data.tokenizer.partition(":")
  if colon and (not os.path.isfile(file) or not os.access(file, os.R_OK)):  # hf:, gpt2:
    what = "is not a file" if not os.path.isfile(file) else "cannot be read"
    raise ConfigError(f"--config.data.tokenizer={config.data.tokenizer!r}: {file!r} {what}; "
                      f"give the path of a "
                      f"{'tokenizer.json' if kind == 'hf' else 'tiktoken ranks file'}.")
  init_from = config.model.init_from
  if init_from.startswith("hf:"):  # its config.json against the model, before any data
    from transformer.weights.hf_gpt2 import check_importable
    check_importable(config.model, init_from[len("hf:"):])


def check_devices(config: ExperimentConfig) -> None:
  """The attention implementation runs here, and the batch splits over the devices."""
  import jax  # after distributed initialization
  from transformer.model.attention import check_implementation
  from transformer.train.parallel import check_batch_split
  try:
    check_implementation(config.model.attention_impl, config.model.dtype)
  except ValueError as e:
    raise ConfigError(f"--config.model.{e}") from None
  check_batch_split(config.parallel, config.train.batch_size, config.train.micro_batches,
                    jax.device_count(), jax.process_count())


def check_before_run(config: ExperimentConfig, workdir: Optional[str]
                     ) -> Optional[workdir_lock.WorkdirLock]:
  """All of the above; `workdir` None for modes that write none (bench). The workdir's lock
  is taken after the checks that write nothing and before those that write there, so a run
  refused by another's lock leaves the workdir as it was. Returns the lock (None without a
  workdir, and on processes other than 0): the caller releases it when the run ends. A resume
  whose tokenizer file is gone is checked with the run's copy of it (`resume_config`)."""
  check_files(config if workdir is None else resume_config(config, workdir))
  check_devices(config)
  from transformer.train.wandb_writer import check_available
  check_available(config.train.wandb_project)
  if workdir is None:
    return None
  lock = lock_workdir(workdir)
  try:
    check_workdir(workdir)
    check_saved_config(workdir)
  except BaseException:
    if lock is not None:
      lock.release()
    raise
  return lock
