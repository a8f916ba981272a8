"""The `local_text` corpus (default: this Python's standard library) as a byte-level token file,
written with NumPy alone: a bare accelerator host, without TensorFlow, trains on it with
`--config.data.name=token_file --config.data.source_dir=<dir>`.

It holds what `launch.py --mode=prepare` writes for `data.name=local_text` with the bytes
tokenizer: the same files, the same train / validation split (`local_files.is_validation`),
each file's text as TFDS stores it (UTF-8, undecodable bytes replaced) plus 3 per byte, one EOS
after each. Only the order of the documents differs (file order here, TFDS's key-hash order
there); tests/test_local_tokens.py checks the rest against `--mode=prepare`.
"""

from __future__ import annotations

import os

import numpy as np

from transformer.data import token_file
from transformer.data.local_files import is_validation, list_source_files, stdlib_dir
from transformer.data.tokenizers import ByteTokenizer
from transformer.errors import ConfigError


def document_ids(path: str, offset: int) -> np.ndarray:
  """`[n]` byte ids of one file: its text decoded as UTF-8 with replacement, re-encoded."""
  with open(path, "rb") as f:
    raw = f.read().decode("utf-8", errors="replace").encode("utf-8")
  return np.frombuffer(raw, np.uint8).astype(np.int64) + offset


def split_files(source_dir: str, suffixes: tuple[str, ...], validation_percent: int
                ) -> dict[str, list[str]]:
  """`{"train": [...], "validation": [...]}` relative paths, as `local_text` splits them."""
  files = list_source_files(source_dir, suffixes)
  splits = {"train": [f for f in files if not is_validation(f, validation_percent)],
            "validation": [f for f in files if is_validation(f, validation_percent)]}
  if not all(splits.values()):
    raise ConfigError(f"{len(files)} file(s) ending in {suffixes} under {source_dir!r} gave an "
                      f"empty split (train {len(splits['train'])}, validation "
                      f"{len(splits['validation'])}); give a folder with more files.")
  return splits


def write_local_token_file(directory: str, source_dir: str = "",
                           suffixes: tuple[str, ...] = (".py",),
                           validation_percent: int = 5) -> dict:
  """Writes the corpus of `source_dir` ('' = this Python's stdlib) into `directory` as a token
  file; returns its sidecar (`token_file.read_meta`)."""
  root = source_dir or stdlib_dir()
  if not os.path.isdir(root):
    raise ConfigError(f"{root!r} is not a folder of text files.")
  tok = ByteTokenizer()
  splits = {name: [document_ids(os.path.join(root, f), tok.offset) for f in files]
            for name, files in split_files(root, suffixes, validation_percent).items()}
  source = {"name": "local_text", "source_dir": source_dir, "resolved_dir": root,
            "suffixes": ",".join(suffixes), "validation_percent": validation_percent,
            "tokenizer": "bytes", "written_by": "transformer.data.local_tokens"}
  return token_file.write_token_file(directory, splits, vocab_size=tok.vocab_size,
                                     pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                     source=source)
