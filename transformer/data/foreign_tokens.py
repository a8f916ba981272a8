"""Other projects' token files, read as they are: nanoGPT's and llm.c's `.bin` files.

  nanoGPT  `train.bin`, `val.bin`: raw little-endian uint16 token ids, nothing else
           (`data/openwebtext/prepare.py`; GPT-2 ids, documents separated by <|endoftext|>).
  llm.c    `<name>_train*.bin`, `<name>_val*.bin`: a header of 256 little-endian int32
           (`[0]` magic, `[1]` version, `[2]` token count), then the ids: magic 20240520 /
           version 1 = uint16 (GPT-2), magic 20240801 / version 7 = uint32 (Llama 3)
           (`dev/data/data_common.py`).

`describe(...)` writes a `meta.json` beside them (the sidecar of `transformer.data.token_file`,
with the fields a user gives: vocabulary, tokenizer), so that `--config.data.name=token_file
--config.data.source_dir=DIR` trains on them; the files themselves are never rewritten. From
the shell: `python -m transformer.data.foreign_tokens DIR --layout=nanogpt --vocab_size=50257
[--tokenizer=hf:tokenizer.json]`.

The sidecar's split entries carry `header_bytes` (1024 for llm.c, 0 for nanoGPT) and the
sidecar an `id_offset` of 3: the files' ids `i` are read as `i + 3`, as the `hf:` and `gpt2:`
tokenizers give them, keeping 0, 1, 2 for pad, BOS and EOS (GPT-2's id 0, "!", would otherwise
read as padding). `vocab_size` in the sidecar counts those 3 too.
"""

from __future__ import annotations

import argparse
import os
import sys

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


def _find(directory: str, layout: str, split: str) -> str:
  """The file of `split` (train, val) in `directory`: nanoGPT's `<split>.bin`, or llm.c's one
  `*_<split>*.bin` (a run reads one file per split; give several shards as separate folders)."""
  if layout == "nanogpt":
    return f"{split}.bin"
  names = sorted(n for n in os.listdir(directory)
                 if n.endswith(".bin") and f"_{split}" in n)
  if len(names) != 1:
    raise ConfigError(f"{directory}: expected one llm.c file *_{split}*.bin, found "
                      f"{names or 'none'}; name the files with --train and --val.")
  return names[0]


def describe(directory: str, layout: str, vocab_size: int, tokenizer: str = "ids",
             train: str = "", val: str = "", eos_id: int | None = None) -> dict:
  """Writes `<directory>/meta.json` for nanoGPT or llm.c token files there; returns it.

  `vocab_size`: the files' own vocabulary (50257 for GPT-2's); `tokenizer`: `hf:<path>` or
  `gpt2:<path>` (relative to `directory` or absolute) to decode and report bits per byte, or
  `ids` when there is none (no bits per byte then). `eos_id`: the files' document separator
  (GPT-2's <|endoftext|>, 50256, by default), recorded for reference only.
  """
  from transformer.data import token_file  # noqa: PLC0415 -- it imports this module
  if layout not in LAYOUTS:
    raise ConfigError(f"--layout={layout!r}: choose {' or '.join(LAYOUTS)}.")
  if vocab_size < 1 or vocab_size > 1 << 32:
    raise ConfigError(f"--vocab_size={vocab_size}: give the files' vocabulary, e.g. 50257.")
  splits = {}
  dtype = None
  for split, name in (("train", train), ("validation", val)):
    name = name or _find(directory, layout, "train" if split == "train" else "val")
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
      raise ConfigError(f"{path} does not exist; name the file with --train / --val.")
    if layout == "llmc":
      file_dtype, count = read_llmc_header(path)
      header = HEADER_BYTES
    else:
      file_dtype, header = np.dtype(np.uint16), 0
      if os.path.getsize(path) % 2:
        raise ConfigError(f"{path} has an odd number of bytes: not uint16 token ids.")
      count = os.path.getsize(path) // 2
    if dtype not in (None, file_dtype):
      raise ConfigError(f"{directory}: the train and val files hold different id types.")
    dtype = file_dtype
    splits[split] = {"file": name, "tokens": count, "documents": None, "header_bytes": header}
  if tokenizer != "ids" and ":" in tokenizer:
    kind, _, file = tokenizer.partition(":")
    if os.path.isabs(file):
      file = os.path.relpath(file, directory)
    tokenizer = f"{kind}:{file}"
  meta = {"dtype": dtype.name, "vocab_size": int(vocab_size) + ID_OFFSET,
          "id_offset": ID_OFFSET, "tokenizer": tokenizer, "spm_model": "",
          "pad_id": 0, "bos_id": 1, "eos_id": 2, "splits": splits,
          "source": {"layout": layout,
                     "separator_id": 50256 if eos_id is None else int(eos_id)}}
  token_file.write_meta(directory, meta)
  return token_file.read_meta(directory)


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


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m transformer.data.foreign_tokens",
      description="Write meta.json beside nanoGPT or llm.c token files, so that "
                  "--config.data.name=token_file --config.data.source_dir=DIR trains on them.")
  parser.add_argument("directory")
  parser.add_argument("--layout", required=True, choices=LAYOUTS)
  parser.add_argument("--vocab_size", type=int, default=50257,
                      help="the files' vocabulary (default: GPT-2's 50257)")
  parser.add_argument("--tokenizer", default="ids",
                      help="hf:<tokenizer.json> or gpt2:<ranks file>; ids = none")
  parser.add_argument("--train", default="", help="train file name (default: found)")
  parser.add_argument("--val", default="", help="validation file name (default: found)")
  args = parser.parse_args(argv)
  try:
    meta = describe(args.directory, args.layout, args.vocab_size, args.tokenizer, args.train,
                    args.val)
  except (ConfigError, OSError) as e:
    print(f"Error: {e}", file=sys.stderr)
    return 2
  counts = ", ".join(f"{s}: {e['tokens']:,} tokens" for s, e in meta["splits"].items())
  print(f"Wrote {os.path.join(args.directory, 'meta.json')} ({counts}). Train with "
        f"--config.data.name=token_file --config.data.source_dir={args.directory}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
