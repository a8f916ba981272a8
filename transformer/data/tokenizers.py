"""Tokenizers. Each exposes ids for pad/bos/eos, `vocab_size`, encode/decode in Python, a
TensorFlow `tf_encode` for input pipelines (the only place TensorFlow is imported), and
`byte_lengths` (`[vocab_size]` int32, the UTF-8 bytes each id stands for) so that losses can
be reported in bits per byte."""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from transformer.config import TOKENIZERS, options_text
from transformer.errors import ConfigError

if TYPE_CHECKING:  # annotations only: token files train without TensorFlow
  import tensorflow as tf


class ByteTokenizer:
  """UTF-8 bytes: id = byte + 3; 0 = pad, 1 = bos, 2 = eos. Vocabulary of 259."""

  pad_id, bos_id, eos_id = 0, 1, 2
  offset = 3
  vocab_size = 256 + offset

  def encode(self, text: str) -> list[int]:
    return [b + self.offset for b in text.encode("utf-8")]

  def decode(self, ids) -> str:
    data = bytes(int(i) - self.offset for i in ids if int(i) >= self.offset)
    return data.decode("utf-8", errors="replace")

  def tf_encode(self, text: tf.Tensor) -> tf.Tensor:
    """Scalar tf.string -> `[num_bytes]` int32."""
    import tensorflow as tf  # token files train without TensorFlow
    return tf.cast(tf.io.decode_raw(text, tf.uint8), tf.int32) + self.offset

  @property
  def byte_lengths(self) -> np.ndarray:
    lengths = np.ones([self.vocab_size], np.int32)
    lengths[: self.offset] = 0
    return lengths


class SentencePieceTokenizer:
  """A SentencePiece model with the repo's ids: 0 = pad, 1 = bos, 2 = eos, 3 = unk.

  Models trained here (`train_sentencepiece`) keep text exactly (identity normalization, no
  dummy prefix, whitespace kept) and fall back to bytes for unseen characters, so
  `decode(encode(text)) == text` and `byte_lengths` adds up to the UTF-8 size of the text.
  """

  def __init__(self, model_path: str):
    import sentencepiece as spm
    with open(model_path, "rb") as f:
      self.model_proto = f.read()
    self.path = model_path
    self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
    self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
    ids = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id())
    if ids != (0, 1, 2):
      raise ValueError(
          f"SentencePiece model {model_path} has pad/bos/eos ids {ids}; this codebase needs "
          "(0, 1, 2). Train it with pad_id=0 bos_id=1 eos_id=2 unk_id=3, or let "
          "--config.data.spm_model='' train one.")
    self.vocab_size = self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def decode(self, ids) -> str:
    return self._sp.decode([int(i) for i in ids if int(i) > self.eos_id])

  def tf_encode(self, text: tf.Tensor) -> tf.Tensor:
    """Scalar tf.string -> `[num_pieces]` int32 (runs the Python tokenizer in tf.data)."""
    import tensorflow as tf  # as in ByteTokenizer.tf_encode
    def encode(t):
      return np.asarray(self._sp.encode(t.decode("utf-8", errors="replace")), np.int32)
    ids = tf.numpy_function(encode, [text], tf.int32, stateful=False)
    ids.set_shape([None])
    return ids

  @property
  def byte_lengths(self) -> np.ndarray:
    sp = self._sp
    lengths = np.zeros([self.vocab_size], np.int32)
    for i in range(self.vocab_size):
      if sp.is_control(i):
        continue
      if sp.is_byte(i) or sp.is_unknown(i):
        lengths[i] = 1
      else:
        lengths[i] = len(sp.id_to_piece(i).replace("\u2581", " ").encode("utf-8"))
    return lengths


def train_sentencepiece(texts, model_path: str, vocab_size: int,
                        max_bytes: int = 20_000_000) -> str:
  """Trains a BPE SentencePiece model of at most `vocab_size` pieces (fewer when the text has
  too few distinct ones) on `texts` (an iterable of str), saves it at `model_path` (plus
  `.vocab`), and returns the path.

  Reads at most `max_bytes` of text; each line (with its newline) is one training sentence.
  Text is kept as is (no normalization; whitespace runs are pieces), with byte fallback for
  rare characters.
  """
  import sentencepiece as spm
  os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)

  def sentences():
    budget = max_bytes
    for text in texts:
      for line in text.splitlines(keepends=True):  # newlines kept: they are code's syntax
        if line.strip():
          budget -= len(line)
          yield line[:4096]
      if budget <= 0:
        return

  prefix = model_path[:-len(".model")] if model_path.endswith(".model") else model_path
  tmp_prefix = f"{prefix}.tmp{os.getpid()}"
  spm.SentencePieceTrainer.train(
      sentence_iterator=sentences(), model_prefix=tmp_prefix, vocab_size=vocab_size,
      model_type="bpe", character_coverage=0.9995, byte_fallback=True,
      normalization_rule_name="identity", add_dummy_prefix=False,
      remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
      pad_id=0, bos_id=1, eos_id=2, unk_id=3, max_sentence_length=1 << 14,
      hard_vocab_limit=False,  # a small corpus may support fewer pieces than asked
      num_threads=2, minloglevel=2, train_extremely_large_corpus=False)
  # Written under a temporary name first, so a crash never leaves a half-written model.
  os.replace(tmp_prefix + ".vocab", prefix + ".vocab")
  os.replace(tmp_prefix + ".model", prefix + ".model")
  return prefix + ".model"


