"""`--mode=prepare` (transformer/data/prepare.py): a dataset the pipeline reads, as a token file."""

import os
import subprocess
import sys

import numpy as np

from transformer.config import DataConfig
from transformer.data import pipeline, token_file
from transformer.data.prepare import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data_config(corpus, **kw) -> DataConfig:
  return DataConfig(name="local_text", source_dir=corpus["source_dir"],
                    data_dir=corpus["data_dir"], validation_percent=20, **kw)


def test_token_file_holds_the_pipelines_token_stream(tiny_corpus, tmp_path):
  cfg = _data_config(tiny_corpus)
  lines = []
  meta = prepare(cfg, str(tmp_path / "tokens"), log=lines.append)
  assert meta["dtype"] == "uint16" and meta["vocab_size"] == 259
  assert meta["tokenizer"] == "bytes" and set(meta["splits"]) == {"train", "validation"}
  assert any("train:" in line and "tokens" in line for line in lines)

  builder = pipeline.get_builder(cfg)  # what data.packing=concat cuts into rows
  tok = pipeline.tokenizer_for(cfg, builder, ["text"])
  docs = pipeline._documents(pipeline.examples(builder, "train", shuffle_seed=None,
                                               shuffle_buffer=1), "text", tok, bos=False)
  expected = np.concatenate([d.numpy() for d in docs])
  stream = np.fromfile(tmp_path / "tokens" / "train.bin", "<u2")
  np.testing.assert_array_equal(stream, expected)
  assert meta["splits"]["train"]["documents"] == int((expected == tok.eos_id).sum())


def test_sentencepiece_model_travels_with_the_token_file(tiny_corpus, tmp_path):
  cfg = _data_config(tiny_corpus, tokenizer="sentencepiece", spm_vocab_size=300)
  directory = str(tmp_path / "tokens")
  meta = prepare(cfg, directory, log=lambda line: None)
  assert meta["tokenizer"] == "sentencepiece"
  assert os.path.isfile(os.path.join(directory, meta["spm_model"]))
  tokenizer = token_file.load_tokenizer(directory, meta)
  stream = np.fromfile(os.path.join(directory, "validation.bin"), "<u2")
  first = stream[:list(stream).index(tokenizer.eos_id)]
  assert tokenizer.decode(first).startswith("# file")


def test_prepare_needs_a_folder():
  proc = subprocess.run([sys.executable, "launch.py", "--mode=prepare"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2 and "--prepare_dir" in proc.stderr
