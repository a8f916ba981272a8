"""Token files: a language model's data as flat arrays of token ids, read by memory map.

Other projects' files without our sidecar (nanoGPT's raw `.bin`, llm.c's headered ones) are
read by `foreign_tokens.py` and described by `foreign_meta.py`: a new layout goes there.

The layout nanoGPT and llm.c use: `<dir>/<split>.bin` holds every document's token ids, each
document followed by the EOS id, as raw little-endian `uint16` (vocabularies below 65,536 ids)
or `uint32`. `<dir>/meta.json` (the sidecar) says how to read them:

  {"format": "transformer-token-file", "version": 1, "dtype": "uint16", "vocab_size": 259,
   "tokenizer": "bytes" | "sentencepiece" | "hf:tokenizer/tokenizer.json" | "gpt2:<file>"
   (hf, gpt2: the file, relative to <dir>) | "ids" | "chars" (nanoGPT / llm.c files without a
   tokenizer, or with meta.pkl's "chars": foreign_tokens.py), "spm_model": "tokenizer.model"
   (sentencepiece: the model file, in <dir>), "pad_id": 0, "bos_id": 1, "eos_id": 2,
   "separator": "eos_after_each_document" (foreign files: the layout they have),
   "splits": {"train": {"file": "train.bin", "tokens": N, "documents": D}, "validation": ...},
   "source": {what it was prepared from}}

Training rows are packed by concatenation: the stream is cut into non-overlapping chunks of
`seq_len + 1` tokens (the tail that fills no chunk is dropped), as `data.packing=concat` does
for TFDS data. Each epoch visits the chunks in a permutation drawn from `(seed, epoch)`; global
batch `s` is the chunks `s * batch_size ... (s + 1) * batch_size - 1` of its epoch's
permutation (the last incomplete batch of an epoch is dropped), and process `p` of `P` reads
its rows `p * batch_size / P ...` of it. The order thus depends on the seed and the global
batch size only, and the iterator's whole state is the number of batches taken
(`TokenIterator.get_state`), saved with each checkpoint as JSON.

This module imports neither TensorFlow nor JAX (the process index and count are passed in);
`transformer.data.prepare` writes token files from the datasets the pipeline reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator, Optional

import numpy as np

from transformer import paths
from transformer.data import foreign_tokens
from transformer.errors import ConfigError

FORMAT = "transformer-token-file"
VERSION = 1
META_FILE = "meta.json"
SEPARATOR = "eos_after_each_document"


def dtype_for(vocab_size: int) -> np.dtype:
  """`uint16` when every id fits (vocab_size <= 65,536), else `uint32`."""
  return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


# ----------------------------------------------------------------------------- writing


class SplitWriter:
  """Appends documents (`[n]` int ids, without the EOS) to `<dir>/<split>.bin`, each followed
  by `eos_id`; written under a temporary name and moved in place by `close()`."""

  def __init__(self, directory: str, split: str, dtype: np.dtype, eos_id: int):
    self.file = f"{split}.bin"
    self.path = os.path.join(directory, self.file)
    self._tmp = self.path + ".tmp"
    self._f = open(self._tmp, "wb")
    self.dtype, self.eos_id = np.dtype(dtype), eos_id
    self.tokens = self.documents = 0

  def add(self, ids) -> None:
    row = np.append(np.asarray(ids, np.int64), self.eos_id)
    if row.size and (row.min() < 0 or row.max() > np.iinfo(self.dtype).max):
      raise ValueError(f"token id {row.max()} does not fit {self.dtype.name}")
    self._f.write(row.astype(self.dtype.newbyteorder("<")).tobytes())
    self.tokens += row.size
    self.documents += 1

  def close(self) -> dict:
    """Finishes the file; its entry of the sidecar's `splits`."""
    self._f.close()
    os.replace(self._tmp, self.path)
    return {"file": self.file, "tokens": self.tokens, "documents": self.documents}


def write_meta(directory: str, meta: dict) -> str:
  """Writes the sidecar (after the split files, so a complete sidecar means complete data)."""
  meta = {"format": FORMAT, "version": VERSION, "separator": SEPARATOR, **meta}
  path = os.path.join(directory, META_FILE)
  paths.write_text(path, json.dumps(meta, indent=2, sort_keys=True))
  return path