_PROBE = "def f(x):\n\treturn x  # naïve café, 日本語 🙂\n\n  end"


class _ShiftedTokenizer:
  """A tokenizer of another library with the repo's ids: its id `i` is `i + 3` here, and
  0 = pad, 1 = bos, 2 = eos (as for `ByteTokenizer`); `vocab_size` is its vocabulary + 3.

  Its own special tokens (GPT-2's `<|endoftext|>`) stay ordinary ids; documents end with id 2.
  One rule for both kinds: text that spells a special token (a literal `<|endoftext|>` in the
  data) is ordinary text, encoded as its characters, never as the special id (as GPT-2 data is
  encoded with tiktoken's `encode_ordinary`), so no text can forge a document boundary.
  `byte_lengths` are the bytes each token decodes to on its own, so for byte-level BPE (GPT-2,
  `train_bpe`) they add up to the UTF-8 size of the decoded text and bits per byte are exact.
  Subclasses give `path`, `_raw_vocab`, `_encode_raw`, `_decode_raw` and `_token_bytes`.
  """

  pad_id, bos_id, eos_id = 0, 1, 2
  offset = 3

  @property
  def vocab_size(self) -> int:
    return self._raw_vocab + self.offset

  def encode(self, text: str) -> list[int]:
    return [i + self.offset for i in self._encode_raw(text)]

  def decode(self, ids) -> str:
    return self._decode_raw([int(i) - self.offset for i in ids if int(i) >= self.offset])

  def tf_encode(self, text: tf.Tensor) -> tf.Tensor:
    """Scalar tf.string -> `[num_tokens]` int32 (runs the Python tokenizer in tf.data)."""
    import tensorflow as tf  # as in ByteTokenizer.tf_encode
    def encode(t):
      return np.asarray(self.encode(t.decode("utf-8", errors="replace")), np.int32)
    ids = tf.numpy_function(encode, [text], tf.int32, stateful=False)
    ids.set_shape([None])
    return ids

  @property
  def byte_lengths(self) -> Optional[np.ndarray]:
    """`[vocab_size]` int32 bytes of each id, or None (no bits per byte) when they do not add
    up to the decoded text's UTF-8 size on a probe text (a decoder that joins tokens with
    spaces, a normalizer that changes the text): a wrong figure is worse than none."""
    if not hasattr(self, "_lengths"):
      self._lengths = self._checked_byte_lengths()
    return self._lengths

  def _checked_byte_lengths(self) -> Optional[np.ndarray]:
    lengths = np.zeros([self.vocab_size], np.int32)
    for i in range(self._raw_vocab):
      lengths[i + self.offset] = len(self._token_bytes(i))
    ids = self.encode(_PROBE)
    if int(lengths[ids].sum()) != len(self.decode(ids).encode("utf-8")):
      print(f"{self.path}: its tokens' bytes do not add up to the decoded text's, so bits per "
            "byte are not reported (a byte-level BPE, as GPT-2's, has exact ones).", flush=True)
      return None
    return lengths


