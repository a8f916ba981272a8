"""`--mode=export`: a trained run's checkpoint as Hugging Face GPT-2 files (hf_gpt2.py) and its
tokenizer (hf_tokenizer.py)."""

from __future__ import annotations

import os

from absl import flags

from transformer.config import ConfigError
from transformer.errors import RunError, exit_with


def export(workdir: str, export_dir: str) -> None:
  """Writes `export_dir`'s model.safetensors and config.json from `workdir` (checkpoint
  `--step`, default the latest), and the run's tokenizer for hf:/gpt2: runs
  (transformer/weights/hf_tokenizer.py); a run GPT-2 cannot express is refused in one line."""
  try:
    export_run(workdir, export_dir, flags.FLAGS["step"].value)
  except (ConfigError, RunError) as e:
    exit_with(e)


def export_run(workdir: str, export_dir: str, step: int | None = None,
               log=print) -> list[str]:
  """Writes `<export_dir>/model.safetensors` and `config.json` from `workdir`'s checkpoint
  `step` (default: the latest), and the tokenizer files of an hf:/gpt2: run; returns the paths
  written. The run's config and tokenizer are checked first, so a run GPT-2 cannot express, or
  whose tokenizer file is missing, is refused before any checkpoint is read."""
  from flax.core import meta  # JAX, orbax: only when exporting
  from transformer.data.run_tokenizer import run_tokenizer
  from transformer.weights import hf_tokenizer
  from transformer.weights.hf_gpt2 import check_exportable, write_hf_dir
  from transformer.weights.init_from import load_params
  from transformer.workdir import run_config
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
  ids = (f"ids are the tokenizer's (our ids minus {offset}: our pad/BOS/EOS rows dropped)"
         if files else hf_tokenizer.ids_meaning(tokenizer))
  log(f"Exported step {step} of {workdir} as GPT-2 ({config.model.num_layers} layers, "
      f"d_model {config.model.d_model}, vocab {config.model.vocab_size - offset}) to "
      f"{export_dir}: " + ", ".join(os.path.basename(p) for p in written) + f"; {ids}.")
  return written