def write_token_file(directory: str, splits: dict[str, list], *, vocab_size: int,
                     tokenizer: str = "bytes", pad_id: int = 0, bos_id: int = 1,
                     eos_id: int = 2, source: Optional[dict] = None,
                     spm_model: str = "") -> dict:
  """Writes `splits` (`{split: [document ids, ...]}`) and the sidecar; returns the sidecar."""
  os.makedirs(directory, exist_ok=True)
  dtype = dtype_for(vocab_size)
  written = {}
  for split, docs in splits.items():
    writer = SplitWriter(directory, split, dtype, eos_id)
    for doc in docs:
      writer.add(doc)
    written[split] = writer.close()
  meta = {"dtype": dtype.name, "vocab_size": int(vocab_size), "tokenizer": tokenizer,
          "spm_model": spm_model, "pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id,
          "splits": written, "source": source or {}}
  write_meta(directory, meta)
  return read_meta(directory)


# ----------------------------------------------------------------------------- reading


def read_meta(directory: str) -> dict:
  """The sidecar of the token file in `directory`; a ConfigError saying what is wrong."""
  path = os.path.join(directory, META_FILE)
  fix = ("write one with `python launch.py --mode=prepare --prepare_dir=DIR` (see the README's "
         "Data section)")
  if not os.path.isfile(path):
    raise ConfigError(f"--config.data.source_dir={directory!r} holds no {META_FILE}: it is not "
                      f"a token file; {fix}.")
  try:
    with open(path) as f:
      meta = json.load(f)
  except (OSError, ValueError) as e:
    raise ConfigError(f"{path} is not readable JSON ({e}); {fix}.") from None
  if not isinstance(meta, dict) or meta.get("format") != FORMAT:
    raise ConfigError(f"{path} is not a {FORMAT} sidecar; {fix}.")
  if meta.get("dtype") not in ("uint16", "uint32"):
    raise ConfigError(f"{path}: dtype {meta.get('dtype')!r} must be uint16 or uint32.")
  vocab = meta.get("vocab_size")
  if type(vocab) is not int or vocab < 1:
    raise ConfigError(f"{path}: vocab_size {vocab!r} is not a positive int; {fix}.")
  splits = meta.get("splits")
  if not isinstance(splits, dict) or not splits or not all(
      isinstance(e, dict) and isinstance(e.get("file"), str) and type(e.get("tokens")) is int
      for e in splits.values()):
    raise ConfigError(f"{path}: 'splits' must map each split to {{\"file\": NAME, \"tokens\": "
                      f"COUNT}}; {fix}.")
  chars = meta.get("chars")
  if meta.get("tokenizer") == "chars" and not (
      isinstance(chars, list) and all(isinstance(c, str) for c in chars)
      and len(chars) + int(meta.get("id_offset", 0)) == vocab):
    raise ConfigError(f"{path}: tokenizer chars needs 'chars', the vocab_size characters of "
                      f"the file's ids in order; {fix}.")
  return meta


def load_tokens(directory: str, meta: dict, split: str) -> np.ndarray:
  """`[tokens]` ids of `split`, memory-mapped. Checked first: the file is there, not empty, a
  whole number of ids, as many as the sidecar says, and each id below its vocab_size (one pass
  of max() over the map; where one is not, the message says whether the other dtype's reading
  fits: `foreign_tokens.other_dtype_fits`). Messages give the file's own ids (before
  `id_offset`)."""
  entry = meta["splits"][split]
  path = os.path.join(directory, entry["file"])
  tokens = _map(path, meta, split)
  if tokens.size != entry["tokens"]:
    raise ConfigError(f"{path} holds {tokens.size} tokens; {META_FILE} says "
                      f"{entry['tokens']}: the file is truncated or not this sidecar's; {_FIX}.")
  offset = int(meta.get("id_offset", 0))
  limit = meta["vocab_size"] - offset  # the file's own vocabulary
  if int(tokens.max()) >= limit:
    at = foreign_tokens.first_at_or_above(tokens, limit)
    counted = (f" ({META_FILE}'s vocab_size {meta['vocab_size']} counts {offset} more: pad, "
               "BOS, EOS)" if offset else "")
    why = foreign_tokens.other_dtype_fits(path, meta, tokens.dtype,
                                          int(entry.get("header_bytes", 0)), limit)
    raise ConfigError(f"id {int(tokens[at])} at position {at} in {path} is >= vocab_size "
                      f"{limit}{counted}" + (why or ": the file is not this sidecar's "
                                             f"tokenizer's; {_FIX}") + ".")
  return foreign_tokens.shifted(tokens, meta)


_FIX = ("prepare the folder again (python launch.py --mode=prepare --prepare_dir=DIR, or "
        "python -m transformer.data.foreign_meta for nanoGPT / llm.c files), or restore the "
        "file from a copy")


