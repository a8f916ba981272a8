"""`python -m transformer.data.foreign_meta DIR --layout=nanogpt|llmc --vocab_size=50257
[--tokenizer=hf:tokenizer.json]`: writes `meta.json` beside nanoGPT's or llm.c's token files
(`transformer.data.foreign_tokens` reads them), so that `--config.data.name=token_file
--config.data.source_dir=DIR` trains on them as they are."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from transformer.data import token_file
from transformer.data.foreign_tokens import (HEADER_BYTES, ID_OFFSET, LAYOUTS,
                                             read_llmc_header)
from transformer.errors import ConfigError


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


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m transformer.data.foreign_meta",
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
