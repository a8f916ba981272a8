"""The tokenizer a run trained with, read from its config and workdir without building its
dataset (`--mode=sample`, `--mode=export`), and the run's own copy of its tokenizer file.

A run whose tokenizer is a file it names (`hf:<tokenizer.json>`, `gpt2:<ranks file>`, a
SentencePiece `data.spm_model`) keeps a copy of that file in its workdir at each start
(`keep_tokenizer`: `<workdir>/tokenizer/` + `KEPT[kind]`), and its config.json records the
file's sha256 (`tokenizer_record`, in the first start's provenance record). A resume, an eval,
a sample or an export then checks the configured file and the copy against that hash (against
the copy, for a run from before the hash) and refuses in one line naming the one that changed
(`kept_tokenizer`): the weights belong to the tokenizer they trained with. A run moved without
its copy is still checked. When the configured file is gone, the copy is used, by a resume too
(`transformer.workdir.resume_config`). Runs made before the copy existed use the configured
file, as they always did. A token file's tokenizer lives in its
own folder (`transformer.data.token_file`), not here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
# config.json keeps `tokenizer_record` in the first start's provenance record
# (`transformer.provenance.KEY`, a floor above this one): `{"provenance": {"tokenizer": ...}}`.
PROVENANCE_KEY, RECORD_KEY = "provenance", "tokenizer"


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
  """The run's copy of its tokenizer file (a local path), or None to read the configured file
  (a run without a copy, or a tokenizer without a file). A one-line ConfigError naming the file
  that changed since the run trained (`recorded_sha256`: the hash config.json records, else
  the copy stands for it) and how to put it back: the weights belong to that tokenizer."""
  named = tokenizer_file(config)
  if named is None:
    return None
  flag, path, _ = named
  kept = kept_path(config, workdir)
  has_copy = paths.isfile(kept)
  copy = _sha256(_read(kept)) if has_copy else None
  configured = _sha256(read_file(path, flag)) if os.path.isfile(path) else None
  trained = recorded_sha256(workdir) or copy
  if trained is None:  # an older run without a copy: the configured file, as it always was
    return None
  if has_copy and copy != trained:
    raise ConfigError(_copy_changed(flag, path, kept, workdir, trained, copy, configured))
  if configured is not None and configured != trained:
    fix = (f"restore it from the run's copy {kept}" if has_copy else
           "put back the file it trained with (the run keeps no copy of it in tokenizer/)")
    raise ConfigError(f"{flag}: {path} changed since the run in {workdir} trained with it "
                      f"(sha256 {trained[:12]} then, {configured[:12]} now); {fix}; a new "
                      "tokenizer needs a new run.")
  return paths.local_copy(kept) if has_copy else None


def _copy_changed(flag: str, path: str, kept: str, workdir: str, trained: str, copy: str,
                  configured: Optional[str]) -> str:
  """The message for a run's copy of its tokenizer that is not the file it trained with."""
  said = (f"{flag}: the run's copy {kept} of {path} changed since the run in {workdir} "
          f"trained with it (sha256 {trained[:12]} then, {copy[:12]} now, as config.json "
          "records)")
  if configured == trained:
    return f"{said}; {path} is intact: restore the copy from it (cp {path} {kept})."
  now = "is gone" if configured is None else f"changed too ({configured[:12]})"
  return (f"{said}, and {path} {now}; put back the file the run trained with (sha256 "
          f"{trained[:12]}) at {path} and at the copy; a new tokenizer needs a new run.")


def recorded_sha256(workdir: str) -> Optional[str]:
  """The sha256 of the tokenizer file the run in `workdir` trained with, as its config.json
  records it (`tokenizer_record`, under the first start's provenance record), or None (a run
  from before the record, a tokenizer without a file, no readable config.json)."""
  try:
    saved = json.loads(paths.read_text(paths.join(workdir, "config.json")))
    digest = saved[PROVENANCE_KEY][RECORD_KEY]["sha256"]
  except (OSError, ValueError, TypeError, KeyError):  # no record: the copy is the reference
    return None
  return digest if isinstance(digest, str) else None


def tokenizer_record(config: ExperimentConfig, workdir: str) -> Optional[dict]:
  """`{"file": configured path, "sha256": hex}` of the tokenizer file the run reads (its copy
  when the configured file is gone), which config.json keeps; None without a file. Called at a
  start, after `keep_tokenizer`."""
  named = tokenizer_file(config)
  if named is None:
    return None
  flag, path, _ = named
  kept = kept_path(config, workdir)
  contents = (_read(kept) if not os.path.isfile(path) and paths.isfile(kept) else
              read_file(path, flag))
  return {"file": path, "sha256": _sha256(contents)}


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
  resume whose file changed). A resume whose configured file is gone keeps the copy it
  trained with (`transformer.workdir.resume_config`)."""
  kept = kept_path(config, workdir)
  if kept is None:
    return None
  flag, path, _ = tokenizer_file(config)
  if not os.path.isfile(path) and paths.isfile(kept):
    return kept
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
