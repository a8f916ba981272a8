"""`data.tokenizer=hf:<tokenizer.json>` and `gpt2:<ranks file>` (transformer/data/tokenizers.py):
a byte-level BPE trained with `tokenizers` on the stdlib corpus (no network), its round trip,
exact byte lengths for bits per byte, the tf.data path, and `--mode=prepare` with it."""

import base64
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from transformer.config import ConfigError, DataConfig
from transformer.data import token_file
from transformer.data.prepare import prepare
from transformer.data.tokenizers import HFTokenizer, TiktokenTokenizer, build_tokenizer, train_bpe

_STDLIB = os.path.dirname(os.__file__)
_UNSEEN = "  x = {'k': [1, 2]}  # 日本語 and emoji 🙂\n\n\tz"


def _stdlib_texts(limit=40):
  for path in sorted(glob.glob(os.path.join(_STDLIB, "*.py")))[:limit]:
    with open(path, encoding="utf-8", errors="replace") as f:
      yield f.read()


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
  return train_bpe(_stdlib_texts(), str(tmp_path_factory.mktemp("bpe") / "tokenizer.json"),
                   vocab_size=600)


def test_bpe_round_trip_and_exact_byte_lengths(bpe_path):
  tok = build_tokenizer(f"hf:{bpe_path}")
  assert isinstance(tok, HFTokenizer) and tok.vocab_size == 600 + 3
  texts = list(_stdlib_texts(limit=3)) + [_UNSEEN]
  for text in texts:
    ids = tok.encode(text)
    assert min(ids) >= 3 and max(ids) < tok.vocab_size  # 0, 1, 2 stay pad, bos, eos
    assert tok.decode(ids) == text
    # bits per byte divides by these: the UTF-8 bytes of the decoded text, not a token count
    assert int(tok.byte_lengths[ids].sum()) == len(tok.decode(ids).encode("utf-8"))
  assert len(tok.encode(texts[0])) < 0.6 * len(texts[0].encode())  # it learned merges
  np.testing.assert_array_equal(tok.byte_lengths[:3], 0)
  # a token that is part of a multi-byte character still counts its own bytes, not U+FFFD's
  emoji = tok.encode("🙂")
  assert int(tok.byte_lengths[emoji].sum()) == 4 and len(emoji) > 1


def test_tf_encode_matches_python(bpe_path):
  tok = build_tokenizer(f"hf:{bpe_path}")
  texts = [_UNSEEN, "def f():\n    return 1\n"]
  ds = tf.data.Dataset.from_tensor_slices(texts).map(tok.tf_encode)
  for text, ids in zip(texts, ds.as_numpy_iterator()):
    assert ids.tolist() == tok.encode(text)


def test_prepare_writes_bpe_tokens_that_read_back(tiny_corpus, bpe_path, tmp_path):
  cfg = DataConfig(name="local_text", source_dir=tiny_corpus["source_dir"],
                   data_dir=tiny_corpus["data_dir"], validation_percent=20,
                   tokenizer=f"hf:{bpe_path}")
  directory = str(tmp_path / "tokens")
  meta = prepare(cfg, directory, log=lambda line: None)
  assert meta["tokenizer"] == "hf:tokenizer/tokenizer.json" and meta["vocab_size"] == 603
  assert os.path.isfile(os.path.join(directory, "tokenizer", "tokenizer.json"))
  tok = token_file.load_tokenizer(directory, meta)  # the folder's own copy
  stream = np.fromfile(os.path.join(directory, "validation.bin"), "<u2")
  docs = np.split(stream, np.flatnonzero(stream == tok.eos_id) + 1)[:-1]
  assert len(docs) == meta["splits"]["validation"]["documents"]
  sources = sorted(open(p).read() for p in glob.glob(os.path.join(tiny_corpus["source_dir"],
                                                                  "**", "*.py"), recursive=True))
  assert all(tok.decode(d[:-1]) in sources for d in docs)


def _ranks_file(path, tok: HFTokenizer) -> str:
  """A tiktoken ranks file from the trained BPE: its tokens' bytes, ranked by id."""
  pieces = sorted({tok._token_bytes(i) for i in range(tok._raw_vocab)} - {b""},
                  key=lambda b: (len(b), b))
  singles = [bytes([b]) for b in range(256)]
  ordered = singles + [p for p in pieces if len(p) > 1]
  with open(path, "w") as f:
    for rank, piece in enumerate(ordered):
      f.write(f"{base64.b64encode(piece).decode()} {rank}\n")
  return str(path)


def test_gpt2_ranks_file_through_tiktoken(bpe_path, tmp_path):
  ranks = _ranks_file(tmp_path / "small.tiktoken", build_tokenizer(f"hf:{bpe_path}"))
  tok = build_tokenizer(f"gpt2:{ranks}")
  assert isinstance(tok, TiktokenTokenizer)
  for text in [_UNSEEN, next(_stdlib_texts(1))]:
    ids = tok.encode(text)
    assert tok.decode(ids) == text and min(ids) >= 3
    assert int(tok.byte_lengths[ids].sum()) == len(text.encode("utf-8"))


