"""`launch.py --mode=prepare`: the configured dataset, tokenized, as a token file.

Reads `data.name` as training does (the stdlib corpus, a folder of text files, a TFDS text
dataset; `transformer.data.pipeline`, so TensorFlow runs here), tokenizes its train and eval
splits with the configured tokenizer (a SentencePiece model trained on the train split if none
is given, kept in `<dir>/tokenizer/`), and writes `<dir>/train.bin`, `<dir>/<eval split>.bin`
and `<dir>/meta.json` (`transformer.data.token_file`). Training then reads them with
`--config.data.name=token_file --config.data.source_dir=<dir>`, without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Callable, Iterator

import numpy as np

from transformer.config import ConfigError, DataConfig
from transformer.data import token_file
from transformer.data.tokenizers import ByteTokenizer
from transformer.errors import RunError


def encode(tokenizer, raw: bytes) -> np.ndarray:
  """`[n]` ids of one document's raw text, as the pipeline's `tf_encode` gives them."""
  if isinstance(tokenizer, ByteTokenizer):  # bytes as they are, valid UTF-8 or not
    return np.frombuffer(raw, np.uint8).astype(np.int64) + tokenizer.offset
  return np.asarray(tokenizer.encode(raw.decode("utf-8", errors="replace")), np.int64)


def _texts(builder, split: str, key: str) -> Iterator[bytes]:
  import tensorflow_datasets as tfds
  for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
    yield ex[key]


def _source(cfg: DataConfig) -> dict:
  keep = ("name", "source_dir", "suffixes", "validation_percent", "data_dir", "tokenizer",
          "inputs_key", "spm_vocab_size", "spm_model")
  return {k: v for k, v in dataclasses.asdict(cfg).items() if k in keep}


def _spm_file(tokenizer, directory: str) -> str:
  """The tokenizer's file (SentencePiece model, tokenizer.json, tiktoken ranks) inside
  `directory` (copied there if it is elsewhere); its path relative to `directory`. '' for
  bytes."""
  if isinstance(tokenizer, ByteTokenizer):
    return ""
  inside = os.path.join(directory, "tokenizer", os.path.basename(tokenizer.path))
  if os.path.abspath(tokenizer.path) != os.path.abspath(inside):
    os.makedirs(os.path.dirname(inside), exist_ok=True)
    shutil.copyfile(tokenizer.path, inside)
  return os.path.relpath(inside, directory)


def prepare(cfg: DataConfig, directory: str, log: Callable[[str], None] = print) -> dict:
  """Writes the token file of `cfg`'s dataset into `directory`; returns its sidecar."""
  try:  # TensorFlow first: TFDS logs a traceback of its own when it finds none
    import tensorflow  # noqa: F401
    from transformer.data import catalog, pipeline  # TensorFlow Datasets
  except ImportError as e:  # one line, not the import's traceback
    raise RunError(f"--mode=prepare reads datasets with TensorFlow and TensorFlow Datasets, "
                   f"which cannot be imported here ({e}); install them with `pip install -e .` "
                   "(the tensorflow-cpu and tensorflow-datasets packages).") from None
  if cfg.name == "token_file":
    raise ConfigError("--mode=prepare reads a dataset and writes a token file; "
                      "--config.data.name=token_file already is one. Name the dataset to "
                      "tokenize (e.g. local_text).")
  directory = os.path.abspath(directory)
  os.makedirs(directory, exist_ok=True)
  builder = pipeline.get_builder(cfg)
  key = catalog.text_key(builder, cfg)
  tokenizer = pipeline.tokenizer_for(cfg, builder, [key], workdir=directory)
  dtype = token_file.dtype_for(tokenizer.vocab_size)
  splits = {}
  for split in dict.fromkeys(("train", pipeline.eval_split_of(builder, cfg))):
    writer = token_file.SplitWriter(directory, split, dtype, tokenizer.eos_id)
    for raw in _texts(builder, split, key):
      writer.add(encode(tokenizer, raw))
    splits[split] = writer.close()
    log(f"{split}: {splits[split]['tokens']:,} tokens from {splits[split]['documents']:,} "
        f"documents -> {writer.path} ({dtype.name})")
  kept = _spm_file(tokenizer, directory)
  kind = cfg.tokenizer.partition(":")[0]
  meta = {"dtype": dtype.name, "vocab_size": int(tokenizer.vocab_size),
          # hf / gpt2: the copy in the token file's folder, so the folder is self-contained
          "tokenizer": f"{kind}:{kept}" if kind in ("hf", "gpt2") else cfg.tokenizer,
          "spm_model": kept if cfg.tokenizer == "sentencepiece" else "",
          "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id,
          "splits": splits, "source": _source(cfg)}
  path = token_file.write_meta(directory, meta)
  log(f"Wrote {path} ({cfg.tokenizer} tokenizer, {tokenizer.vocab_size} ids). Train on it with "
      f"--config.data.name=token_file --config.data.source_dir={directory}")
  return token_file.read_meta(directory)