def _map(path: str, meta: dict, split: str) -> np.ndarray:
  """`[tokens]` the file's ids as they are, memory-mapped after its header (`header_bytes`,
  nanoGPT / llm.c files: foreign_tokens.py); a ConfigError if its size cannot hold them."""
  entry = meta["splits"][split]
  dtype = np.dtype(meta["dtype"]).newbyteorder("<")
  header = int(entry.get("header_bytes", 0))
  try:
    size = os.path.getsize(path)
  except OSError as e:
    raise ConfigError(f"{path} (split {split!r} of {META_FILE}) cannot be read: "
                      f"{e.strerror or e}; {_FIX}.") from None
  body = size - header
  if body <= 0 or body % dtype.itemsize:
    if size == 0:
      what = "is empty"
    elif body <= 0:
      what = f"has no tokens after its {header}-byte header"
    else:
      what = f"has {body} bytes of ids, not a whole number of {dtype.name} ids"
    raise ConfigError(f"{path} {what} ({META_FILE} says {entry['tokens']} tokens): the file "
                      f"is truncated or not this sidecar's; {_FIX}.")
  try:
    return np.memmap(path, dtype=dtype, mode="r", offset=header)
  except OSError as e:
    raise ConfigError(f"{path} cannot be read: {e.strerror or e}; {_FIX}.") from None


def eval_split_name(meta: dict, requested: str) -> str:
  """`requested`, or `test` when the default `validation` is not in the token file."""
  splits = meta["splits"]
  if requested in splits:
    return requested
  if requested == "validation" and "test" in splits:
    return "test"
  raise ConfigError(f"--config.data.eval_split={requested!r} is not a split of the token file "
                    f"(it has {sorted(splits)}).")


def load_tokenizer(directory: str, meta: dict):
  """The tokenizer the sidecar names (`transformer.data.tokenizers`)."""
  from transformer.data.tokenizers import ByteTokenizer, build_tokenizer
  kind, colon, file = str(meta["tokenizer"]).partition(":")
  if meta["tokenizer"] == "bytes":
    tokenizer = ByteTokenizer()
  elif meta["tokenizer"] == "ids":  # a foreign token file given without its tokenizer
    tokenizer = foreign_tokens.IdsTokenizer(meta["vocab_size"], meta.get("id_offset", 0))
  elif meta["tokenizer"] == "chars":  # nanoGPT's character data: meta.pkl's itos
    tokenizer = foreign_tokens.CharTokenizer(meta["chars"], meta.get("id_offset", 0))
  elif colon:  # hf:<tokenizer.json>, gpt2:<ranks>, relative to the token file's folder
    tokenizer = build_tokenizer(f"{kind}:{os.path.join(directory, file)}")
  else:
    tokenizer = build_tokenizer("sentencepiece", os.path.join(directory, meta["spm_model"]))
  if tokenizer.vocab_size != meta["vocab_size"]:
    raise ConfigError(f"{directory}/{META_FILE} says vocab_size {meta['vocab_size']}, its "
                      f"tokenizer has {tokenizer.vocab_size}.")
  return tokenizer


# ----------------------------------------------------------------------------- batches


def num_chunks(num_tokens: int, seq_len: int) -> int:
  """Whole chunks of `seq_len + 1` tokens in a stream of `num_tokens`."""
  return num_tokens // (seq_len + 1)


