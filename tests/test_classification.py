"""The stdlib_package builder, classification input and masked-LM chunks."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from transformer.config import ConfigError, DataConfig
from transformer.data.builders.stdlib_package import chunk_text, stdlib_package_builder
from transformer.data.pipeline import classification_data, mlm_data
from transformer.data.tokenizers import ByteTokenizer


@pytest.fixture(scope="module")
def package_corpus(tmp_path_factory):
  """Three 'packages' whose files differ in vocabulary, 12 files each."""
  root = tmp_path_factory.mktemp("pkgs")
  src = root / "src"
  vocab = {"alpha": "async await loop", "beta": "header message mime", "gamma": "widget frame"}
  for pkg, words in vocab.items():
    (src / pkg).mkdir(parents=True)
    for i in range(12):
      lines = [f"# {pkg} {i}"] + [f"{words} {j}" for j in range(40)]
      (src / pkg / f"m{i}.py").write_text("\n".join(lines) + "\n")
  (src / "top.py").write_text("no package\n")
  return {"source_dir": str(src), "data_dir": str(root / "tfds")}


def test_chunk_text_cuts_at_line_ends():
  text = "aaaa\nbb\ncccccc\nd\n"
  assert chunk_text(text, 6) == ["aaaa\nbb\n", "cccccc\n", "d\n"]
  assert "".join(chunk_text(text, 6)) == text


def test_builder_labels_chunks_with_their_package(package_corpus):
  builder = stdlib_package_builder(package_corpus["source_dir"], 25, package_corpus["data_dir"],
                                   chunk_chars=200)
  builder.download_and_prepare()
  names = builder.info.features["label"].names
  assert names == ["alpha", "beta", "gamma"]
  paths = {}
  for split in ("train", "validation"):
    for ex in tfds.as_numpy(builder.as_dataset(split=split)):
      pkg = names[ex["label"]]
      assert ex["path"].decode().startswith(pkg + "/") and ex["text"].decode().strip()
      paths.setdefault(ex["path"], set()).add(split)
  assert all(len(s) == 1 for s in paths.values())  # a file is in one split only
  assert len(paths) == 36


def _cfg(corpus, **kw):
  return DataConfig(name="stdlib_package", source_dir=corpus["source_dir"],
                    data_dir=corpus["data_dir"], validation_percent=25, seq_len=48,
                    shuffle_buffer=32, **kw)


def test_classification_batches(package_corpus):
  data = classification_data(_cfg(package_corpus, packing="pad"), 8, seed=0)
  assert data.num_classes == 3
  batch = data.next_train_batch()
  assert batch["inputs"].shape == (8, 48) and batch["label"].shape == (8,)
  assert batch["label"].dtype == np.int32 and batch["example_weight"].dtype == np.float32
  np.testing.assert_array_equal(batch["example_weight"], 1.0)
  assert (batch["inputs"][:, 0] == ByteTokenizer.bos_id).all()
  names = ["alpha", "beta", "gamma"]
  tok = ByteTokenizer()
  for row, label in zip(batch["inputs"], batch["label"]):
    text = tok.decode(row)
    # The chunk's words give its package away (the files were written that way).
    assert {"alpha": "async", "beta": "header", "gamma": "widget"}[names[label]] in text

  eval_batches = list(data.eval_batches())
  n_eval = sum(int(b["example_weight"].sum()) for b in eval_batches)
  builder = stdlib_package_builder(package_corpus["source_dir"], 25, package_corpus["data_dir"])
  assert n_eval == builder.info.splits["validation"].num_examples
  last = eval_batches[-1]
  pad_rows = last["example_weight"] == 0
  assert (last["inputs"][pad_rows] == 0).all()


def test_classification_needs_padding(package_corpus):
  with pytest.raises(ConfigError, match="packing=pad"):
    classification_data(_cfg(package_corpus, packing="pack"), 8, seed=0)


@pytest.mark.parametrize("packing", ["concat", "pack"])
def test_mlm_chunks_are_unshifted_text(tiny_corpus, packing):
  cfg = DataConfig(source_dir=tiny_corpus["source_dir"], data_dir=tiny_corpus["data_dir"],
                   validation_percent=20, seq_len=32, shuffle_buffer=16, packing=packing)
  batch = mlm_data(cfg, 4, seed=0).next_train_batch()
  assert batch["inputs"].shape == (4, 32)
  np.testing.assert_array_equal(batch["inputs"], batch["targets"])
  np.testing.assert_array_equal(batch["weights"], batch["inputs"] != 0)
  if packing == "pack":
    assert set(batch) >= {"segment_ids", "positions"}
    np.testing.assert_array_equal(batch["segment_ids"] == 0, batch["inputs"] == 0)
