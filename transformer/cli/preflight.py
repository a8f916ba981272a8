"""Checks that need this machine rather than the config's values alone (a writable workdir,
files the config names, the devices): run by `launch.py` before any data is read, anything
is compiled or `config.json` is written, so a refused run leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from typing import Optional

from transformer import paths, user_files
from transformer.config import ConfigError, ExperimentConfig
from transformer.errors import RunError


def check_workdir(workdir: str) -> None:
  """Creates `workdir` if needed and makes sure files can be written in it. A URL
  (`gs://...`) gets a write and removal of a probe file, bounded in time
  (`paths.probe_write`)."""
  if paths.has_scheme(workdir):
    paths.probe_write(workdir)
    return
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise RunError(f"--workdir={workdir!r} cannot be used: {e.strerror or e} "
                   f"({type(e).__name__}). Pass a --workdir in a directory you can write "
                   "to.") from None


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
  if config.data.name in ("local_text", "stdlib_package") and src and not os.path.isdir(src):
    raise ConfigError(f"--config.data.source_dir={src!r} is not a folder; point it at a folder "
                      "of text files, or set it to '' for this Python's standard library.")
  spm = config.data.spm_model
  if config.data.tokenizer == "sentencepiece" and spm and not os.path.isfile(spm):
    raise ConfigError(f"--config.data.spm_model={spm!r}: no such file. Point it at a "
                      "SentencePiece .model file, or set it to '' to train one into the workdir.")


def check_devices(config: ExperimentConfig) -> None:
  """The attention implementation runs here, and the batch splits over the devices."""
  import jax  # noqa: PLC0415 -- after distributed initialization
  from transformer.model.attention import check_implementation  # noqa: PLC0415
  from transformer.train.parallel import check_batch_split  # noqa: PLC0415
  try:
    check_implementation(config.model.attention_impl, config.model.dtype)
  except ValueError as e:
    raise ConfigError(f"--config.model.{e}") from None
  check_batch_split(config.parallel, config.train.batch_size, config.train.micro_batches,
                    jax.device_count(), jax.process_count())


def check_before_run(config: ExperimentConfig, workdir: Optional[str]) -> None:
  """All of the above; `workdir` None for modes that write none (bench)."""
  check_files(config)
  check_devices(config)
  if workdir is not None:
    check_workdir(workdir)
    check_saved_config(workdir)
