"""Other projects' token files, read as they are: nanoGPT's and llm.c's `.bin` files.

  nanoGPT  `train.bin`, `val.bin`: raw little-endian ids, nothing else: uint16 by nanoGPT's
           convention (`data/openwebtext/prepare.py`), uint32 when described with
           `--dtype=uint32`. GPT-2 BPE data puts <|endoftext|> (50256) after each document;
           character data (`data/shakespeare_char`) has a `meta.pkl` ({'vocab_size', 'itos',
           'stoi'}) and no separator.
  llm.c    `<name>_train*.bin`, `<name>_val*.bin`: a header of 256 little-endian int32
           (`[0]` magic, `[1]` version, `[2]` token count), then the ids: magic 20240520 /
           version 1 = uint16 (GPT-2), magic 20240801 / version 7 = uint32 (Llama 3)
           (`dev/data/data_common.py` `write_datafile`); the header decides the dtype, and its
           count times the id size must be the body's size. Each document starts with the
           end-of-text token (`dev/data/fineweb.py`: GPT-2's 50256, Llama 3's 128000).

The dtype rule is checked against the data too: a file whose ids are not all below its
vocabulary, while the same bytes read as the other id type are, is refused in one line naming
the dtype and the fix (`other_dtype_fits`). Only that decides: uint32 ids below 65,536 read
as uint16 leave every second id 0, which valid uint16 data can do too (character data with a
newline every second character), so `foreign_meta` says that pattern (`uint32_doubt`) without
refusing it.

`transformer.data.foreign_meta` writes a `meta.json` beside them (the sidecar of
`transformer.data.token_file`), so that `--config.data.name=token_file
--config.data.source_dir=DIR` trains on them; the files themselves are never rewritten. This
module reads them (`token_file` imports it).

The sidecar's split entries carry `header_bytes` (1024 for llm.c, 0 for nanoGPT) and the
sidecar an `id_offset` of 3: the files' ids `i` are read as `i + 3`, as the `hf:` and `gpt2:`
tokenizers give them, keeping 0, 1, 2 for pad, BOS and EOS (GPT-2's id 0, "!", would otherwise
read as padding). `vocab_size` in the sidecar counts those 3 too; messages about ids give the
files' own.
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from transformer.errors import ConfigError

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
LLMC_VERSIONS = {(20240520, 1): np.dtype(np.uint16), (20240801, 7): np.dtype(np.uint32)}
# llm.c's model of each header (data_common.HEADERS_INFO): its vocabulary, and the token that
# starts each document (fineweb.py: <|endoftext|> for GPT-2, <|begin_of_text|> for Llama 3)
LLMC_MODELS = {(20240520, 1): ("gpt-2", 50257, 50256), (20240801, 7): ("llama-3", 128256, 128000)}
ID_OFFSET = 3
LAYOUTS = ("nanogpt", "llmc")
DTYPES = ("uint16", "uint32")
SUSPECT_IDS = 8192  # how many leading ids uint32_doubt looks at


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


def read_llmc_header(path: str) -> tuple[np.dtype, int, tuple[int, int]]:
  """The token dtype, count and `(magic, version)` an llm.c `.bin` file's header gives; a
  ConfigError if it is not one, or its size disagrees with the count."""
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
  body = size - HEADER_BYTES
  if body != count * dtype.itemsize:
    other = np.dtype(np.uint32 if dtype == np.uint16 else np.uint16)
    why = (f"a body of {other.name} ids under a {dtype.name} header (llm.c writes uint16 "
           "under 20240520/v1, uint32 under 20240801/v7): write the file again with "
           "llm.c's write_datafile" if count > 0 and body == count * other.itemsize
           else "truncated or not llm.c's")
    raise ConfigError(f"{path}: the header says {count} tokens of {dtype.name} ({magic}/v"
                      f"{version}), the file holds {body / dtype.itemsize:g}: {why}.")
  return dtype, count, (magic, version)


def write_llmc(path: str, ids, magic: int = 20240520, version: int = 1) -> None:
  """Writes `ids` as llm.c does (`data_common.write_datafile`): header, then the ids."""
  dtype = LLMC_VERSIONS[(magic, version)]
  ids = np.asarray(ids)
  header = np.zeros(HEADER_INTS, "<i4")
  header[:3] = magic, version, ids.size
  with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(ids.astype(dtype.newbyteorder("<")).tobytes())


def _dtype_fix(path: str, meta: dict, right: np.dtype) -> str:
  """How to have `path`'s ids read as `right` (the other of uint16 / uint32), for the file's
  layout (its sidecar's `source.layout`)."""
  source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
  if source.get("layout") == "nanogpt":
    return (f"describe the folder again with python -m transformer.data.foreign_meta "
            f"{os.path.dirname(path) or '.'} --layout=nanogpt --dtype={right.name}")
  if source.get("layout") == "llmc":
    said, header = (("20240801/v7", "20240520/v1") if right.itemsize == 2
                    else ("20240520/v1", "20240801/v7"))
    return (f"its header says {said}: write the file again with llm.c's write_datafile "
            f"({right.name} ids go under {header})")
  return (f'set "dtype": "{right.name}" (and each split\'s "tokens" to match) in its '
          "meta.json")


def other_dtype_fits(path: str, meta: dict, dtype: np.dtype, header: int, limit: int) -> str:
  """For a file `path` of `dtype` ids after `header` bytes, one of them `>= limit` (the file's
  own vocabulary): when the same bytes read as the other id type (uint16 <-> uint32) are all
  below `limit`, a clause saying so and naming the fix (`"; read as ..."`); else "". This
  decides on the ids themselves: valid data of `dtype` has no id at or above its vocabulary."""
  other = np.dtype(np.uint32 if dtype.itemsize == 2 else np.uint16).newbyteorder("<")
  body = os.path.getsize(path) - header
  if body <= 0 or body % other.itemsize:
    return ""
  if first_at_or_above(np.memmap(path, dtype=other, mode="r", offset=header), limit) >= 0:
    return ""
  return (f"; read as {other.name} every id is < {limit}: these are {other.name} ids read as "
          f"{dtype.name}; {_dtype_fix(path, meta, other)}")


def uint32_doubt(tokens: np.ndarray, path: str, meta: dict) -> str:
  """A sentence when `[n]` uint16 ids look as uint32 ids read as uint16 do: among the first
  `SUSPECT_IDS`, every second one (the high halves, little-endian) is 0 while the others
  vary; else "". Valid uint16 data can look so too (character data with a newline, id 0,
  every second character), and both readings fit its vocabulary, so this is said, not
  refused; a 1 there (uint32 ids >= 65,536) is no doubt, as no uint16 vocabulary holds them."""
  n = min(tokens.size, SUSPECT_IDS)
  if tokens.dtype.itemsize != 2 or tokens.size % 2 or n < 64:
    return ""
  head = np.asarray(tokens[:n - n % 2])
  if head[1::2].any() or np.unique(head[0::2]).size <= 4:
    return ""
  return (f"every second of the first {head.size} ids in {path} is 0, as uint32 ids read as "
          f"uint16 would be: if the files hold uint32 ids, "
          f"{_dtype_fix(path, meta, np.dtype(np.uint32))}.")


def first_at_or_above(tokens: np.ndarray, limit: int) -> int:
  """The position of the first id `>= limit` in `[n]` ids (-1: none), a slice at a time."""
  step = 1 << 22
  for start in range(0, tokens.size, step):
    hits = np.flatnonzero(np.asarray(tokens[start:start + step]) >= limit)
    if hits.size:
      return start + int(hits[0])
  return -1


class IdsTokenizer:
  """No text: ids only (a foreign token file given without its tokenizer). `byte_lengths` is
  None, so no bits per byte; `decode` writes the file's own ids, space-separated, and
  `encode` reads them back (the prompts of samples and `--mode=sample`)."""

  pad_id, bos_id, eos_id = 0, 1, 2
  byte_lengths = None

  def __init__(self, vocab_size: int, offset: int = ID_OFFSET):
    self.vocab_size, self.offset = vocab_size, offset

  def encode(self, text: str) -> list[int]:
    words, top = text.split(), self.vocab_size - self.offset
    bad = next((w for w in words if not (w.isascii() and w.isdigit() and int(w) < top)), None)
    if bad is not None:
      raise ConfigError(f"this token file has no tokenizer (tokenizer: ids in its meta.json): "
                        f"its text is its ids 0..{top - 1} written with spaces, e.g. "
                        f"'{min(464, top - 1)} {min(3290, top - 1)}', not {bad[:20]!r}; for "
                        "text, describe it again with --tokenizer=hf:<path>.")
    return [int(w) + self.offset for w in words]

  def decode(self, ids) -> str:
    return " ".join(str(int(i) - self.offset) for i in ids if int(i) >= self.offset)


class CharTokenizer(IdsTokenizer):
  """nanoGPT's character-level data: file id `i` is the character `chars[i]` (`meta.pkl`'s
  `itos`), read as `i + offset`. Each id stands for its character's UTF-8 bytes."""

  def __init__(self, chars: list[str], offset: int = ID_OFFSET):
    super().__init__(len(chars) + offset, offset)
    self.chars = list(chars)
    self._ids = {c: i + offset for i, c in enumerate(self.chars)}

  @property
  def byte_lengths(self) -> np.ndarray:
    return np.asarray([0] * self.offset + [len(c.encode("utf-8")) for c in self.chars],
                      np.int32)

  def encode(self, text: str) -> list[int]:
    missing = sorted(set(text) - self._ids.keys())
    if missing:
      raise ConfigError(f"{''.join(missing[:10])!r} is not among the {len(self.chars)} "
                        "characters of this token file (its meta.json's chars, from "
                        "meta.pkl); write the text with those characters only.")
    return [self._ids[c] for c in text]

  def decode(self, ids) -> str:
    return "".join(self.chars[int(i) - self.offset] for i in ids
                   if self.offset <= int(i) < self.vocab_size)


class _PlainUnpickler(pickle.Unpickler):
  """Reads pickles of dicts, lists, strings and numbers only: any class or function is
  refused, so a meta.pkl runs no code."""

  def find_class(self, module, name):
    raise pickle.UnpicklingError(f"it names {module}.{name}")


def read_meta_pkl(path: str) -> tuple[int, list[str] | None]:
  """nanoGPT's `meta.pkl` -> `(vocab_size, chars)`: `chars[i]` the character of id `i` from
  its `itos`, or None when it has no `itos` (a vocabulary size alone). A ConfigError if it is
  not such a pickle of plain dicts."""
  fix = f"{path} is not nanoGPT's meta.pkl of {{'vocab_size', 'itos', 'stoi'}}"
  try:
    with open(path, "rb") as f:
      meta = _PlainUnpickler(f).load()
  except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
    raise ConfigError(f"{fix} ({e}); move it away to describe the folder without it.") from None
  vocab, itos = (meta.get("vocab_size"), meta.get("itos")) if isinstance(meta, dict) else (0, 0)
  if type(vocab) is not int or vocab < 1:
    raise ConfigError(f"{fix} (vocab_size {vocab!r}); move it away to describe the folder "
                      "without it.")
  if itos is None:
    return vocab, None
  if (not isinstance(itos, dict) or set(itos) != set(range(vocab))
      or not all(isinstance(c, str) for c in itos.values())):
    raise ConfigError(f"{fix}: its itos is not {vocab} characters keyed 0..{vocab - 1}; move "
                      "it away to describe the folder without it.")
  return vocab, [itos[i] for i in range(vocab)]
