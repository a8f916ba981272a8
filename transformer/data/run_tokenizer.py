"""The tokenizer a finished run trained with, read from its config and workdir without building
its dataset (`--mode=sample`, `--mode=export`)."""

from __future__ import annotations

from transformer import paths
from transformer.config import ExperimentConfig
from transformer.data import token_file
from transformer.data.tokenizers import ByteTokenizer, build_tokenizer
from transformer.errors import ConfigError


def run_tokenizer(config: ExperimentConfig, workdir: str):
  """The tokenizer `workdir`'s run trained with, without building its dataset."""
  data = config.data
  if data.name == "token_file":  # the token file's sidecar names its tokenizer
    return token_file.load_tokenizer(data.source_dir, token_file.read_meta(data.source_dir))
  if data.tokenizer == "bytes":
    return ByteTokenizer()
  if data.tokenizer != "sentencepiece":  # hf:<tokenizer.json>, gpt2:<ranks file>
    return build_tokenizer(data.tokenizer)
  path = data.spm_model or paths.join(workdir, "tokenizer", f"spm{data.spm_vocab_size}.model")
  if not paths.exists(path):
    raise ConfigError(f"The run in {workdir} used a SentencePiece vocabulary at {path}, which "
                      "is missing.")
  return build_tokenizer("sentencepiece", paths.local_copy(path))
