"""`--mode=export`: a trained run's checkpoint as Hugging Face GPT-2 files (hf_gpt2.py) and its
tokenizer (hf_tokenizer.py), into a folder that then holds exactly that one model: written
beside it first, then swapped in, so a failed export leaves the folder as it was."""

from __future__ import annotations

import os
import shutil
from typing import Callable

from absl import flags

from transformer.config import ConfigError
from transformer.errors import CommandLineError, RunError, exit_with
from transformer.weights.hf_gpt2 import CONFIG_FILE, WEIGHTS_FILE
from transformer.weights.hf_tokenizer import (MERGES_FILE, TOKENIZER_CONFIG, TOKENIZER_FILE,
                                              VOCAB_FILE)

# Every file an export can write (hf_gpt2.py's two, hf_tokenizer.py's tokenizer files).
EXPORT_FILES = (WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG, VOCAB_FILE,
                MERGES_FILE)


def export(workdir: str, export_dir: str) -> None:
  """Writes `export_dir`'s model.safetensors and config.json from `workdir` (checkpoint
  `--step`, default the latest), and the run's tokenizer for hf:/gpt2: runs
  (transformer/weights/hf_tokenizer.py); a run GPT-2 cannot express is refused in one line.
  `--overwrite` replaces an earlier export there (`check_export_folder`)."""
  from transformer.train import runtime
  runtime.skip_absent_tpu()  # as train: libtpu without a TPU would print its search for one
  try:
    export_run(workdir, export_dir, flags.FLAGS["step"].value,
               overwrite=flags.FLAGS["overwrite"].value)
  except (ConfigError, RunError, CommandLineError) as e:
    exit_with(e)


def check_export_folder(export_dir: str, overwrite: bool = False) -> list[str]:
  """The files of an earlier export in `export_dir` (none: missing or empty), which an export
  with `overwrite` replaces or removes. A CommandLineError (one line, nothing touched) for a
  folder holding anything an export does not write (refused even with `overwrite`: it is not
  ours to remove), or an earlier export without `overwrite`."""
  if not os.path.isdir(export_dir):
    return []
  found = sorted(os.listdir(export_dir))
  others = [f for f in found
            if f not in EXPORT_FILES or not os.path.isfile(os.path.join(export_dir, f))]
  if others:
    shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
    raise CommandLineError(f"--export_dir={export_dir} holds files an export does not write "
                           f"({shown}); give a new or empty folder (an export's folder holds "
                           "one model and nothing else).")
  if found and not overwrite:
    raise CommandLineError(f"--export_dir={export_dir} already holds an export ("
                           f"{', '.join(found)}); give a new or empty folder, or --overwrite to "
                           "replace it (its files this export does not write are removed).")
  return found


def export_run(workdir: str, export_dir: str, step: int | None = None, log=print,
               overwrite: bool = False) -> list[str]:
  """Writes `<export_dir>/model.safetensors` and `config.json` from `workdir`'s checkpoint
  `step` (default: the latest), and the tokenizer files of an hf:/gpt2: run; returns the paths
  written. The folder is checked first (`check_export_folder`), then the run's config and
  tokenizer, so a run GPT-2 cannot express, or whose tokenizer file is missing, is refused
  before any checkpoint is read. The files are written into a folder beside `export_dir`,
  which then takes its place (`write_swapped`): with `overwrite`, an earlier export's files
  this one does not write (e.g. a tokenizer beside a bytes run) are gone, and an export that
  fails (a full disk) leaves the earlier one as it was."""
  from flax.core import meta  # JAX, orbax: only when exporting
  from transformer.data.run_tokenizer import run_tokenizer
  from transformer.weights import hf_tokenizer
  from transformer.weights.hf_gpt2 import check_exportable, write_hf_dir
  from transformer.weights.init_from import load_params
  from transformer.workdir import run_config
  earlier = check_export_folder(export_dir, overwrite)
  config = run_config(workdir)
  check_exportable(config.model, f"The run in {workdir}")
  tokenizer = run_tokenizer(config, workdir)  # a missing tokenizer file: one line, nothing read
  offset = hf_tokenizer.id_offset(tokenizer)
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ConfigError(f"The run in {workdir} has vocab_size {config.model.vocab_size}, its "
                      f"tokenizer {tokenizer.vocab_size}; export needs the tokenizer it "
                      "trained with.")
  params, _, step = load_params(workdir, step, what="--workdir")

  def write(folder: str) -> list[str]:
    files, special = hf_tokenizer.write_tokenizer(tokenizer, folder, config.model.max_len)
    if not offset:  # our own ids (bytes, sentencepiece): 0, 1, 2 are pad, BOS, EOS there too
      special = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    return write_hf_dir(config.model, meta.unbox(params), folder, offset, special) + files
  written = write_swapped(export_dir, write)
  removed = [f for f in earlier if f not in names(written)]
  ids = (f"ids are the tokenizer's (our ids minus {offset}: our pad/BOS/EOS rows dropped)"
         if TOKENIZER_FILE in names(written) else hf_tokenizer.ids_meaning(tokenizer))
  log(f"Exported step {step} of {workdir} as GPT-2 ({config.model.num_layers} layers, "
      f"d_model {config.model.d_model}, vocab {config.model.vocab_size - offset}) to "
      f"{export_dir}: " + ", ".join(names(written)) + f"; {ids}."
      + (f" Removed the earlier export's {', '.join(removed)}." if removed else ""))
  return written


