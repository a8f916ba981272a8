"""`--mode=export`: a trained run's checkpoint as Hugging Face GPT-2 files (hf_gpt2.py)."""

from __future__ import annotations

import os

from absl import flags

from transformer.config import ConfigError
from transformer.errors import RunError, exit_with


def export(workdir: str, export_dir: str) -> None:
  """Writes `export_dir`'s model.safetensors and config.json from `workdir` (checkpoint
  `--step`, default the latest); a run GPT-2 cannot express is refused in one line."""
  try:
    export_run(workdir, export_dir, flags.FLAGS["step"].value)
  except (ConfigError, RunError) as e:
    exit_with(e)


def export_run(workdir: str, export_dir: str, step: int | None = None,
               log=print) -> list[str]:
  """Writes `<export_dir>/model.safetensors` and `config.json` from `workdir`'s checkpoint
  `step` (default: the latest); returns the paths written. The run's config is checked first,
  so a run GPT-2 cannot express is refused before any checkpoint is read."""
  from flax.core import meta  # noqa: PLC0415 -- JAX, orbax: only when exporting
  from transformer.train.hf_gpt2 import check_exportable, write_hf_dir  # noqa: PLC0415
  from transformer.train.init_from import load_params  # noqa: PLC0415
  from transformer.workdir import run_config  # noqa: PLC0415
  config = run_config(workdir)
  check_exportable(config.model, f"The run in {workdir}")
  params, _, step = load_params(workdir, step, what="--workdir")
  written = write_hf_dir(config.model, meta.unbox(params), export_dir)
  # Not yet done (issue 32): no tokenizer is written, and the vocabulary rows are this run's
  # ids; for an hf:/gpt2: run those are the tokenizer's + 3 (rows 0-2: pad, bos, eos). The
  # printed line says so, so the export is not mistaken for a drop-in GPT-2.
  log(f"Exported step {step} of {workdir} as GPT-2 ({config.model.num_layers} layers, "
      f"d_model {config.model.d_model}, vocab {config.model.vocab_size}) to {export_dir}: "
      + ", ".join(os.path.basename(p) for p in written)
      + f"; no tokenizer written: row i is this run's id i (data.tokenizer="
      f"{config.data.tokenizer!r}; hf:/gpt2: ids are the tokenizer's + 3).")
  return written
