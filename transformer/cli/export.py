"""`--mode=export`: a trained run's checkpoint as Hugging Face GPT-2 files (hf_gpt2.py) and its
tokenizer (hf_tokenizer.py)."""

from __future__ import annotations

from absl import flags

from transformer.config import ConfigError
from transformer.errors import RunError, exit_with


def export(workdir: str, export_dir: str) -> None:
  """Writes `export_dir`'s model.safetensors and config.json from `workdir` (checkpoint
  `--step`, default the latest), and the run's tokenizer for hf:/gpt2: runs
  (transformer/train/hf_tokenizer.py); a run GPT-2 cannot express is refused in one line."""
  from transformer.train.hf_gpt2 import export_run  # noqa: PLC0415 -- JAX, orbax
  try:
    export_run(workdir, export_dir, flags.FLAGS["step"].value)
  except (ConfigError, RunError) as e:
    exit_with(e)
