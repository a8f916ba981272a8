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
  with pytest.raises(ConfigError, match="not a whole number of uint16 ids"):
    foreign_meta.describe(str(tmp_path), "nanogpt", 50257)


def test_command_line(tmp_path):
  _ids(400, 4).astype("<u2").tofile(tmp_path / "train.bin")
  _ids(100, 5).astype("<u2").tofile(tmp_path / "val.bin")
  run = [sys.executable, "-m", "transformer.data.foreign_meta", str(tmp_path)]
  proc = subprocess.run(run + ["--layout=llmc"], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "llm.c" in proc.stderr
  # no vocabulary given, and none to derive (no meta.pkl, no tokenizer): asked for, not 50257
  proc = subprocess.run(run + ["--layout=nanogpt"], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--vocab_size" in proc.stderr
  assert not os.path.exists(tmp_path / "meta.json")
  proc = subprocess.run(run + ["--layout=nanogpt", "--vocab_size=50257"], cwd=ROOT,
                        capture_output=True, text=True)
  assert proc.returncode == 0 and "train: 400 tokens" in proc.stdout
  assert os.path.isfile(tmp_path / "meta.json")


def _token_run_flags(workdir, data, num_steps: int, eval_every: int) -> list[str]:
  """launch.py's flags of a tiny training run on the token folder `data`."""
  overrides = {"data.name": "token_file", "data.source_dir": str(data), "data.seq_len": 32,
               "model.d_model": 32, "model.num_heads": 2, "model.num_layers": 1,
               "model.d_ff": 64, "train.batch_size": 8, "train.num_steps": num_steps,
               "train.eval_every": eval_every, "data.eval_batches": 2}
  return [sys.executable, "launch.py", "--config=configs/default.py:smoke",
          f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in overrides.items()]


def _train_on_tokens(tmp_path, data, num_steps: int, eval_every: int):
  """A tiny launch.py training run on the token folder `data`; returns its workdir."""
  workdir = tmp_path / "run"
  proc = subprocess.run(_token_run_flags(workdir, data, num_steps, eval_every),
                        cwd=ROOT, capture_output=True, text=True, timeout=280)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir


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
  workdir = _train_on_tokens(tmp_path, data, num_steps=4, eval_every=4)
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  bpb = [v for r in rows for k, v in r.items() if "bits_per_byte" in k]
  assert bpb and all(0 < v < 20 for v in bpb), rows[-1]


# ----------------------------------------------------------------------------- issue 47


def _nanogpt(directory, train, val, dtype="<u2"):
  os.makedirs(directory, exist_ok=True)
  np.asarray(train).astype(dtype).tofile(os.path.join(directory, "train.bin"))
  np.asarray(val).astype(dtype).tofile(os.path.join(directory, "val.bin"))
  return str(directory)


def _llmc_over(path, ids, count, body="<u4"):
  """An llm.c GPT-2 header (uint16, 20240520/v1) saying `count` tokens over `ids` as `body`."""
  header = np.zeros(256, "<i4")
  header[:3] = 20240520, 1, count
  with open(path, "wb") as f:
    f.write(header.tobytes() + np.asarray(ids).astype(body).tobytes())


def test_uint32_ids_read_as_uint16_are_said_and_read_with_the_dtype(tmp_path):
  """A raw nanoGPT file of uint32 ids, or an llm.c uint16 header over a uint32 body, was read
  as uint16 (every other id 0) and trained on. Issue 47 refused it; but those bytes are also
  valid uint16 data of that vocabulary (issue 71: character data with a newline every second
  character), so now it is said in one line naming the fix, and --dtype=uint32 reads it."""
  train, val = _ids(3000, 6), _ids(500, 7)
  raw = _nanogpt(tmp_path / "raw", train, val, "<u4")
  said = []
  foreign_meta.describe(raw, "nanogpt", 50257, warn=said.append)
  assert len(said) == 1 and "as uint32 ids read as uint16 would be" in said[0]
  assert f"foreign_meta {raw} --layout=nanogpt --dtype=uint32" in said[0]
  said.clear()
  meta = foreign_meta.describe(raw, "nanogpt", 50257, dtype="uint32", warn=said.append)
  assert meta["dtype"] == "uint32" and meta["splits"]["train"]["tokens"] == 3000 and not said
  _read_back(raw, train)
  llmc = tmp_path / "llmc"
  llmc.mkdir()
  _llmc_over(llmc / "x_train.bin", train, 2 * train.size)  # count agrees with the size
  _llmc_over(llmc / "x_val.bin", val, 2 * val.size)
  foreign_meta.describe(str(llmc), "llmc", 50257, warn=said.append)
  assert len(said) == 1 and "uint32 ids go under 20240801/v7" in said[0]
  _llmc_over(llmc / "x_train.bin", train, train.size)  # count of ids, body of uint32
  os.remove(llmc / "meta.json")
  with pytest.raises(ConfigError, match="body of uint32 ids under a uint16 header"):
    foreign_meta.describe(str(llmc), "llmc", 50257)
  assert not os.path.exists(llmc / "meta.json")
  with pytest.raises(ConfigError, match="does not fit the files' uint16 ids: give --dtype"):
    foreign_meta.describe(raw, "nanogpt", 128256)  # Llama 3's ids cannot be uint16


def test_ids_without_a_tokenizer_read_and_write_as_numbers(tmp_path):
  """Ids-only runs stopped at the first eval (samples encode their prompt); the prompt is now
  the files' ids as text, read back exactly, and anything else is one line."""
  meta = foreign_meta.describe(_nanogpt(tmp_path, _ids(400, 8), _ids(100, 9)), "nanogpt",
                               50257)
  tok = token_file.load_tokenizer(str(tmp_path), meta)
  ids = [3, 467, 50259, 1000]
  assert tok.decode(ids) == "0 464 50256 997" and tok.encode(tok.decode(ids)) == ids
  assert tok.encode("") == [] and tok.byte_lengths is None
  for text in ("hello", "50257", "-1", "4.5"):
    with pytest.raises(ConfigError, match="its ids 0..50256 written with spaces") as e:
      tok.encode(text)
    assert "\n" not in str(e.value)


def test_ids_messages_give_the_files_ids(tmp_path):
  train = _ids(400, 10)
  train[5] = 50300
  directory = _nanogpt(tmp_path, train, _ids(100, 11))
  with pytest.raises(ConfigError) as e:
    foreign_meta.describe(directory, "nanogpt", 50257)
  assert f"id 50300 at position 5 in {directory}/train.bin is >= vocab_size 50257" in str(
      e.value) and "50303" not in str(e.value) and "\n" not in str(e.value)


def _char_folder(directory, text="First Citizen:\nBefore we proceed, hear me speak. ñ\n"):
  """nanoGPT's data/shakespeare_char/prepare.py on `text`: train.bin, val.bin, meta.pkl."""
  import pickle
  chars = sorted(set(text))
  stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
  ids = [stoi[c] for c in text * 20]
  _nanogpt(directory, ids[:800], ids[800:])
  with open(os.path.join(directory, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
  return str(directory), text, chars


def test_character_data_reads_meta_pkl(tmp_path):
  """nanoGPT's meta.pkl was ignored (vocab 50257 + 3, no decoding, no bits per byte, a GPT-2
  separator recorded): now its characters are the tokenizer and the vocabulary."""
  directory, text, chars = _char_folder(tmp_path)
  meta = foreign_meta.describe(directory, "nanogpt")
  assert meta["vocab_size"] == len(chars) + 3 and meta["tokenizer"] == "chars"
  assert meta["separator"] == "none" and meta["source"]["separator_id"] is None
  tok = token_file.load_tokenizer(directory, meta)
  tokens = token_file.load_tokens(directory, meta, "train")
  assert tok.decode(tokens[0:len(text)]) == text
  assert tok.encode(text) == list(tokens[0:len(text)])
  assert tok.byte_lengths[3 + chars.index("ñ")] == 2 and tok.byte_lengths[:3].sum() == 0
  with pytest.raises(ConfigError, match="'@' is not among the"):
    tok.encode("@")
  with pytest.raises(ConfigError, match=f"--vocab_size=50257, but .*meta.pkl has {len(chars)}"):
    foreign_meta.describe(directory, "nanogpt", 50257)


def test_a_meta_pkl_that_names_code_is_refused(tmp_path):
  import collections
  import pickle
  directory, _, _ = _char_folder(tmp_path)
  with open(os.path.join(directory, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": 2, "itos": collections.OrderedDict({0: "a", 1: "b"})}, f)
  with pytest.raises(ConfigError, match="names collections.OrderedDict") as e:
    foreign_meta.describe(directory, "nanogpt")
  assert "\n" not in str(e.value) and not os.path.exists(os.path.join(directory, "meta.json"))


def test_the_tokenizer_is_copied_and_gives_the_vocabulary(tmp_path):
  from transformer.data.tokenizers import build_tokenizer, train_bpe
  import textwrap
  with open(textwrap.__file__, encoding="utf-8") as f:
    path = train_bpe([f.read()], str(tmp_path / "tok" / "tokenizer.json"), 400)
  raw = np.asarray(build_tokenizer(f"hf:{path}").encode("def f(x):\n  return x\n" * 40)) - 3
  directory = _nanogpt(tmp_path / "data", raw, raw)
  with pytest.raises(ConfigError, match="--vocab_size=500, but the tokenizer .* has 400 ids"):
    foreign_meta.describe(directory, "nanogpt", 500, tokenizer=f"hf:{path}")
  meta = foreign_meta.describe(directory, "nanogpt", tokenizer=f"hf:{path}")
  assert meta["tokenizer"] == "hf:tokenizer/tokenizer.json" and meta["vocab_size"] == 403
  kept = os.path.join(directory, "tokenizer", "tokenizer.json")
  assert open(kept, "rb").read() == open(path, "rb").read()
  os.remove(path)  # the folder keeps working without the original
  assert token_file.load_tokenizer(directory, meta).vocab_size == 403
  with open(kept, "a") as f:
    f.write(" ")
  other = train_bpe(["abc def " * 50], str(tmp_path / "other" / "tokenizer.json"), 300)
  with pytest.raises(ConfigError, match="holds another file than --tokenizer"):
    foreign_meta.describe(directory, "nanogpt", tokenizer=f"hf:{other}")


@pytest.mark.parametrize("magic, version, separator_id", [(20240520, 1, 50256),
                                                          (20240801, 7, 128000)])
def test_each_format_records_its_own_layout(tmp_path, magic, version, separator_id):
  """llm.c starts each document with its end-of-text token, nanoGPT ends each with it."""
  vocab = 50257 if version == 1 else 128256
  foreign_tokens.write_llmc(str(tmp_path / "a_train.bin"), _ids(300, 12, vocab), magic, version)
  foreign_tokens.write_llmc(str(tmp_path / "a_val.bin"), _ids(100, 13, vocab), magic, version)
  meta = foreign_meta.describe(str(tmp_path), "llmc")  # the header gives the vocabulary
  assert meta["vocab_size"] == vocab + 3 and meta["separator"] == "eot_before_each_document"
  assert meta["source"]["separator_id"] == separator_id
  meta = foreign_meta.describe(_nanogpt(tmp_path / "n", _ids(300, 14), _ids(99, 15)),
                               "nanogpt", 50257)
  assert meta["separator"] == "eot_after_each_document"
  assert meta["source"]["separator_id"] == 50256


@pytest.mark.slow  # a launch.py training run: ~30 s on 2 loaded cores
def test_launch_trains_an_ids_only_folder_through_its_evals(tmp_path):
  """Ids only (no tokenizer): trained 10 steps, then stopped at the first eval ("text cannot
  be encoded") with no checkpoint. Now it trains, evaluates the loss (no bits per byte),
  writes its samples as ids and checkpoints."""
  import json
  rng = np.random.default_rng(16)
  data = _nanogpt(tmp_path / "data", rng.integers(0, 300, 6000), rng.integers(0, 300, 600))
  assert foreign_meta.main([data, "--layout=nanogpt", "--vocab_size=300"]) == 0
  workdir = _train_on_tokens(tmp_path, data, num_steps=12, eval_every=10)
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  evals = [r for r in rows if r.get("split") == "eval"]
  assert [r["step"] for r in evals] == [10, 12] and all(r["loss"] > 0 for r in evals)
  assert not any("bits_per_byte" in k for r in rows for k in r)
  assert "12" in os.listdir(workdir / "checkpoints")
  samples = [json.loads(line) for line in open(workdir / "samples.txt")]
  assert samples and all(w.isdigit() and int(w) < 300
                         for s in samples for w in (s["prompt"] + " " + s["sample"]).split())


def test_samples_that_cannot_be_encoded_stop_the_run_before_its_first_step():
  """The in-loop samples' prompts are read and encoded when the loop is built, so a tokenizer
  that cannot encode them stops the run before step 1, not at the first eval."""
  from types import SimpleNamespace
  from configs import default
  from transformer.train.eval_loop import SampleWriter

  class NoText(foreign_tokens.IdsTokenizer):
    def encode(self, text):
      raise ConfigError("cannot encode")

  config = default.get_config()
  data = SimpleNamespace(tokenizer=NoText(300),
                         eval_batches=lambda n: iter([{"inputs": np.arange(3, 40)[None]}]))
  with pytest.raises(ConfigError, match="cannot encode"):
    SampleWriter.maybe(config, SimpleNamespace(config=config), data, par=None)
  data.tokenizer = foreign_tokens.IdsTokenizer(300)
  writer = SampleWriter.maybe(config, SimpleNamespace(config=config), data, par=None)
  assert writer is not None and writer._prompts[0].startswith("0 1 2 3")


# ----------------------------------------------------------------------------- issue 71


def _spaced_chars(directory, separators):
  """nanoGPT character data of "a b c d ..." where every second character is one of
  `separators` (' ', '\\n'), ending in a blank line: every odd id is that of '\\n' (0) or
  ' ' (1)."""
  letters = "abcdefghijklmnopqrstuvwxyz"
  seps = [separators[i % len(separators)] for i in range(len(letters) * 3)]
  text = "".join(c + s for c, s in zip(letters * 3, seps)) + "\n\n"
  return _char_folder(directory, text)


@pytest.mark.parametrize("separators", [" ", "\n", " \n"], ids=["spaces", "newlines", "both"])
def test_character_data_spaced_by_whitespace_is_read_as_uint16(tmp_path, separators):
  """Valid uint16 character data whose every second character is ' ' or '\\n' (ids 1 and 0)
  was refused as "uint32 ids read as uint16"; now it is read as it is: no id is >= the
  vocabulary in the uint16 reading, so nothing says it is anything else."""
  directory, text, chars = _spaced_chars(tmp_path, separators)
  assert chars[0] == "\n" and (chars[1] == " " or separators == "\n")
  warnings = []
  meta = foreign_meta.describe(directory, "nanogpt", warn=warnings.append)
  assert meta["dtype"] == "uint16" and meta["tokenizer"] == "chars"
  tok = token_file.load_tokenizer(directory, meta)
  tokens = token_file.load_tokens(directory, meta, "train")
  assert tok.decode(tokens[0:len(text)]) == text
  data, _ = token_file.token_file_data(directory, SEQ, global_batch_size=4, seed=0)
  assert data.train_iterator.chunks == 800 // (SEQ + 1)
  # an odd id of 1 (' ') rules uint32 out: read as uint32 it is >= 65,536; all 0 ('\n') is
  # what uint32 ids read as uint16 look like too, so that one is said, not refused
  assert len(warnings) == (1 if separators == "\n" else 0), warnings
  assert all("--dtype=uint32" in w and "\n" not in w for w in warnings)


def test_uint16_ids_described_as_uint32_say_so(tmp_path):
  """A uint16 file described with --dtype=uint32 was refused as "id 2097923152 ... >=
  vocab_size" with no word about the dtype; now the message says the uint16 reading fits."""
  directory = _nanogpt(tmp_path / "d", _ids(3000, 20), _ids(500, 21))
  with pytest.raises(ConfigError) as e:
    foreign_meta.describe(directory, "nanogpt", 50257, dtype="uint32")
  message = str(e.value)
  assert "read as uint16 every id is < 50257" in message and "\n" not in message
  assert f"foreign_meta {directory} --layout=nanogpt --dtype=uint16" in message
  assert not os.path.exists(os.path.join(directory, "meta.json"))
  run = [sys.executable, "-m", "transformer.data.foreign_meta", directory, "--layout=nanogpt",
         "--vocab_size=50257", "--dtype=uint32"]
  proc = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1
  assert "--dtype=uint16" in proc.stderr
  # this project's own sidecar saying uint32 over uint16 ids: the fix is its "dtype"
  meta = foreign_meta.describe(directory, "nanogpt", 50257)
  meta.update(dtype="uint32", source={})
  for entry in meta["splits"].values():
    entry["tokens"] //= 2
  token_file.write_meta(directory, meta)
  with pytest.raises(ConfigError, match='read as uint16 every id is < 50257.*"dtype": "uint16"'):
    token_file.token_file_data(directory, SEQ, global_batch_size=4, seed=0)
  llmc = tmp_path / "llmc"  # a Llama 3 header (uint32) over GPT-2's uint16 ids
  llmc.mkdir()
  for split, ids in (("train", _ids(3000, 22)), ("val", _ids(500, 23))):
    header = np.zeros(256, "<i4")
    header[:3] = 20240801, 7, ids.size // 2
    (llmc / f"x_{split}.bin").write_bytes(header.tobytes() + ids.astype("<u2").tobytes())
  with pytest.raises(ConfigError, match="read as uint16 every id is < 128256.*header says "
                     r"20240801/v7.*\(uint16 ids go under 20240520/v1\)\.$"):
    foreign_meta.describe(str(llmc), "llmc")
  assert not os.path.exists(llmc / "meta.json")


def _snapshot(directory):
  """`{relative path: bytes}` of every file under `directory`."""
  found = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, directory)] = f.read()
  return found


def test_describing_a_folder_again_with_another_vocabulary_is_refused(tmp_path):
  """foreign_meta run again with another --vocab_size rewrote meta.json under every run
  trained on the folder, whose resume then failed on array shapes. Now one line, every file
  as it was; --overwrite rewrites it knowingly, and the same vocabulary is no change."""
  rng = np.random.default_rng(30)
  directory = _nanogpt(tmp_path / "d", rng.integers(0, 300, 800), rng.integers(0, 300, 200))
  foreign_meta.describe(directory, "nanogpt", 300)
  before = _snapshot(directory)
  with pytest.raises(ConfigError) as e:
    foreign_meta.describe(directory, "nanogpt", 400)
  message = str(e.value)
  assert "\n" not in message and "vocab_size 300" in message and "would write 400" in message
  assert "--overwrite" in message
  assert _snapshot(directory) == before
  run = [sys.executable, "-m", "transformer.data.foreign_meta", directory, "--layout=nanogpt",
         "--vocab_size=400"]
  proc = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "vocab_size 300" in proc.stderr
  assert _snapshot(directory) == before
  assert foreign_meta.describe(directory, "nanogpt", 300)["vocab_size"] == 303  # no change
  assert foreign_meta.main(run[3:] + ["--overwrite"]) == 0
  assert token_file.read_meta(directory)["vocab_size"] == 403


def test_resume_on_data_whose_vocabulary_changed_names_the_vocabulary(tmp_path):
  """A run whose token folder's meta.json was rewritten with another vocabulary stopped at
  resume blaming "the code or config" and array shapes. Now, before anything is built or
  written, one line naming the vocabulary the run trained with and the data's now."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.train.loop import train_and_evaluate
  rng = np.random.default_rng(31)
  data = _nanogpt(tmp_path / "d", rng.integers(0, 300, 3000), rng.integers(0, 300, 600))
  foreign_meta.describe(data, "nanogpt", 300)
  c = get_config("smoke")
  c.data.name, c.data.source_dir, c.data.seq_len = "token_file", data, 16
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
  c.train.batch_size, c.train.num_steps = 8, 4
  workdir = tmp_path / "run"
  # the run as it trained (vocab 300 + 3), with a checkpoint: what train_and_evaluate resumes
  workdir.mkdir()
  (workdir / "config.json").write_text(from_config_dict(c, vocab_size=303).to_json())
  (workdir / "checkpoints" / "2").mkdir(parents=True)
  foreign_meta.describe(data, "nanogpt", 400, overwrite=True)
  before = _snapshot(workdir)
  with pytest.raises(ConfigError) as e:
    train_and_evaluate(from_config_dict(c), str(workdir))
  message = str(e.value)
  assert "\n" not in message and "model.vocab_size 303" in message, message
  assert f"{data}/meta.json" in message and "403" in message and "another --workdir" in message
  assert _snapshot(workdir) == before


@pytest.mark.slow  # a launch.py training run, then resume and eval: ~2 min on 2 loaded cores
def test_a_trained_run_on_a_redescribed_folder_stops_in_one_line(tmp_path):
  """End to end, as the issue found it: train on a nanoGPT folder, describe it again with
  --overwrite and another --vocab_size, then resume and evaluate: one line each naming the
  vocabulary (not "the code or config" and array shapes), every file of the run kept."""
  rng = np.random.default_rng(32)
  data = _nanogpt(tmp_path / "data", rng.integers(0, 300, 6000), rng.integers(0, 300, 600))
  assert foreign_meta.main([data, "--layout=nanogpt", "--vocab_size=300"]) == 0
  workdir = _train_on_tokens(tmp_path, data, num_steps=2, eval_every=2)
  assert foreign_meta.main([data, "--layout=nanogpt", "--vocab_size=400"]) == 2
  assert foreign_meta.main([data, "--layout=nanogpt", "--vocab_size=400", "--overwrite"]) == 0
  before = _snapshot(workdir)
  for command in (_token_run_flags(workdir, data, num_steps=4, eval_every=2),
                  [sys.executable, "launch.py", "--mode=eval", f"--workdir={workdir}"]):
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "model.vocab_size 303" in lines[-1] and "model.vocab_size 403" in lines[-1], lines
  assert _snapshot(workdir) == before
