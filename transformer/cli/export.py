"""`--mode=export`: a trained run's checkpoint as Hugging Face GPT-2 files (hf_gpt2.py) and its
tokenizer (hf_tokenizer.py), into a folder that then holds exactly that one model."""

from __future__ import annotations

import os

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
  before any checkpoint is read. With `overwrite`, the files of an earlier export that this
  one does not write (e.g. a tokenizer beside a bytes run) are removed after the writes."""
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
  os.makedirs(export_dir, exist_ok=True)
  files, special = hf_tokenizer.write_tokenizer(tokenizer, export_dir, config.model.max_len)
  if not offset:  # our own ids (bytes, sentencepiece): 0, 1, 2 are pad, BOS, EOS there too
    special = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
  written = write_hf_dir(config.model, meta.unbox(params), export_dir, offset, special) + files
  removed = _remove_stale(export_dir, earlier, written)
  ids = (f"ids are the tokenizer's (our ids minus {offset}: our pad/BOS/EOS rows dropped)"
         if files else hf_tokenizer.ids_meaning(tokenizer))
  log(f"Exported step {step} of {workdir} as GPT-2 ({config.model.num_layers} layers, "
      f"d_model {config.model.d_model}, vocab {config.model.vocab_size - offset}) to "
      f"{export_dir}: " + ", ".join(os.path.basename(p) for p in written) + f"; {ids}."
      + (f" Removed the earlier export's {', '.join(removed)}." if removed else ""))
  return written


def _remove_stale(export_dir: str, earlier: list[str], written: list[str]) -> list[str]:
  """Removes the files of the earlier export that this one did not write; returns their
  names."""
  stale = [f for f in earlier if f not in {os.path.basename(p) for p in written}]
  for name in stale:
    try:
      os.remove(os.path.join(export_dir, name))
    except OSError as e:
      raise RunError(f"--export_dir={export_dir}: cannot remove the earlier export's {name} "
                     f"({e}); remove it by hand: it does not belong to this export.") from None
  return stale
