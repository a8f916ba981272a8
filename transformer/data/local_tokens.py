"""The `local_text` corpus (default: this Python's standard library) as a byte-level token file,
written with NumPy alone: a bare accelerator host, without TensorFlow, trains on it with
`--config.data.name=token_file --config.data.source_dir=<dir>`.

It holds what `launch.py --mode=prepare` writes for `data.name=local_text` with the bytes
tokenizer: the same documents, the same train / validation split (`local_files.split_documents`),
each document's text as TFDS stores it (UTF-8, undecodable bytes replaced) plus 3 per byte, one EOS
after each. Only the order of the documents differs (file order here, TFDS's key-hash order
there); tests/test_local_tokens.py checks the rest against `--mode=prepare`.
"""

from __future__ import annotations

import os

import numpy as np

from transformer.data import token_file
from transformer.data.local_files import (document_keys, is_validation, list_source_files,
                                          split_documents, stdlib_dir)
from transformer.data.tokenizers import ByteTokenizer
from transformer.errors import ConfigError


def document_ids(text: str, offset: int) -> np.ndarray:
  """`[n]` byte ids of one document's text, UTF-8 encoded."""
  return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64) + offset


def split_files(source_dir: str, suffixes: tuple[str, ...], validation_percent: int
                ) -> list[str]:
  """The corpus files, relative paths; an error when `local_text`'s split of their documents
  leaves a split empty."""
  files = list_source_files(source_dir, suffixes)
  keys = [k for f in files for k in document_keys(source_dir, f)]
  val = sum(is_validation(k, validation_percent) for k in keys)
  if not val or val == len(keys):
    raise ConfigError(f"{len(files)} file(s) ending in {suffixes} under {source_dir!r} gave an "
                      f"empty split (train {len(keys) - val}, validation {val}); give a folder "
                      "with more files.")
  return files


def write_local_token_file(directory: str, source_dir: str = "",
                           suffixes: tuple[str, ...] = (".py",),
                           validation_percent: int = 5) -> dict:
  """Writes the corpus of `source_dir` ('' = this Python's stdlib) into `directory` as a token
  file; returns its sidecar (`token_file.read_meta`)."""
  root = source_dir or stdlib_dir()
  if not os.path.isdir(root):
    raise ConfigError(f"{root!r} is not a folder of text files.")
  tok = ByteTokenizer()
  files = split_files(root, suffixes, validation_percent)
  splits = {name: [document_ids(text, tok.offset) for _, text in
                   split_documents(root, files, validation_percent, name == "validation")]
            for name in ("train", "validation")}
  source = {"name": "local_text", "source_dir": source_dir, "resolved_dir": root,
            "suffixes": ",".join(suffixes), "validation_percent": validation_percent,
            "tokenizer": "bytes", "written_by": "transformer.data.local_tokens"}
  return token_file.write_token_file(directory, splits, vocab_size=tok.vocab_size,
                                     pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                     source=source)
