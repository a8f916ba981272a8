"""Tokenizers. Each exposes ids for pad/bos/eos, `vocab_size`, encode/decode in Python, a
TensorFlow `tf_encode` for input pipelines, and `byte_lengths` (`[vocab_size]` int32, the
UTF-8 bytes each id stands for) so that losses can be reported in bits per byte."""

from __future__ import annotations

import numpy as np
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
    return tf.cast(tf.io.decode_raw(text, tf.uint8), tf.int32) + self.offset

  @property
  def byte_lengths(self) -> np.ndarray:
    lengths = np.ones([self.vocab_size], np.int32)
    lengths[: self.offset] = 0
    return lengths


def build_tokenizer(name: str) -> ByteTokenizer:
  if name == "bytes":
    return ByteTokenizer()
  raise ValueError(f"Unknown tokenizer {name!r}; choose 'bytes'.")
