"""`python -m transformer.data.foreign_meta DIR --layout=nanogpt|llmc [--vocab_size=N]
[--tokenizer=hf:tokenizer.json] [--dtype=uint32] [--overwrite]`: writes `meta.json` beside
nanoGPT's or llm.c's token files (`transformer.data.foreign_tokens` reads them), so that
`--config.data.name=token_file --config.data.source_dir=DIR` trains on them as they are.

The vocabulary comes from nanoGPT's `meta.pkl` (character data: its `itos` becomes the
sidecar's `chars`, so text decodes and bits per byte are reported), the tokenizer, or llm.c's
header (GPT-2: 50257, Llama 3: 128256), else `--vocab_size` must give it; one that disagrees
with another is refused. A tokenizer file outside DIR is copied to `DIR/tokenizer/`, so the
folder is self-contained, as `--mode=prepare` leaves it. Every file is checked (size, dtype,
ids below the vocabulary) before anything is written; a `meta.json` already there with another
vocabulary is kept unless `--overwrite` is given (the runs trained on it would not resume).

The sidecar records the layout the format has: `separator` `eot_after_each_document`
(nanoGPT's BPE data), `eot_before_each_document` (llm.c) or `none` (character data), and
`source.separator_id`, the file's id of that token where it is known (GPT-2's 50256, Llama 3's
128000), else null.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
from typing import Callable

import numpy as np

from transformer.data import token_file
from transformer.data.foreign_tokens import (DTYPES, HEADER_BYTES, ID_OFFSET, LAYOUTS,
                                             LLMC_MODELS, read_llmc_header, read_meta_pkl,
                                             uint32_doubt)
from transformer.errors import ConfigError

META_PKL = "meta.pkl"


def _warn(message: str) -> None:
  print(f"Warning: {message}", file=sys.stderr)


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


def _splits(directory: str, layout: str, train: str, val: str, dtype: str
            ) -> tuple[dict, np.dtype, tuple | None]:
  """`({split: sidecar entry}, the files' dtype, llm.c's (magic, version) or None)`: nanoGPT's
  dtype is `dtype` (uint16, its convention, by default), llm.c's its header's."""
  if dtype and dtype not in DTYPES:
    raise ConfigError(f"--dtype={dtype!r}: choose {' or '.join(DTYPES)}.")
  if dtype and layout == "llmc":
    raise ConfigError("--dtype: an llm.c file's header gives its dtype (20240520/v1 uint16, "
                      "20240801/v7 uint32); drop --dtype.")
  splits, kinds = {}, set()
  for split, name in (("train", train), ("validation", val)):
    name = name or _find(directory, layout, "train" if split == "train" else "val")
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
      raise ConfigError(f"{path} does not exist; name the file with --train / --val.")
    if layout == "llmc":
      file_dtype, count, key = read_llmc_header(path)
      header = HEADER_BYTES
    else:
      file_dtype, header, key = np.dtype(dtype or "uint16"), 0, None
      size = os.path.getsize(path)
      if size % file_dtype.itemsize:
        raise ConfigError(f"{path} has {size} bytes, not a whole number of {file_dtype.name} "
                          f"ids ({file_dtype.itemsize} bytes each).")
      count = size // file_dtype.itemsize
    kinds.add((file_dtype.name, key))
    splits[split] = {"file": name, "tokens": count, "documents": None, "header_bytes": header}
  if len(kinds) > 1:
    raise ConfigError(f"{directory}: the train and val files hold different id types "
                      f"({sorted(kinds, key=str)}).")
  file_dtype, key = kinds.pop()
  return splits, np.dtype(file_dtype), key


def _tokenizer_file(directory: str, tokenizer: str) -> tuple[str, str]:
  """`(kind, path)` of `--tokenizer=hf:<file>` / `gpt2:<file>` (relative to `directory` when
  the file is there, else to the working directory); `("ids", "")` for none."""
  if tokenizer == "ids":
    return "ids", ""
  kind, colon, file = tokenizer.partition(":")
  if not colon or kind not in ("hf", "gpt2") or not file:
    raise ConfigError(f"--tokenizer={tokenizer!r}: give hf:<tokenizer.json>, gpt2:<ranks "
                      "file>, or ids (none).")
  inside = os.path.join(directory, file)
  path = inside if not os.path.isabs(file) and os.path.isfile(inside) else file
  if not os.path.isfile(path):
    raise ConfigError(f"--tokenizer={tokenizer!r}: {file!r} is not a file (in {directory} or "
                      "here).")
  return kind, path


def _vocabulary(directory: str, layout: str, vocab_size: int | None, kind: str, path: str,
                llmc_key: tuple | None) -> tuple[int, list[str] | None]:
  """`(the files' vocabulary, meta.pkl's characters or None)`: from `vocab_size`, meta.pkl,
  the tokenizer and llm.c's header, refused in one line when two disagree or none gives it."""
  known, chars = [], None
  pkl = os.path.join(directory, META_PKL)
  if layout == "nanogpt" and os.path.isfile(pkl):
    pkl_vocab, chars = read_meta_pkl(pkl)
    if chars is not None and kind != "ids":
      raise ConfigError(f"{pkl} gives the files' characters, and --tokenizer={kind}:{path} "
                        "another tokenizer: drop --tokenizer, or move meta.pkl away.")
    known.append((pkl_vocab, pkl))
  if kind != "ids":
    from transformer.data.tokenizers import build_tokenizer
    tok = build_tokenizer(f"{kind}:{path}")
    known.append((tok.vocab_size - tok.offset, f"the tokenizer {path}"))
  if vocab_size is not None:
    if vocab_size < 1 or vocab_size > 1 << 32:
      raise ConfigError(f"--vocab_size={vocab_size}: give the files' vocabulary, e.g. 50257.")
    for value, where in known:
      if value != vocab_size:
        raise ConfigError(f"--vocab_size={vocab_size}, but {where} has {value} ids; give "
                          f"--vocab_size={value}, or drop it.")
    return vocab_size, chars
  if llmc_key is not None and not known:
    model, model_vocab, _ = LLMC_MODELS[llmc_key]
    known.append((model_vocab, f"the llm.c header ({model})"))
  if not known:
    raise ConfigError(f"{directory}: give the files' vocabulary with --vocab_size (50257 for "
                      "GPT-2's), or --tokenizer=hf:<tokenizer.json> to take it from there.")
  values = {v for v, _ in known}
  if len(values) > 1:
    raise ConfigError(f"{directory}: " + ", ".join(f"{w} has {v} ids" for v, w in known)
                      + "; give the files' vocabulary with --vocab_size.")
  return values.pop(), chars