def byte_level_alphabet() -> dict[str, int]:
  """GPT-2's byte-level BPE alphabet: the printable character standing for each byte."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[chr(b)] = b
    else:
      chars[chr(256 + extra)] = b
      extra += 1
  return chars


class HFTokenizer(_ShiftedTokenizer):
  """A Hugging Face `tokenizer.json` (the `tokenizers` package): `data.tokenizer=hf:<path>`."""

  def __init__(self, path: str):
    from tokenizers import Tokenizer as HFFile  # only when configured
    self.path = path
    contents = read_file(path, f"--config.data.tokenizer=hf:{path}")
    try:
      self._tok = HFFile.from_buffer(contents)
    except Exception as e:  # noqa: BLE001 -- the library raises plain Exceptions
      raise ConfigError(f"--config.data.tokenizer=hf:{path}: not a readable tokenizer.json "
                        f"({str(e).splitlines()[0][:200]}).") from None
    self._tok.no_padding()
    self._tok.no_truncation()
    self._tok.encode_special_tokens = True  # special tokens spelled in text are text
    self._raw_vocab = self._tok.get_vocab_size(with_added_tokens=True)
    self._byte_level = type(self._tok.decoder).__name__ == "ByteLevel"

  def _encode_raw(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def _decode_raw(self, ids: list[int]) -> str:
    return self._tok.decode(ids, skip_special_tokens=False)

  def _token_bytes(self, i: int) -> bytes:
    piece = self._tok.id_to_token(i)
    if piece is None:
      return b""
    if self._byte_level and not self._is_added(i):  # a piece spells raw bytes, whole or not
      alphabet = _BYTE_LEVEL
      if all(c in alphabet for c in piece):
        return bytes(alphabet[c] for c in piece)
    return self._decode_raw([i]).encode("utf-8")

  def _is_added(self, i: int) -> bool:
    if not hasattr(self, "_added"):
      self._added = set(self._tok.get_added_tokens_decoder())
    return i in self._added


_BYTE_LEVEL = byte_level_alphabet()


class TiktokenTokenizer(_ShiftedTokenizer):
  """GPT-2's BPE through `tiktoken`, with its ranks read from a local file in tiktoken's
  format (`r50k_base.tiktoken`: base64 token, rank per line): `data.tokenizer=gpt2:<path>`.
  Token `n_ranks` is `<|endoftext|>`, as in GPT-2 (50256 of 50257). The ranks are parsed here
  from the file's bytes at each construction, never taken from tiktoken's cache."""

  def __init__(self, path: str):
    import tiktoken  # only when configured
    from tiktoken_ext.openai_public import r50k_pat_str
    self.path = path
    # Not tiktoken's loader: its cache, keyed by path, serves a rewritten file's old ranks.
    contents = read_file(path, f"--config.data.tokenizer=gpt2:{path}")
    try:
      ranks = read_ranks(contents)
    except ValueError as e:
      raise ConfigError(f"--config.data.tokenizer=gpt2:{path}: not a tiktoken ranks file "
                        f"(lines of 'base64-token rank'; {str(e)[:200]}).") from None
    self.ranks = ranks  # token bytes -> rank; export converts them (weights/hf_tokenizer.py)
    self._raw_vocab = len(ranks) + 1
    self._enc = tiktoken.Encoding("gpt2-file", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                  special_tokens={"<|endoftext|>": len(ranks)})

  def _encode_raw(self, text: str) -> list[int]:
    return self._enc.encode_ordinary(text)

  def _decode_raw(self, ids: list[int]) -> str:
    return self._enc.decode(ids, errors="replace")

  def _token_bytes(self, i: int) -> bytes:
    return self._enc.decode_single_token_bytes(i)


def read_file(path: str, flag: str) -> bytes:
  """The bytes of the tokenizer file `path`; a one-line ConfigError naming `flag` when it
  cannot be read."""
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError as e:
    raise ConfigError(f"{flag}: {path!r} cannot be read ({e.strerror or e}); give a file you "
                      "can read.") from None


def read_ranks(contents: bytes) -> dict[bytes, int]:
  """A tiktoken ranks file's bytes (`base64-token rank` per line) -> `{token bytes: rank}`, as
  `tiktoken.load.load_tiktoken_bpe` parses them; ValueError naming the first bad line."""
  ranks = {}
  for number, line in enumerate(contents.splitlines(), 1):
    if not line:
      continue
    try:
      token, rank = line.split()
      ranks[base64.b64decode(token)] = int(rank)
    except ValueError:  # binascii.Error included
      raise ValueError(f"line {number}: {line[:60]!r}") from None
  return ranks


def train_bpe(texts, path: str, vocab_size: int) -> str:
  """Trains a byte-level BPE (GPT-2's kind) of `vocab_size` ids on `texts` (an iterable of str)
  with the `tokenizers` package, saves it as a `tokenizer.json` at `path` and returns the
  path. Its last id is `<|endoftext|>`, as in GPT-2."""
  from tokenizers import Tokenizer as HFFile, decoders, models, pre_tokenizers, trainers
  tok = HFFile(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer)
  tok.add_special_tokens(["<|endoftext|>"])
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tok.save(path + ".tmp")
  os.replace(path + ".tmp", path)
  return path


Tokenizer = Union[ByteTokenizer, SentencePieceTokenizer, HFTokenizer, TiktokenTokenizer]
FILE_TOKENIZERS = {"hf": HFTokenizer, "gpt2": TiktokenTokenizer}  # `<kind>:<path>`


def build_tokenizer(name: str, model_path: str = "") -> Tokenizer:
  """`bytes`; `sentencepiece` loaded from `model_path` (train one with `train_sentencepiece`;
  `transformer.data.pipeline` does that from the config); `hf:<tokenizer.json>` or
  `gpt2:<ranks file>` (see `HFTokenizer`, `TiktokenTokenizer`)."""
  if name == "bytes":
    return ByteTokenizer()
  kind, colon, path = name.partition(":")
  if colon and kind in FILE_TOKENIZERS:
    if not os.path.isfile(path):
      raise ConfigError(f"--config.data.tokenizer={name!r}: {path!r} is not a file; give the "
                        f"path of a {'tokenizer.json' if kind == 'hf' else 'tiktoken ranks file'}.")
    return FILE_TOKENIZERS[kind](path)
  if name == "sentencepiece":
    if not model_path or not os.path.exists(model_path):
      raise ValueError(f"SentencePiece model file {model_path!r} does not exist; set "
                       "--config.data.spm_model to a .model file, or to '' to train one.")
    return SentencePieceTokenizer(model_path)
  raise ValueError(f"Unknown tokenizer {name!r}; choose "
                   f"{options_text(tuple(map(repr, TOKENIZERS)))}.")
