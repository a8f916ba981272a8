"""Turning streams of tokenized documents into fixed-length model inputs."""

import tensorflow as tf


def concat_and_chunk(docs: tf.data.Dataset, chunk_len: int) -> tf.data.Dataset:
  """Concatenates `[n_i]` int32 token vectors and cuts the stream into `[chunk_len]` chunks.

  The tail that does not fill a last chunk is dropped. Example with chunk_len=3:
  `[1, 2], [3, 4, 5, 6], [7]` -> `[1, 2, 3], [4, 5, 6]` (and `[7]` is dropped).
  """
  return docs.rebatch(chunk_len, drop_remainder=True)


def lm_example(chunk: tf.Tensor) -> dict[str, tf.Tensor]:
  """`[L + 1]` tokens -> next-token inputs / targets `[L]` with all-ones weights."""
  return {
      "inputs": chunk[:-1],
      "targets": chunk[1:],
      "weights": tf.ones_like(chunk[1:], tf.float32),
  }