def names(written: list[str]) -> list[str]:
  """The file names of the paths `written`."""
  return [os.path.basename(p) for p in written]


def write_swapped(export_dir: str, write: Callable[[str], list[str]]) -> list[str]:
  """Calls `write(folder)` (which returns the paths it wrote) on a new folder beside
  `export_dir`, then puts that folder in `export_dir`'s place (`_swap_in`); returns the paths
  under `export_dir`. A write that fails (a full disk) removes that folder and leaves
  `export_dir` as it was, and a RunError says so in one line."""
  target = os.path.realpath(export_dir)  # a link to the folder: the folder is swapped
  staging = os.path.join(os.path.dirname(target),
                         f".{os.path.basename(target)}.export-{os.getpid()}")
  had = sorted(os.listdir(target)) if os.path.isdir(target) else []
  kept = ("the earlier export there is left as it was" if had else
          "nothing was written there")
  try:
    shutil.rmtree(staging, ignore_errors=True)  # a killed export's, with this pid
    os.makedirs(staging)
    written = write(staging)
  except (OSError, RunError) as e:
    shutil.rmtree(staging, ignore_errors=True)
    why = str(e).replace(f"--export_dir={staging}: ", "").rstrip(".")
    raise RunError(f"--export_dir={export_dir}: the export failed ({why}); {kept}.") from None
  except BaseException:  # an interrupt: nothing of this export stays behind
    shutil.rmtree(staging, ignore_errors=True)
    raise
  try:
    _swap_in(staging, target, export_dir, had)
  except OSError as e:
    shutil.rmtree(staging, ignore_errors=True)
    raise RunError(f"--export_dir={export_dir}: cannot put the new export in place ({e}); "
                   f"{kept}.") from None
  return [os.path.join(export_dir, name) for name in names(written)]


def _swap_in(staging: str, target: str, export_dir: str, had: list[str]) -> None:
  """Renames the folder `staging` to `target`; an earlier export there (files `had`) is renamed
  aside first and removed after. A folder that cannot be renamed (a mount point) gets the new
  files one by one, then loses the earlier export's others (`_move_files`)."""
  if os.path.isdir(target):
    os.chmod(staging, os.stat(target).st_mode & 0o7777)  # the folder keeps its permissions
  if not had:
    if os.path.isdir(target):
      os.rmdir(target)
    os.rename(staging, target)
    return
  aside = staging + "-earlier"
  try:
    os.rename(target, aside)
  except OSError:
    _move_files(staging, target, export_dir, had)
    return
  try:
    os.rename(staging, target)
  except OSError as e:
    os.rename(aside, target)
    shutil.rmtree(staging, ignore_errors=True)
    raise RunError(f"--export_dir={export_dir}: cannot put the new export in place ({e}); the "
                   "earlier export there is left as it was.") from None
  shutil.rmtree(aside, ignore_errors=True)


def _move_files(staging: str, target: str, export_dir: str, had: list[str]) -> None:
  """The new export's files from `staging` into `target` (each rename whole), then the earlier
  export's files it does not replace removed. A failure says which files the folder holds."""
  new = sorted(os.listdir(staging))
  moved = []
  try:
    for name in new:
      os.replace(os.path.join(staging, name), os.path.join(target, name))
      moved.append(name)
    os.rmdir(staging)
  except OSError as e:
    old = [f for f in had if f not in moved]
    raise RunError(f"--export_dir={export_dir}: cannot move the new export in ({e}); it holds "
                   f"the new {', '.join(moved) or 'nothing'} and the earlier "
                   f"{', '.join(old) or 'nothing'}; the rest of the new export is in "
                   f"{staging}.") from None
  _remove_stale(export_dir, had, new)


def _remove_stale(export_dir: str, earlier: list[str], written: list[str]) -> list[str]:
  """Removes the files of the earlier export that this one did not write; returns their
  names."""
  stale = [f for f in earlier if f not in names(written)]
  for name in stale:
    try:
      os.remove(os.path.join(export_dir, name))
    except OSError as e:
      raise RunError(f"--export_dir={export_dir}: cannot remove the earlier export's {name} "
                     f"({e}); remove it by hand: it does not belong to this export.") from None
  return stale
