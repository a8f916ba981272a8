"""The synthetic seq2seq builder and the seq2seq input pipeline on it."""


import numpy as np
import pytest
import tensorflow_datasets as tfds

from transformer.config import ConfigError, DataConfig
from transformer.data.builders.synthetic import SyntheticConfig, generate_split, synthetic_builder
from transformer.data.pipeline import seq2seq_data
from transformer.data.tokenizers import ByteTokenizer


@pytest.mark.parametrize("task", ["reverse", "sort", "add"])
def test_examples_solve_the_task_and_eval_inputs_are_unseen(task):
  cfg = SyntheticConfig(name=f"t_{task}", task=task, min_len=1, max_len=6, num_train=300,
                        num_validation=50, num_test=50, seed=3)
  train = generate_split(cfg, "train", set())
  val = generate_split(cfg, "validation", {e["inputs"] for e in train})
  assert len(train) == 300 and len(val) == 50
  assert not {e["inputs"] for e in train} & {e["inputs"] for e in val}
  for ex in train + val:
    x, y = ex["inputs"], ex["targets"]
    if task == "reverse":
      assert y == "".join(reversed(x))
    elif task == "sort":
      assert list(y) == sorted(x) and len(y) == len(x)
    else:
      a, b = x.split("+")
      assert int(y) == int(a) + int(b) and 1 <= len(a) <= 6 and 1 <= len(b) <= 6
  # Deterministic from the seed; another seed gives other data.
  assert generate_split(cfg, "train", set()) == train
  other = SyntheticConfig(name="o", task=task, min_len=1, max_len=6, num_train=300, seed=4)
  assert generate_split(other, "train", set()) != train


def test_builder_prepares_three_splits(tmp_path):
  builder = synthetic_builder("reverse", str(tmp_path), num_train=64, num_validation=16,
                              num_test=16, max_len=8)
  builder.download_and_prepare()
  assert {s: builder.info.splits[s].num_examples for s in ("train", "validation", "test")} == {
      "train": 64, "validation": 16, "test": 16}
  for ex in tfds.as_numpy(builder.as_dataset(split="test")):
    assert ex["targets"] == ex["inputs"][::-1]


def _cfg(tmp_path, **kw):
  return DataConfig(name="synthetic_seq2seq/reverse", data_dir=str(tmp_path / "tfds"),
                    src_len=24, tgt_len=24, shuffle_buffer=64, **kw)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  """The default `reverse` dataset, prepared once for this module."""
  path = tmp_path_factory.mktemp("syn")
  synthetic_builder("reverse", str(path / "tfds")).download_and_prepare()
  return path


def test_seq2seq_padded_batches_hold_source_and_target(prepared):
  data = seq2seq_data(_cfg(prepared, packing="pad"), 8, seed=0)
  tok = ByteTokenizer()
  batch = data.next_train_batch()
  assert batch["inputs"].shape == (8, 24) and batch["targets"].shape == (8, 24)
  assert batch["inputs"].dtype == np.int32 and batch["weights"].dtype == np.float32
  np.testing.assert_array_equal(batch["weights"], batch["targets"] != 0)
  for src, tgt in zip(batch["inputs"], batch["targets"]):
    n, m = int((src != 0).sum()), int((tgt != 0).sum())
    assert src[n - 1] == tok.eos_id and tgt[m - 1] == tok.eos_id
    assert tok.decode(tgt[:m - 1]) == tok.decode(src[:n - 1])[::-1]


def test_seq2seq_packed_rows_keep_pairs_aligned(prepared):
  data = seq2seq_data(_cfg(prepared, packing="pack"), 4, seed=0)
  tok = ByteTokenizer()
  batch = data.next_train_batch()
  for k in ("inputs", "targets", "inputs_segment_ids", "inputs_positions",
            "targets_segment_ids", "targets_positions"):
    assert batch[k].shape == (4, 24), k
  for b in range(4):
    segs = set(batch["inputs_segment_ids"][b]) - {0}
    assert segs == set(batch["targets_segment_ids"][b]) - {0} and len(segs) >= 2
    for s in segs:
      src = batch["inputs"][b][batch["inputs_segment_ids"][b] == s]
      tgt = batch["targets"][b][batch["targets_segment_ids"][b] == s]
      np.testing.assert_array_equal(
          batch["inputs_positions"][b][batch["inputs_segment_ids"][b] == s], np.arange(len(src)))
      assert tok.decode(tgt[:-1]) == tok.decode(src[:-1])[::-1]


def test_seq2seq_eval_covers_the_split_once(prepared):
  data = seq2seq_data(_cfg(prepared, packing="pad"), 64, seed=0)
  batches = list(data.eval_batches())
  rows = sum(int((b["weights"].sum(1) > 0).sum()) for b in batches)
  assert rows == 1000 and all(b["inputs"].shape == (64, 24) for b in batches)


def test_seq2seq_refuses_concat(prepared):
  with pytest.raises(ConfigError, match="packing"):
    seq2seq_data(_cfg(prepared, packing="concat"), 8, seed=0)
