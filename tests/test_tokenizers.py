"""Tokenizers: SentencePiece training on a small corpus, save/reload, exact round trip,
byte lengths for bits per byte; reuse of the vocabulary saved in the workdir."""

import os

import numpy as np
import pytest
import tensorflow as tf

from transformer.config import DataConfig
from transformer.data.pipeline import lm_data, seq2seq_data
from transformer.data.tokenizers import ByteTokenizer, build_tokenizer, train_sentencepiece

_TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "for i in range(10):\n\tprint(i, 'naïve café', \"ünïcödé → ok\")\n",
] * 40


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("spm") / "tok.model")
  return train_sentencepiece(iter(_TEXTS), path, vocab_size=320)


def test_train_save_reload_round_trip(spm_path):
  assert os.path.exists(spm_path) and os.path.exists(spm_path[:-len(".model")] + ".vocab")
  tok = build_tokenizer("sentencepiece", spm_path)
  again = build_tokenizer("sentencepiece", spm_path)  # reloaded from the saved file
  assert 300 < tok.vocab_size <= 320 and (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
  unseen = "  x = {'k': [1, 2]}  # 日本語 and emoji 🙂\n\n\tz"
  for text in _TEXTS[:3] + [unseen]:
    ids = tok.encode(text)
    assert again.encode(text) == ids
    assert tok.decode(ids) == text  # exact: no normalization, whitespace kept, byte fallback
    assert min(ids) > 2  # no pad/bos/eos inside text
    # Bits per byte divides by byte_lengths of the targets: it must add up to the UTF-8 size.
    assert int(tok.byte_lengths[ids].sum()) == len(text.encode("utf-8"))
  assert len(tok.encode(_TEXTS[1])) < 0.75 * len(_TEXTS[1].encode())  # it learned pieces
  np.testing.assert_array_equal(tok.byte_lengths[:3], 0)
  newline = tok.encode("\n")
  assert len(newline) == 1 and tok.byte_lengths[newline[0]] == 1  # a piece, not a byte escape


def test_tf_encode_matches_python(spm_path):
  tok = build_tokenizer("sentencepiece", spm_path)
  ds = tf.data.Dataset.from_tensor_slices(_TEXTS[:3]).map(tok.tf_encode)
  for text, ids in zip(_TEXTS[:3], ds.as_numpy_iterator()):
    assert ids.tolist() == tok.encode(text)


def test_byte_tokenizer_round_trip():
  tok = ByteTokenizer()
  text = "naïve → ok"
  assert tok.decode(tok.encode(text)) == text
  assert int(tok.byte_lengths[tok.encode(text)].sum()) == len(text.encode())


def test_pipeline_trains_the_vocabulary_once_into_the_workdir(tiny_corpus, tmp_path):
  cfg = DataConfig(source_dir=tiny_corpus["source_dir"], data_dir=tiny_corpus["data_dir"],
                   validation_percent=20, seq_len=16, shuffle_buffer=8,
                   tokenizer="sentencepiece", spm_vocab_size=300)
  workdir = str(tmp_path / "run")
  data = lm_data(cfg, 2, seed=0, workdir=workdir)
  path = os.path.join(workdir, "tokenizer", "spm300.model")
  assert data.tokenizer.path == path and data.tokenizer.vocab_size <= 300
  mtime = os.path.getmtime(path)
  batch = data.next_train_batch()
  assert batch["inputs"].shape == (2, 16) and batch["inputs"].max() < 300
  assert lm_data(cfg, 2, seed=0, workdir=workdir).tokenizer.path == path
  assert os.path.getmtime(path) == mtime  # reused, not retrained
  # An existing .model file is used as is.
  other = DataConfig(**{**cfg.__dict__, "spm_model": path})
  assert lm_data(other, 2, seed=0, workdir=str(tmp_path / "b")).tokenizer.path == path
  assert not os.path.exists(tmp_path / "b" / "tokenizer")


def test_translation_shares_one_vocabulary_for_source_and_target(tmp_path):
  cfg = DataConfig(name="synthetic_seq2seq/add", data_dir=str(tmp_path / "tfds"), src_len=48,
                   tgt_len=24, packing="pad", shuffle_buffer=8, tokenizer="sentencepiece",
                   spm_vocab_size=300)
  data = seq2seq_data(cfg, 4, seed=0, workdir=str(tmp_path / "run"))
  tok = data.tokenizer
  batch = data.next_train_batch()
  for src, tgt in zip(batch["inputs"], batch["targets"]):
    a, b = tok.decode(src[src > 2]).split("+")
    assert int(tok.decode(tgt[tgt > 2])) == int(a) + int(b)


def test_training_with_a_trained_vocabulary_reports_bits_per_byte(tiny_corpus, tmp_path):
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.train.loop import train_and_evaluate
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir, c.data.data_dir = tiny_corpus["source_dir"], tiny_corpus["data_dir"]
    c.data.validation_percent, c.data.seq_len = 20, 16
    c.data.tokenizer, c.data.spm_vocab_size = "sentencepiece", 300
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
    c.train.batch_size, c.train.num_steps, c.train.eval_every = 8, 2, 2
  final = train_and_evaluate(from_config_dict(c), str(tmp_path / "run"))
  assert os.path.exists(tmp_path / "run" / "tokenizer" / "spm300.model")
  # A fresh model is near uniform over its vocabulary: bits per byte near
  # ln(V) / ln 2 / (bytes per token); the tokenizer's byte lengths give the denominator.
  tok = build_tokenizer("sentencepiece", str(tmp_path / "run" / "tokenizer" / "spm300.model"))
  text = open(f"{tiny_corpus['source_dir']}/pkg/mod_00.py").read()
  bytes_per_token = len(text.encode()) / len(tok.encode(text))
  expected = np.log(tok.vocab_size) / np.log(2) / bytes_per_token
  assert 0.6 * expected < final["bits_per_byte"] < 1.4 * expected
