"""The stdlib corpus as a token file without TensorFlow (transformer/data/local_tokens.py),
checked against `--mode=prepare` (TFDS and TensorFlow, an independent path), and written in a
process where TensorFlow cannot be imported."""

import os
import subprocess
import sys

import numpy as np
import pytest

from transformer.config import ConfigError, DataConfig
from transformer.data import token_file
from transformer.data.local_tokens import write_local_token_file
from transformer.data.prepare import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _documents(directory: str, split: str, eos: int) -> list[tuple]:
  """The split's documents (the stream cut after each EOS), sorted: order aside, the corpus."""
  stream = np.fromfile(os.path.join(directory, f"{split}.bin"), "<u2").tolist()
  docs, current = [], []
  for t in stream:
    if t == eos:
      docs.append(tuple(current))
      current = []
    else:
      current.append(t)
  assert not current, "the stream ends with an EOS"
  return sorted(docs)


def test_token_file_holds_what_prepare_writes_for_local_text(tiny_corpus, tmp_path):
  src = tiny_corpus["source_dir"]
  with open(os.path.join(src, "pkg", "latin1.py"), "wb") as f:  # not UTF-8: replaced, as TFDS
    f.write(b"name = 'caf\xe9'\n")
  ours = write_local_token_file(str(tmp_path / "ours"), src, validation_percent=20)
  theirs = prepare(DataConfig(name="local_text", source_dir=src, validation_percent=20,
                              data_dir=tiny_corpus["data_dir"]), str(tmp_path / "prepared"),
                   log=lambda _: None)
  for key in ("dtype", "vocab_size", "pad_id", "bos_id", "eos_id", "tokenizer"):
    assert ours[key] == theirs[key], key
  assert set(ours["splits"]) == set(theirs["splits"]) == {"train", "validation"}
  for split in ("train", "validation"):
    mine = _documents(str(tmp_path / "ours"), split, ours["eos_id"])
    assert mine == _documents(str(tmp_path / "prepared"), split, theirs["eos_id"]), split
    assert ours["splits"][split]["tokens"] == theirs["splits"][split]["tokens"]
  texts = [bytes(t - 3 for t in d) for split in ("train", "validation")
           for d in _documents(str(tmp_path / "ours"), split, ours["eos_id"])]
  assert "name = 'caf\ufffd'\n".encode() in texts  # the undecodable byte replaced


def test_an_empty_split_or_missing_folder_is_a_clear_error(tmp_path):
  (tmp_path / "one").mkdir()
  (tmp_path / "one" / "a.py").write_text("x = 1\n")
  with pytest.raises(ConfigError, match="empty split"):
    write_local_token_file(str(tmp_path / "out"), str(tmp_path / "one"))
  with pytest.raises(ConfigError, match="not a folder"):
    write_local_token_file(str(tmp_path / "out"), str(tmp_path / "missing"))


def test_written_where_tensorflow_cannot_be_imported(tiny_corpus, tmp_path):
  out = str(tmp_path / "tokens")
  code = ("from transformer.data.local_tokens import write_local_token_file\n"
          f"write_local_token_file({out!r}, {tiny_corpus['source_dir']!r}, "
          "validation_percent=20)")
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "no_tensorflow.py"),
                         "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "NO-TF CHECK FAILED" not in proc.stdout + proc.stderr
  meta = token_file.read_meta(out)
  assert meta["splits"]["train"]["documents"] + meta["splits"]["validation"]["documents"] == 40
