"""Other projects' token files, read as they are: nanoGPT's and llm.c's `.bin` files.

  nanoGPT  `train.bin`, `val.bin`: raw little-endian uint16 token ids, nothing else
           (`data/openwebtext/prepare.py`; GPT-2 ids, documents separated by <|endoftext|>).
  llm.c    `<name>_train*.bin`, `<name>_val*.bin`: a header of 256 little-endian int32
           (`[0]` magic, `[1]` version, `[2]` token count), then the ids: magic 20240520 /
           version 1 = uint16 (GPT-2), magic 20240801 / version 7 = uint32 (Llama 3)
           (`dev/data/data_common.py`).

`transformer.data.foreign_meta` writes a `meta.json` beside them (the sidecar of
`transformer.data.token_file`), so that `--config.data.name=token_file
--config.data.source_dir=DIR` trains on them; the files themselves are never rewritten. This
module reads them (`token_file` imports it).

The sidecar's split entries carry `header_bytes` (1024 for llm.c, 0 for nanoGPT) and the
sidecar an `id_offset` of 3: the files' ids `i` are read as `i + 3`, as the `hf:` and `gpt2:`
tokenizers give them, keeping 0, 1, 2 for pad, BOS and EOS (GPT-2's id 0, "!", would otherwise
read as padding). `vocab_size` in the sidecar counts those 3 too.
"""

from __future__ import annotations

import os

import numpy as np

from transformer.errors import ConfigError

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
LLMC_VERSIONS = {(20240520, 1): np.dtype(np.uint16), (20240801, 7): np.dtype(np.uint32)}
ID_OFFSET = 3
LAYOUTS = ("nanogpt", "llmc")


class ShiftedTokens:
  """`[tokens]` ids of a memory-mapped file seen `offset` higher: `size`, `len` and slices
  (`[a:b]` -> int32 array), which is all `token_file`'s batching reads."""

  def __init__(self, tokens: np.ndarray, offset: int):
    self.tokens, self.offset = tokens, offset
    self.size = tokens.size

  def __len__(self) -> int:
    return self.size

  def __getitem__(self, index):
    return np.asarray(self.tokens[index], np.int32) + self.offset


def shifted(tokens: np.ndarray, meta: dict):
  """`tokens` as the sidecar says to read them (`id_offset`, 0 for this project's own files)."""
  offset = int(meta.get("id_offset", 0))
  return ShiftedTokens(tokens, offset) if offset else tokens


def read_llmc_header(path: str) -> tuple[np.dtype, int]:
  """The token dtype and count an llm.c `.bin` file's header gives; a ConfigError if it is
  not one, or its size disagrees with the count."""
  size = os.path.getsize(path)
  if size < HEADER_BYTES:
    raise ConfigError(f"{path} has {size} bytes, fewer than llm.c's {HEADER_BYTES}-byte "
                      "header: not an llm.c token file (use --layout=nanogpt for raw uint16).")
  header = np.fromfile(path, "<i4", count=HEADER_INTS)
  magic, version, count = (int(v) for v in header[:3])
  dtype = LLMC_VERSIONS.get((magic, version))
  if dtype is None:
    known = ", ".join(f"{m}/v{v}" for m, v in LLMC_VERSIONS)
    raise ConfigError(f"{path}: header magic {magic}, version {version} is not an llm.c token "
                      f"file ({known}).")
  if size != HEADER_BYTES + count * dtype.itemsize:
    raise ConfigError(f"{path}: the header says {count} tokens of {dtype.name}, the file holds "
                      f"{(size - HEADER_BYTES) / dtype.itemsize:g}: truncated or not llm.c's.")
  return dtype, count


def write_llmc(path: str, ids, magic: int = 20240520, version: int = 1) -> None:
  """Writes `ids` as llm.c does (`data_common.write_datafile`): header, then the ids."""
  dtype = LLMC_VERSIONS[(magic, version)]
  ids = np.asarray(ids)
  header = np.zeros(HEADER_INTS, "<i4")
  header[:3] = magic, version, ids.size
  with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(ids.astype(dtype.newbyteorder("<")).tobytes())


class IdsTokenizer:
  """No text: ids only (a foreign token file given without its tokenizer). `byte_lengths` is
  None, so no bits per byte; `decode` writes the file's own ids."""

  pad_id, bos_id, eos_id = 0, 1, 2
  byte_lengths = None

  def __init__(self, vocab_size: int, offset: int = ID_OFFSET):
    self.vocab_size, self.offset = vocab_size, offset

  def encode(self, text: str) -> list[int]:
    raise ConfigError("this token file has no tokenizer (tokenizer: ids in its meta.json), so "
                      "text cannot be encoded; describe it again with --tokenizer=hf:<path>.")

  def decode(self, ids) -> str:
    return " ".join(str(int(i) - self.offset) for i in ids if int(i) >= self.offset)
