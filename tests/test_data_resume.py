"""Exact resumption of the training iterators, seeding, and per-process shards."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from transformer.config import DataConfig
from transformer.data.builders.synthetic import synthetic_builder
from transformer.data.pipeline import (examples, lm_data, per_process_batch_size,
                                       seq2seq_data)
from transformer.data.tokenizers import train_sentencepiece


def _assert_same(a, b):
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _check_resume(make_data, tmp_path, before=3, after=4):
  straight = make_data()
  expected = [straight.next_train_batch() for _ in range(before + after)]

  first = make_data()
  for _ in range(before):
    first.next_train_batch()
  # The same save/restore as transformer.train.checkpoint.TfIteratorHandler.
  prefix = str(tmp_path / "iterator")
  tf.train.Checkpoint(iterator=first.train_iterator).write(prefix)
  resumed = make_data()
  tf.train.Checkpoint(iterator=resumed.train_iterator).read(prefix).assert_consumed()
  for want in expected[before:]:
    _assert_same(resumed.next_train_batch(), want)


def _lm_cfg(corpus, **kw):
  return DataConfig(source_dir=corpus["source_dir"], data_dir=corpus["data_dir"],
                    validation_percent=20, seq_len=24, shuffle_buffer=16, **kw)


@pytest.mark.parametrize("packing", ["concat", "pack", "pad"])
def test_lm_resume_is_exact(tiny_corpus, tmp_path, packing):
  cfg = _lm_cfg(tiny_corpus, packing=packing)
  _check_resume(lambda: lm_data(cfg, 4, seed=1), tmp_path)


def test_lm_resume_is_exact_with_sentencepiece(tiny_corpus, tmp_path):
  texts = [open(f"{tiny_corpus['source_dir']}/pkg/mod_{i:02d}.py").read() for i in range(5)]
  model = train_sentencepiece(texts, str(tmp_path / "spm.model"), 300)
  cfg = _lm_cfg(tiny_corpus, packing="pack", tokenizer="sentencepiece", spm_model=model)
  _check_resume(lambda: lm_data(cfg, 4, seed=1), tmp_path)


@pytest.fixture(scope="module")
def reverse_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("syn"))
  synthetic_builder("reverse", path).download_and_prepare()
  return path


def test_seq2seq_bucketed_resume_is_exact(reverse_dir, tmp_path):
  cfg = DataConfig(name="synthetic_seq2seq/reverse", data_dir=reverse_dir, src_len=24,
                   tgt_len=24, packing="pad", bucket_boundaries="8,16", shuffle_buffer=64)
  _check_resume(lambda: seq2seq_data(cfg, 8, seed=2), tmp_path)
  widths = {seq2seq_data(cfg, 8, seed=2).next_train_batch()["inputs"].shape[1]}
  data = seq2seq_data(cfg, 8, seed=2)
  widths |= {data.next_train_batch()["inputs"].shape[1] for _ in range(20)}
  assert widths == {8, 16, 24}


def test_seed_changes_the_order_and_only_the_order(reverse_dir):
  cfg = DataConfig(name="synthetic_seq2seq/reverse", data_dir=reverse_dir, src_len=24,
                   tgt_len=24, packing="pad", shuffle_buffer=64)
  a = seq2seq_data(cfg, 8, seed=0).next_train_batch()
  _assert_same(a, seq2seq_data(cfg, 8, seed=0).next_train_batch())
  b = seq2seq_data(cfg, 8, seed=1).next_train_batch()
  assert not np.array_equal(a["inputs"], b["inputs"])


def test_each_process_reads_its_own_shard(reverse_dir):
  builder = synthetic_builder("reverse", reverse_dir)
  full = [ex["inputs"] for ex in tfds.as_numpy(examples(
      builder, "validation", shuffle_seed=None, shuffle_buffer=1, process_index=0,
      process_count=1))]
  shards = [[ex["inputs"] for ex in tfds.as_numpy(examples(
      builder, "validation", shuffle_seed=None, shuffle_buffer=1, process_index=i,
      process_count=4))] for i in range(4)]
  assert [len(s) for s in shards] == [250] * 4
  assert sorted(sum(shards, [])) == sorted(full)  # disjoint and complete
  assert per_process_batch_size(32, 4) == 8
  with pytest.raises(ValueError, match="not divisible"):
    per_process_batch_size(30, 4)
