"""The tokenizer a run trained with, read from its config and workdir without building its
dataset (`--mode=sample`, `--mode=export`), and the run's own copy of its tokenizer file.

A run whose tokenizer is a file it names (`hf:<tokenizer.json>`, `gpt2:<ranks file>`, a
SentencePiece `data.spm_model`) keeps a copy of that file in its workdir at each start
(`keep_tokenizer`: `<workdir>/tokenizer/` + `KEPT[kind]`). A resume, an eval, a sample or an
export then compares the file at the configured path with that copy, byte for byte (sha256), and
refuses in one line when it changed (`kept_tokenizer`): the weights belong to the tokenizer
they trained with. When the configured file is gone, the copy is used. Runs made before the
copy existed use the configured file, as they always did. A token file's tokenizer lives in its
own folder (`transformer.data.token_file`), not here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Optional

from transformer import paths
from transformer.config import ExperimentConfig
from transformer.data import token_file
from transformer.data.tokenizers import ByteTokenizer, build_tokenizer, read_file
from transformer.errors import ConfigError

FOLDER = "tokenizer"  # in the workdir, beside a SentencePiece model trained there
# The run's copy of its tokenizer file, by kind: `<workdir>/tokenizer/<name>`.
KEPT = {"hf": "tokenizer.json", "gpt2": "ranks.tiktoken", "sentencepiece": "spm_model.model"}


def run_tokenizer(config: ExperimentConfig, workdir: str):
  """The tokenizer `workdir`'s run trained with, without building its dataset: its kept copy
  when it has one (a configured file that changed since is refused, see `kept_tokenizer`)."""
  data = with_kept_tokenizer(config, workdir).data
  if data.name == "token_file":  # the token file's sidecar names its tokenizer
    return token_file.load_tokenizer(data.source_dir, token_file.read_meta(data.source_dir))
  if data.tokenizer == "bytes":
    return ByteTokenizer()
  if data.tokenizer != "sentencepiece":  # hf:<tokenizer.json>, gpt2:<ranks file>
    return build_tokenizer(data.tokenizer)
  path = data.spm_model or paths.join(workdir, FOLDER, f"spm{data.spm_vocab_size}.model")
  if not paths.exists(path):
    raise ConfigError(f"The run in {workdir} used a SentencePiece vocabulary at {path}, which "
                      "is missing.")
  return build_tokenizer("sentencepiece", paths.local_copy(path))


def tokenizer_file(config: ExperimentConfig) -> Optional[tuple[str, str, str]]:
  """`(flag, path, kind)` of the file the config's tokenizer reads (`flag` as the command
  line spells it), or None when it reads none of its own (bytes, a SentencePiece model trained
  in the workdir, a token file)."""
  data = config.data
  if data.name == "token_file":
    return None
  kind, colon, path = data.tokenizer.partition(":")
  if colon and kind in KEPT:
    return f"--config.data.tokenizer={data.tokenizer}", path, kind
  if data.tokenizer == "sentencepiece" and data.spm_model:
    return f"--config.data.spm_model={data.spm_model}", data.spm_model, "sentencepiece"
  return None


def kept_path(config: ExperimentConfig, workdir: str) -> Optional[str]:
  """Where the run in `workdir` keeps its copy of the config's tokenizer file (None: no file)."""
  named = tokenizer_file(config)
  return paths.join(workdir, FOLDER, KEPT[named[2]]) if named else None


def kept_tokenizer(config: ExperimentConfig, workdir: str) -> Optional[str]:
  """The run's copy of its tokenizer file (a local path), or None when it keeps none (an older
  run, or a tokenizer without a file). A one-line ConfigError when the configured file exists
  and differs from the copy: the run trained with the copy."""
  kept = kept_path(config, workdir)
  if kept is None or not paths.isfile(kept):
    return None
  flag, path, _ = tokenizer_file(config)
  if os.path.isfile(path):
    then, now = _sha256(_read(kept)), _sha256(read_file(path, flag))
    if then != now:
      raise ConfigError(
          f"{flag}: {path} changed since the run in {workdir} trained with it (sha256 "
          f"{then[:12]} then, {now[:12]} now); restore it from the run's copy {kept} (a new "
          "tokenizer needs a new run).")
  return paths.local_copy(kept)


def with_kept_tokenizer(config: ExperimentConfig, workdir: str) -> ExperimentConfig:
  """`config` reading the run's kept copy of its tokenizer file instead of the configured path
  (unchanged when the run keeps none; refused when the file changed: `kept_tokenizer`). For
  the modes that use a finished run (eval, sample, export), not for training: a resume
  compares the saved config, which names the configured path."""
  local = kept_tokenizer(config, workdir)
  if local is None:
    return config
  kind = tokenizer_file(config)[2]
  data = (dataclasses.replace(config.data, spm_model=local) if kind == "sentencepiece" else
          dataclasses.replace(config.data, tokenizer=f"{kind}:{local}"))
  return dataclasses.replace(config, data=data)


def keep_tokenizer(config: ExperimentConfig, workdir: str) -> Optional[str]:
  """Copies the config's tokenizer file into the workdir (`kept_path`) unless the copy there
  already holds the same bytes; returns the copy's path (None: the tokenizer has no file).
  Called at each start of a run, once its checks have passed (`kept_tokenizer` refused a
  resume whose file changed)."""
  kept = kept_path(config, workdir)
  if kept is None:
    return None
  flag, path, _ = tokenizer_file(config)
  contents = read_file(path, flag)
  if not paths.isfile(kept) or _read(kept) != contents:
    paths.makedirs(paths.join(workdir, FOLDER))
    paths.write_bytes(kept, contents, mode=0o644)
  return kept


def _read(path: str) -> bytes:
  with paths.open_file(path, "rb") as f:
    return f.read()


def _sha256(contents: bytes) -> str:
  return hashlib.sha256(contents).hexdigest()
