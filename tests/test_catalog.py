"""Catalog datasets under tfds.testing.mock_data (the real builders' feature specs), and the
error for a catalog dataset that is neither prepared nor downloadable."""

import socket

import numpy as np
import pytest
import tensorflow_datasets as tfds

from transformer.config import DataConfig
from transformer.data import catalog
from transformer.data.catalog import DatasetNotPreparedError
from transformer.data.pipeline import classification_data, get_builder, lm_data, seq2seq_data


_REAL_OFFLINE_REASON = catalog.offline_reason


@pytest.fixture(autouse=True)
def network_looks_up(monkeypatch):
  """mock_data makes download_and_prepare a no-op; skip the DNS pre-check that would stop a
  mocked 'download' on a machine without network. The no-DNS test restores it."""
  monkeypatch.setattr(catalog, "offline_reason", lambda: None)


@pytest.mark.parametrize("packing", ["concat", "pack", "pad"])
def test_lm1b_pipeline_under_mock_data(tmp_path, packing):
  cfg = DataConfig(name="lm1b", data_dir=str(tmp_path), seq_len=16, shuffle_buffer=8,
                   packing=packing)
  with tfds.testing.mock_data(num_examples=24):
    data = lm_data(cfg, 4, seed=0)
    batch = data.next_train_batch()
    eval_batch = next(data.eval_batches(1))
  keys = {"inputs", "targets", "weights"} | ({"segment_ids", "positions"} if packing == "pack"
                                               else set())
  assert set(batch) == keys
  for k in keys:
    assert batch[k].shape == (4, 16) and eval_batch[k].shape == (4, 16), k
  assert batch["weights"].sum() > 0
  # Next-token targets: within a piece, targets are the inputs moved left by one.
  real = batch["weights"][:, :-1] * batch["weights"][:, 1:] > 0
  if packing == "pack":
    real &= batch["segment_ids"][:, :-1] == batch["segment_ids"][:, 1:]
  np.testing.assert_array_equal(batch["targets"][:, :-1][real], batch["inputs"][:, 1:][real])


@pytest.mark.parametrize("name", ["wmt14_translate/de-en", "wmt17_translate/de-en"])
def test_wmt_pipeline_under_mock_data(tmp_path, name):
  cfg = DataConfig(name=name, data_dir=str(tmp_path), src_len=20, tgt_len=12,
                   shuffle_buffer=8, packing="pack")
  with tfds.testing.mock_data(num_examples=32):
    builder = get_builder(cfg)
    assert builder.info.supervised_keys == ("de", "en")
    data = seq2seq_data(cfg, 4, seed=0)
    batch = data.next_train_batch()
  assert batch["inputs"].shape == (4, 20) and batch["inputs_segment_ids"].shape == (4, 20)
  assert batch["targets"].shape == (4, 12) and batch["targets_positions"].shape == (4, 12)
  assert batch["weights"].shape == (4, 12)


@pytest.mark.parametrize("name,text", [("imdb_reviews", "text"), ("glue/sst2", "sentence")])
def test_classification_catalog_under_mock_data(tmp_path, name, text):
  cfg = DataConfig(name=name, data_dir=str(tmp_path), seq_len=24, shuffle_buffer=8,
                   packing="pad")
  with tfds.testing.mock_data(num_examples=16):
    data = classification_data(cfg, 4, seed=0)
    batch = data.next_train_batch()
  assert data.num_classes == 2
  assert batch["inputs"].shape == (4, 24) and batch["label"].shape == (4,)
  assert set(batch["label"]) <= {0, 1}


@pytest.mark.parametrize("name", ["c4/en", "tiny_shakespeare"])
def test_other_lm_catalog_datasets_under_mock_data(tmp_path, name):
  cfg = DataConfig(name=name, data_dir=str(tmp_path), seq_len=8, shuffle_buffer=4)
  with tfds.testing.mock_data(num_examples=16):
    assert lm_data(cfg, 2, seed=0).next_train_batch()["inputs"].shape == (2, 8)


def test_unprepared_catalog_dataset_fails_with_instructions(tmp_path):
  cfg = DataConfig(name="lm1b", data_dir=str(tmp_path), download=False)
  with pytest.raises(DatasetNotPreparedError, match="not prepared") as e:
    lm_data(cfg, 4, seed=0)
  assert "download_and_prepare" in str(e.value) and str(tmp_path) in str(e.value)


def test_download_failure_is_reported_with_instructions(tmp_path, monkeypatch):
  def no_network(self, *args, **kwargs):
    raise ConnectionError("Temporary failure in name resolution")
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", no_network)
  cfg = DataConfig(name="tiny_shakespeare", data_dir=str(tmp_path))
  with pytest.raises(DatasetNotPreparedError, match="could not be downloaded") as e:
    lm_data(cfg, 4, seed=0)
  assert "name resolution" in str(e.value) and "--config.data.data_dir" in str(e.value)


def test_no_dns_fails_at_once_without_trying_to_download(tmp_path, monkeypatch):
  def no_dns(*args, **kwargs):
    raise socket.gaierror(-2, "Name or service not known")
  def must_not_run(self, *args, **kwargs):
    raise AssertionError("download attempted")
  for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setattr(socket, "getaddrinfo", no_dns)
  monkeypatch.setattr(catalog, "offline_reason", _REAL_OFFLINE_REASON)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", must_not_run)
  with pytest.raises(DatasetNotPreparedError, match="no network"):
    lm_data(DataConfig(name="tiny_shakespeare", data_dir=str(tmp_path)), 4, seed=0)


def test_unknown_dataset_name_is_a_config_error(tmp_path):
  with pytest.raises(ValueError, match="not a TFDS dataset"):
    get_builder(DataConfig(name="no_such_dataset_xyz", data_dir=str(tmp_path)))