def _layout(layout: str, vocab: int, chars, llmc_key, eos_id: int | None) -> tuple[str, dict]:
  """`(separator, source)`: where the format puts its document token, and that token's id in
  the files (`eos_id`, else the known one of GPT-2's / Llama 3's vocabulary, else None)."""
  source = {"layout": layout}
  if chars is not None:
    return "none", {**source, "separator_id": None, "chars_from": META_PKL}
  if layout == "llmc":
    model, model_vocab, start = LLMC_MODELS[llmc_key]
    known = start if vocab == model_vocab else None
    source["llmc_model"] = model
    separator = "eot_before_each_document"
  else:
    known = 50256 if vocab == 50257 else None
    separator = "eot_after_each_document"
  return separator, {**source, "separator_id": known if eos_id is None else int(eos_id)}


def _kept_tokenizer(directory: str, kind: str, path: str) -> tuple[str, str]:
  """`(sidecar tokenizer entry, the file to copy there or "")`: a file inside `directory` is
  named where it is; another goes to `directory/tokenizer/<its name>`, which must not hold a
  different file already."""
  if kind == "ids":
    return "ids", ""
  root = os.path.realpath(directory)
  if os.path.commonpath([root, os.path.realpath(path)]) == root:
    return f"{kind}:{os.path.relpath(os.path.realpath(path), root)}", ""
  inside = os.path.join("tokenizer", os.path.basename(path))
  target = os.path.join(directory, inside)
  if os.path.exists(target) and not (os.path.isfile(target)
                                     and filecmp.cmp(path, target, shallow=False)):
    raise ConfigError(f"{target} holds another file than --tokenizer's {path}; move it away, "
                      "or give --tokenizer that file.")
  return f"{kind}:{inside}", path


def _check_same_vocabulary(directory: str, vocab: int) -> None:
  """A ConfigError when `directory/meta.json` is there with a vocabulary other than `vocab`
  (the files' own ids): rewriting it would change the model of every run trained on the
  folder. An unreadable one is not ours to keep: it is replaced, as before."""
  path = os.path.join(directory, token_file.META_FILE)
  try:
    old = token_file.read_meta(directory)
  except ConfigError:
    return
  own = old["vocab_size"] - int(old.get("id_offset", 0))
  if own != vocab:
    raise ConfigError(f"{path} says vocab_size {own} (the files' ids), and this would write "
                      f"{vocab}: a run trained on this folder would no longer resume; keep "
                      f"the vocabulary ({own}), or pass --overwrite to rewrite it (or describe "
                      "a copy of the files in another folder).")