@pytest.mark.parametrize("name, message", [
    ("gpt2", "download"), ("hf:", "needs a file"), ("sentencepieces", "choose one of")])
def test_config_refuses_bad_tokenizer_names(name, message):
  with pytest.raises(ConfigError, match=message):
    DataConfig(tokenizer=name)


def test_missing_or_broken_files_are_one_line_errors(tmp_path):
  with pytest.raises(ConfigError, match="is not a file"):
    build_tokenizer(f"hf:{tmp_path / 'nope.json'}")
  bad = tmp_path / "bad.json"
  bad.write_bytes(b"\xff\xfe not json")
  with pytest.raises(ConfigError, match="not a readable tokenizer.json"):
    build_tokenizer(f"hf:{bad}")
  with pytest.raises(ConfigError, match="not a tiktoken ranks file"):
    build_tokenizer(f"gpt2:{bad}")


def test_no_bits_per_byte_when_token_bytes_do_not_add_up(tmp_path):
  """A tokenizer whose decoder joins tokens with spaces: per-token bytes would overcount, so
  byte_lengths is None (no bits per byte) rather than a wrong figure."""
  from tokenizers import Tokenizer, models, pre_tokenizers, trainers
  tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  tok.train_from_iterator(["def f x return naïve café"] * 3,
                          trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
  tok.save(str(tmp_path / "words.json"))
  assert build_tokenizer(f"hf:{tmp_path / 'words.json'}").byte_lengths is None


def test_sampling_reads_the_runs_tokenizer_file(bpe_path, tmp_path):
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.data.run_tokenizer import run_tokenizer
  c = get_config("smoke")
  with c.unlocked():
    c.data.tokenizer = f"hf:{bpe_path}"
  tok = run_tokenizer(from_config_dict(c), str(tmp_path))
  assert isinstance(tok, HFTokenizer) and tok.decode(tok.encode(_UNSEEN)) == _UNSEEN


def _ranks_by_id(path, tok: HFTokenizer) -> str:
  """The trained BPE as a tiktoken ranks file ranked by its ids (the trainer numbers the
  byte alphabet, then each merge's token in the order learned), so tiktoken encodes as
  `tokenizers` does and its `<|endoftext|>` (rank n) is the BPE's last id too."""
  with open(path, "w") as f:
    for i in range(tok._raw_vocab - 1):
      f.write(f"{base64.b64encode(tok._token_bytes(i)).decode()} {i}\n")
  return str(path)


def test_a_rewritten_ranks_file_is_read_again_not_served_from_a_cache(bpe_path, tmp_path):
  """tiktoken's own loader caches by path: a rewritten file kept its old ranks."""
  path = _ranks_by_id(tmp_path / "ranks.tiktoken", build_tokenizer(f"hf:{bpe_path}"))
  before = build_tokenizer(f"gpt2:{path}")
  a, b = before.encode("a"), before.encode("b")
  lines = open(path).read().splitlines()
  swapped = {base64.b64encode(c).decode(): base64.b64encode(d).decode()
             for c, d in ((b"a", b"b"), (b"b", b"a"))}
  with open(path, "w") as f:  # the same path, the ranks of "a" and "b" exchanged
    for line in lines:
      token, rank = line.split()
      f.write(f"{swapped.get(token, token)} {rank}\n")
  after = build_tokenizer(f"gpt2:{path}")
  assert (after.encode("a"), after.encode("b")) == (b, a) and a != b
  assert before.encode("a") == a  # the object built earlier keeps what it read


def test_a_literal_end_of_text_is_ordinary_text_for_hf_and_gpt2(bpe_path, tmp_path):
  """One rule for both: `<|endoftext|>` spelled in the data is its characters, never the
  special id (tiktoken's encode_ordinary; `tokenizers` matched it as the special token)."""
  hf = build_tokenizer(f"hf:{bpe_path}")
  gpt2 = build_tokenizer(f"gpt2:{_ranks_by_id(tmp_path / 'ranks.tiktoken', hf)}")
  special = hf._tok.token_to_id("<|endoftext|>") + 3
  assert special == gpt2.vocab_size - 1 == hf.vocab_size - 1
  text = "x = 1<|endoftext|>def f():\n  return '<|endoftext|>'\n"
  ids = hf.encode(text)
  assert ids == gpt2.encode(text) and special not in ids and len(ids) > 8
  assert hf.decode(ids) == gpt2.decode(ids) == text
  assert int(hf.byte_lengths[ids].sum()) == len(text.encode())


def test_an_unreadable_tokenizer_file_is_one_line(tmp_path):
  path = tmp_path / "locked.tiktoken"
  path.write_text("YQ== 0\n")
  path.chmod(0)
  try:
    if os.access(path, os.R_OK):
      pytest.skip("root reads any file")
    for kind in ("hf", "gpt2"):
      with pytest.raises(ConfigError, match="cannot be read"):
        build_tokenizer(f"{kind}:{path}")
  finally:
    path.chmod(0o644)
