"""nanoGPT's and llm.c's token files read as they are (transformer/data/foreign_tokens.py): a
meta.json written beside them, every id read back (3 higher, as the hf:/gpt2: tokenizers give
them), broken headers refused in one line."""

import os
import subprocess
import sys

import numpy as np
import pytest

from transformer.data import foreign_meta, foreign_tokens, token_file
from transformer.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 16


def _ids(n, seed, vocab=50257):
  ids = np.random.default_rng(seed).integers(0, vocab, n)
  ids[::37] = 50256  # documents separated by <|endoftext|>, as nanoGPT writes them
  ids[:4] = (0, 1, 2, vocab - 1)  # the ids that would collide with pad/bos/eos, and the last
  return ids


def _read_back(directory, tokens):
  """Every training chunk and eval row, with the file's ids (3 subtracted) at chunk order."""
  data, meta = token_file.token_file_data(str(directory), SEQ, global_batch_size=4, seed=0)
  it = data.train_iterator
  for step in range(it.batches_per_epoch):
    batch = next(it)
    for row, chunk in enumerate(it.chunk_indices(step)):
      want = tokens[chunk * (SEQ + 1):(chunk + 1) * (SEQ + 1)]
      np.testing.assert_array_equal(batch["inputs"][row] - 3, want[:-1])
      np.testing.assert_array_equal(batch["targets"][row] - 3, want[1:])
      assert batch["weights"][row].all()  # GPT-2's id 0 ("!") is a real token, weighted
  return data, meta


def test_nanogpt_bins_round_trip(tmp_path):
  train, val = _ids(4000, 0), _ids(700, 1)
  train.astype("<u2").tofile(tmp_path / "train.bin")
  val.astype("<u2").tofile(tmp_path / "val.bin")
  meta = foreign_meta.describe(str(tmp_path), "nanogpt", 50257)
  assert meta["vocab_size"] == 50260 and meta["splits"]["validation"]["file"] == "val.bin"
  data, _ = _read_back(tmp_path, train)
  assert data.tokenizer.decode([3, 50259]) == "0 50256"  # ids only: no tokenizer given
  assert data.train_iterator.chunks == 4000 // (SEQ + 1)
  # the eval split in order: every id, the partial last chunk included (a chunk is the
  # row's first input, then its targets)
  chunks = [np.concatenate([b["inputs"][i, :1], b["targets"][i]])
            for b in data.eval_batches() for i in range(len(b["inputs"]))]
  np.testing.assert_array_equal(np.concatenate(chunks)[:val.size] - 3, val)


@pytest.mark.parametrize("magic, version, vocab", [(20240520, 1, 50257),
                                                   (20240801, 7, 128256)])
def test_llmc_bins_round_trip(tmp_path, magic, version, vocab):
  train, val = _ids(3000, 2, vocab), _ids(500, 3, vocab)
  foreign_tokens.write_llmc(str(tmp_path / "tiny_train.bin"), train, magic, version)
  foreign_tokens.write_llmc(str(tmp_path / "tiny_val.bin"), val, magic, version)
  meta = foreign_meta.describe(str(tmp_path), "llmc", vocab)
  assert meta["dtype"] == ("uint16" if version == 1 else "uint32")
  assert meta["splits"]["train"] == {"file": "tiny_train.bin", "tokens": 3000,
                                     "documents": None, "header_bytes": 1024}
  _read_back(tmp_path, train)
  tokens = token_file.load_tokens(str(tmp_path), meta, "validation")
  np.testing.assert_array_equal(tokens[0:val.size] - 3, val)


def test_with_a_tokenizer_the_ids_decode(tmp_path):
  from transformer.data.tokenizers import build_tokenizer, train_bpe
  import textwrap  # a stdlib module as the BPE's training text
  with open(textwrap.__file__, encoding="utf-8") as f:
    path = train_bpe([f.read()], str(tmp_path / "tok" / "tokenizer.json"), 400)
  text = "def f(x):\n    return x + 1\n" * 40
  raw = np.asarray(build_tokenizer(f"hf:{path}").encode(text)) - 3  # the tokenizer's own ids
  raw.astype("<u2").tofile(tmp_path / "train.bin")
  raw.astype("<u2").tofile(tmp_path / "val.bin")
  meta = foreign_meta.describe(str(tmp_path), "nanogpt", 400, tokenizer=f"hf:{path}")
  tok = token_file.load_tokenizer(str(tmp_path), meta)
  tokens = token_file.load_tokens(str(tmp_path), meta, "train")
  assert tok.decode(tokens[0:tokens.size]) == text
  assert tok.byte_lengths is not None and tok.vocab_size == meta["vocab_size"]