def describe(directory: str, layout: str, vocab_size: int | None = None,
             tokenizer: str = "ids", train: str = "", val: str = "",
             eos_id: int | None = None, dtype: str = "", overwrite: bool = False,
             warn: Callable[[str], None] = _warn) -> dict:
  """Writes `<directory>/meta.json` for nanoGPT or llm.c token files there; returns it.

  `vocab_size`: the files' own vocabulary (None: from meta.pkl, the tokenizer or llm.c's
  header); `tokenizer`: `hf:<path>` or `gpt2:<path>` to decode and report bits per byte,
  copied into the folder, or `ids` when there is none (character data's meta.pkl stands in
  for one). `eos_id`: the files' document token, recorded for reference only. `dtype`:
  nanoGPT's id type (default uint16). Nothing is written unless every file checks out; ids
  that look like uint32 read as uint16 but fit the vocabulary are said through `warn`. A
  meta.json there of another vocabulary is refused unless `overwrite` (runs trained on the
  folder would no longer resume).
  """
  if layout not in LAYOUTS:
    raise ConfigError(f"--layout={layout!r}: choose {' or '.join(LAYOUTS)}.")
  splits, file_dtype, llmc_key = _splits(directory, layout, train, val, dtype)
  kind, path = _tokenizer_file(directory, tokenizer)
  vocab, chars = _vocabulary(directory, layout, vocab_size, kind, path, llmc_key)
  if vocab > np.iinfo(file_dtype).max + 1:
    raise ConfigError(f"vocab_size {vocab} does not fit the files' {file_dtype.name} ids"
                      + (": give --dtype=uint32." if layout == "nanogpt" else "."))
  entry, copy = _kept_tokenizer(directory, kind, path)
  separator, source = _layout(layout, vocab, chars, llmc_key, eos_id)
  meta = {"dtype": file_dtype.name, "vocab_size": int(vocab) + ID_OFFSET,
          "id_offset": ID_OFFSET, "tokenizer": "chars" if chars is not None else entry,
          "spm_model": "", "pad_id": 0, "bos_id": 1, "eos_id": 2, "separator": separator,
          "splits": splits, "source": source}
  if chars is not None:
    meta["chars"] = chars
  doubts = []
  for split in splits:  # size, dtype and every id, before anything is written
    tokens = token_file.load_tokens(directory, meta, split)
    doubts.append(uint32_doubt(getattr(tokens, "tokens", tokens),
                               os.path.join(directory, splits[split]["file"]), meta))
  if not overwrite:
    _check_same_vocabulary(directory, vocab)
  if any(doubts):
    warn(next(d for d in doubts if d))
  if copy:
    os.makedirs(os.path.join(directory, "tokenizer"), exist_ok=True)
    target = os.path.join(directory, entry.partition(":")[2])
    shutil.copyfile(copy, target + ".tmp")
    os.replace(target + ".tmp", target)
  token_file.write_meta(directory, meta)
  return token_file.read_meta(directory)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m transformer.data.foreign_meta",
      description="Write meta.json beside nanoGPT or llm.c token files, so that "
                  "--config.data.name=token_file --config.data.source_dir=DIR trains on them.")
  parser.add_argument("directory")
  parser.add_argument("--layout", required=True, choices=LAYOUTS)
  parser.add_argument("--vocab_size", type=int, default=None,
                      help="the files' vocabulary (default: from meta.pkl, the tokenizer or "
                           "llm.c's header; required otherwise)")
  parser.add_argument("--tokenizer", default="ids",
                      help="hf:<tokenizer.json> or gpt2:<ranks file>, copied into the folder; "
                           "ids = none")
  parser.add_argument("--dtype", default="", choices=("",) + DTYPES,
                      help="nanoGPT's id type (default uint16, nanoGPT's own)")
  parser.add_argument("--overwrite", action="store_true",
                      help="rewrite a meta.json there of another vocabulary (runs trained on "
                           "the folder then no longer resume)")
  parser.add_argument("--train", default="", help="train file name (default: found)")
  parser.add_argument("--val", default="", help="validation file name (default: found)")
  args = parser.parse_args(argv)
  try:
    meta = describe(args.directory, args.layout, args.vocab_size, args.tokenizer, args.train,
                    args.val, dtype=args.dtype, overwrite=args.overwrite)
  except (ConfigError, OSError) as e:
    print(f"Error: {e}", file=sys.stderr)
    return 2
  counts = ", ".join(f"{s}: {e['tokens']:,} tokens" for s, e in meta["splits"].items())
  print(f"Wrote {os.path.join(args.directory, 'meta.json')} ({counts}; "
        f"{meta['vocab_size'] - ID_OFFSET} ids, {meta['dtype']}, tokenizer "
        f"{meta['tokenizer']}). Train with --config.data.name=token_file "
        f"--config.data.source_dir={args.directory}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