def lm_rows(tokens: np.ndarray, chunks: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
  """Chunk indices `[rows]` (-1 = a padding row) -> `inputs`, `targets` int32 and `weights`
  float32, each `[rows, seq_len]`. A padding row is all zeros, and so is the rest of a last,
  short chunk: weight 0."""
  rows = np.zeros((len(chunks), seq_len + 1), np.int32)
  for i, c in enumerate(chunks):
    if c >= 0:
      piece = tokens[c * (seq_len + 1):(c + 1) * (seq_len + 1)]
      rows[i, :len(piece)] = piece
  targets = rows[:, 1:]
  return {"inputs": rows[:, :-1], "targets": targets,
          "weights": (targets != 0).astype(np.float32)}


def epoch_order(seed: int, epoch: int, chunks: int) -> np.ndarray:
  """`[chunks]` the permutation of chunk indices that epoch `epoch` visits."""
  return np.random.default_rng([seed, epoch]).permutation(chunks)


def process_rows(global_rows: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's contiguous share of a global batch's `[global_batch]` rows."""
  per = len(global_rows) // process_count
  return global_rows[process_index * per:(process_index + 1) * per]


class TokenIterator:
  """Training batches of one process: `next()` gives batch `step` and counts it.

  Its state (`get_state`, `set_state`) is `{"step": batches taken}`, JSON for checkpoints.
  """

  def __init__(self, tokens: np.ndarray, seq_len: int, global_batch_size: int, seed: int,
               process_index: int = 0, process_count: int = 1):
    self.tokens, self.seq_len, self.seed = tokens, seq_len, seed
    self.global_batch_size = global_batch_size
    self.process_index, self.process_count = process_index, process_count
    self.chunks = num_chunks(tokens.size, seq_len)
    self.batches_per_epoch = self.chunks // global_batch_size
    if not self.batches_per_epoch:
      raise ConfigError(
          f"The token file's training split has {tokens.size} tokens: {self.chunks} rows of "
          f"seq_len + 1 = {seq_len + 1}, fewer than one batch of {global_batch_size}; lower "
          "--config.train.batch_size or --config.data.seq_len, or prepare more text.")
    self.step = 0
    self._order = (-1, None)  # (epoch, its permutation), cached

  def chunk_indices(self, step: int) -> np.ndarray:
    """`[per-process batch]` chunk indices of global batch `step` that this process reads."""
    epoch, k = divmod(step, self.batches_per_epoch)
    if self._order[0] != epoch:
      self._order = (epoch, epoch_order(self.seed, epoch, self.chunks))
    b = self.global_batch_size
    return process_rows(self._order[1][k * b:(k + 1) * b], self.process_index,
                        self.process_count)

  def __iter__(self) -> Iterator[dict]:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    batch = lm_rows(self.tokens, self.chunk_indices(self.step), self.seq_len)
    self.step += 1
    return batch

  def get_state(self) -> dict:
    return {"step": self.step, "seed": self.seed, "global_batch_size": self.global_batch_size,
            "chunks": self.chunks}

  def set_state(self, state: dict) -> None:
    mine = self.get_state()
    for key in ("seed", "global_batch_size", "chunks"):
      if state.get(key, mine[key]) != mine[key]:
        raise ValueError(f"the checkpoint's data position was saved with {key}="
                         f"{state[key]}, this run has {mine[key]}: not the same token file "
                         "or batch size")
    self.step = int(state["step"])


@dataclasses.dataclass
class TokenFileData:
  """A token file as `InputData` (`transformer.data.pipeline`): `next_train_batch()`,
  `eval_batches(n)`, the checkpointed `train_iterator` and the `tokenizer`."""
  tokenizer: object
  train_iterator: TokenIterator
  eval_tokens: np.ndarray
  seq_len: int
  batch_size: int  # per process
  process_index: int = 0
  process_count: int = 1
  num_classes: Optional[int] = None

  def next_train_batch(self) -> dict[str, np.ndarray]:
    return next(self.train_iterator)

  def eval_batches(self, max_batches: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """The eval split once, in order: `[batch_size, seq_len]` rows; the last chunk (padded with
    0) included, missing rows of the last batch zero (weight 0). Every process yields the same
    number of batches, its share of each global batch."""
    length = self.seq_len + 1
    chunks = -(-self.eval_tokens.size // length)  # the partial tail too
    global_batch = self.batch_size * self.process_count
    for i in range(-(-chunks // global_batch)):
      if max_batches and i >= max_batches:
        return
      rows = np.arange(i * global_batch, (i + 1) * global_batch)
      rows = process_rows(np.where(rows < chunks, rows, -1), self.process_index,
                          self.process_count)
      yield lm_rows(self.eval_tokens, rows, self.seq_len)


def token_file_data(directory: str, seq_len: int, global_batch_size: int, seed: int,
                    eval_split: str = "validation", process_index: int = 0,
                    process_count: int = 1) -> tuple[TokenFileData, dict]:
  """The token file in `directory` as training and eval batches of one process, and its
  sidecar."""
  if global_batch_size % process_count:
    raise ConfigError(f"--config.train.batch_size={global_batch_size} is not divisible by the "
                      f"{process_count} processes; make it a multiple of {process_count}.")
  meta = read_meta(directory)
  if "train" not in meta["splits"]:
    raise ConfigError(f"{directory}/{META_FILE} has no train split (it has "
                      f"{sorted(meta['splits'])}).")
  train = TokenIterator(load_tokens(directory, meta, "train"), seq_len, global_batch_size,
                        seed, process_index, process_count)
  data = TokenFileData(
      tokenizer=load_tokenizer(directory, meta), train_iterator=train,
      eval_tokens=load_tokens(directory, meta, eval_split_name(meta, eval_split)),
      seq_len=seq_len, batch_size=global_batch_size // process_count,
      process_index=process_index, process_count=process_count)
  return data, meta
