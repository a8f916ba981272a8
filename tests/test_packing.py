"""Packing (the docstring's worked example and invariants), padding with length buckets."""

import numpy as np
import tensorflow as tf

from transformer.data import packing
from transformer.data.pipeline import split_documents


def _ds(examples, keys=("inputs",)):
  spec = {k: tf.TensorSpec([None], tf.int32) for k in keys}
  return tf.data.Dataset.from_generator(
      lambda: (dict(zip(keys, e)) if isinstance(e, tuple) else {keys[0]: e} for e in examples),
      output_signature=spec)


def test_pack_worked_example():
  rows = list(packing.pack_dataset(_ds([[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]),
                                   {"inputs": 5}).as_numpy_iterator())
  assert len(rows) == 2
  np.testing.assert_array_equal(rows[0]["inputs"], [1, 2, 3, 4, 5])
  np.testing.assert_array_equal(rows[0]["inputs_segment_ids"], [1, 1, 1, 2, 2])
  np.testing.assert_array_equal(rows[0]["inputs_positions"], [0, 1, 2, 0, 1])
  np.testing.assert_array_equal(rows[1]["inputs"], [6, 7, 8, 9, 10])
  np.testing.assert_array_equal(rows[1]["inputs_segment_ids"], [1, 1, 1, 1, 2])
  np.testing.assert_array_equal(rows[1]["inputs_positions"], [0, 1, 2, 3, 0])


def test_pack_keeps_every_token_and_pair_within_limits():
  rng = np.random.default_rng(0)
  examples = [(rng.integers(1, 50, rng.integers(1, 9)).tolist(),
               rng.integers(1, 50, rng.integers(1, 6)).tolist()) for _ in range(100)]
  rows = list(packing.pack_dataset(_ds(examples, ("inputs", "targets")),
                                   {"inputs": 8, "targets": 6}, window=16).as_numpy_iterator())
  got = []
  for r in rows:
    assert r["inputs"].shape == (8,) and r["targets"].shape == (6,)
    for s in sorted(set(r["inputs_segment_ids"]) - {0}):
      src = r["inputs"][r["inputs_segment_ids"] == s]
      tgt = r["targets"][r["targets_segment_ids"] == s]
      np.testing.assert_array_equal(r["targets_positions"][r["targets_segment_ids"] == s],
                                    np.arange(len(tgt)))
      got.append((src.tolist(), tgt.tolist()))
    np.testing.assert_array_equal(r["inputs"] == 0, r["inputs_segment_ids"] == 0)
  # Same multiset of pairs (packing reorders only within windows).
  assert sorted(map(str, got)) == sorted(map(str, examples))
  assert len(rows) <= 80  # 100 pairs: several share a row (73 with first fit in windows of 16)


def test_pack_truncates_long_examples():
  rows = list(packing.pack_dataset(_ds([list(range(1, 12))]), {"inputs": 4}).as_numpy_iterator())
  assert len(rows) == 1
  np.testing.assert_array_equal(rows[0]["inputs"], [1, 2, 3, 4])


def test_split_documents_overlaps_by_one_for_next_token_prediction():
  docs = tf.data.Dataset.from_tensor_slices(tf.constant([[1, 2, 3, 4, 5, 6, 7]]))
  pieces = [list(p) for p in split_documents(docs, 4, 1).as_numpy_iterator()]
  assert pieces == [[1, 2, 3, 4], [4, 5, 6, 7]]
  docs = tf.data.Dataset.from_tensor_slices(tf.constant([[1, 2, 3, 4, 5]]))
  assert [list(p) for p in split_documents(docs, 3, 0).as_numpy_iterator()] == [[1, 2, 3], [4, 5]]


def test_pad_batch_buckets_by_length():
  examples = [[1] * n for n in (2, 3, 7, 1, 8, 4, 2, 6, 3, 3, 5, 2)]
  batches = list(packing.pad_batch(_ds(examples), 2, {"inputs": 8}, (3, 5),
                                   drop_remainder=False).as_numpy_iterator())
  seen = []
  for b in batches:
    lengths = (b["inputs"] != 0).sum(1)
    width = b["inputs"].shape[1]
    assert width in (3, 5, 8) and b["inputs"].shape[0] <= 2
    # Each batch holds one bucket: its width is the smallest bucket holding all its rows.
    assert lengths.max() <= width and (width == 3 or lengths.min() > {5: 3, 8: 5}[width])
    seen += list(lengths)
  assert sorted(seen) == sorted(len(e) for e in examples)
  assert [b["inputs"].shape[1] for b in batches].count(3) == 4  # 7 short ones: 2 + 2 + 2 + 1
  unbucketed = list(packing.pad_batch(_ds(examples), 4, {"inputs": 8}).as_numpy_iterator())
  assert [b["inputs"].shape for b in unbucketed] == [(4, 8)] * 3