def test_bad_files_are_one_line_errors(tmp_path):
  foreign_tokens.write_llmc(str(tmp_path / "a_train.bin"), np.arange(100))
  foreign_tokens.write_llmc(str(tmp_path / "a_val.bin"), np.arange(50))
  with open(tmp_path / "a_val.bin", "r+b") as f:
    f.truncate(1024 + 60)  # torn
  with pytest.raises(ConfigError, match="header says 50 tokens"):
    foreign_meta.describe(str(tmp_path), "llmc", 50257)
  (tmp_path / "a_val.bin").write_bytes(np.zeros(256, "<i4").tobytes())
  with pytest.raises(ConfigError, match="magic 0"):
    foreign_meta.describe(str(tmp_path), "llmc", 50257)
  with pytest.raises(ConfigError, match="fewer than llm.c"):
    (tmp_path / "a_val.bin").write_bytes(b"xx")
    foreign_meta.describe(str(tmp_path), "llmc", 50257)
  (tmp_path / "train.bin").write_bytes(b"abc")
  (tmp_path / "val.bin").write_bytes(b"ab")
  with pytest.raises(ConfigError, match="odd number of bytes"):
    foreign_meta.describe(str(tmp_path), "nanogpt", 50257)


def test_command_line(tmp_path):
  _ids(400, 4).astype("<u2").tofile(tmp_path / "train.bin")
  _ids(100, 5).astype("<u2").tofile(tmp_path / "val.bin")
  run = [sys.executable, "-m", "transformer.data.foreign_meta", str(tmp_path)]
  proc = subprocess.run(run + ["--layout=llmc"], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "llm.c" in proc.stderr
  proc = subprocess.run(run + ["--layout=nanogpt"], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 0 and "train: 400 tokens" in proc.stdout
  assert os.path.isfile(tmp_path / "meta.json")


@pytest.mark.slow  # a launch.py training run: ~90 s on 2 loaded cores
def test_launch_trains_on_an_llmc_file_with_a_bpe_tokenizer(tmp_path):
  """End to end: llm.c files + a BPE tokenizer.json -> launch.py trains, evaluates bits per
  byte (from the tokenizer's byte lengths) and samples text."""
  import json
  import textwrap
  from transformer.data.tokenizers import build_tokenizer, train_bpe
  with open(textwrap.__file__, encoding="utf-8") as f:
    text = f.read()
  path = train_bpe([text], str(tmp_path / "tok" / "tokenizer.json"), 400)
  raw = np.asarray(build_tokenizer(f"hf:{path}").encode(text)) - 3
  data = tmp_path / "data"
  data.mkdir()
  cut = int(raw.size * 0.9)
  foreign_tokens.write_llmc(str(data / "textwrap_train.bin"), raw[:cut])
  foreign_tokens.write_llmc(str(data / "textwrap_val.bin"), raw[cut:])
  assert foreign_meta.main([str(data), "--layout=llmc", "--vocab_size=400",
                            f"--tokenizer=hf:{path}"]) == 0
  workdir = tmp_path / "run"
  overrides = {"data.name": "token_file", "data.source_dir": str(data), "data.seq_len": 32,
               "model.d_model": 32, "model.num_heads": 2, "model.num_layers": 1,
               "model.d_ff": 64, "train.batch_size": 8, "train.num_steps": 4,
               "train.eval_every": 4, "data.eval_batches": 2}
  proc = subprocess.run([sys.executable, "launch.py", "--config=configs/default.py:smoke",
                         f"--workdir={workdir}"] + [f"--config.{k}={v}"
                                                    for k, v in overrides.items()],
                        cwd=ROOT, capture_output=True, text=True, timeout=280)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  bpb = [v for r in rows for k, v in r.items() if "bits_per_byte" in k]
  assert bpb and all(0 < v < 20 for v in bpb), rows[-1]
