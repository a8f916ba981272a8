"""The data benchmark's measurement functions on a tiny pipeline."""

import numpy as np

from transformer.config import DataConfig
from transformer.train.data_bench import batch_tokens, time_pipeline
from transformer.data.pipeline import lm_data


def test_batch_tokens_counts_positions_and_real_tokens():
  batch = {"inputs": np.array([[5, 6, 0], [7, 0, 0]]), "targets": np.array([[1, 0], [2, 3]])}
  assert batch_tokens(batch, seq2seq=False) == (6, 3)
  assert batch_tokens(batch, seq2seq=True) == (10, 6)


def test_time_pipeline_reports_rates(tiny_corpus):
  cfg = DataConfig(source_dir=tiny_corpus["source_dir"], data_dir=tiny_corpus["data_dir"],
                   validation_percent=20, seq_len=16, shuffle_buffer=8, packing="pack")
  rates = time_pipeline(lm_data(cfg, 4, seed=0), 5)
  assert rates["positions_per_sec"] >= rates["real_tokens_per_sec"] > 0
  assert rates["batches_per_sec"] * 64 == rates["positions_per_sec"]
