"""`--mode=export` of a run whose ids are a tokenizer's + 3 (transformer/weights/hf_tokenizer.py,
hf_gpt2.py): our pad/BOS/EOS rows are dropped so exported row i is the tokenizer's id i, the
tokenizer goes beside the weights, and `model.init_from=hf:DIR` puts the rows back.

The test of record is the independent float64 NumPy GPT-2 (tests/gpt2_numpy_reference.py),
fed the ids the exported tokenizer.json gives (loaded by the `tokenizers` package itself): its
logits equal our model's for ids + 3, restricted to our rows 3.. . tiktoken's GPT-2 ranks are
converted to Hugging Face's vocab.json + merges.txt; a BPE trained with `tokenizers` is the
reference there (its own merges must come back from its ranks, and `tokenizers` running them
must encode as tiktoken does).
"""

import base64
import dataclasses
import glob
import hashlib
import json
import os
import sys

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from tests.gpt2_numpy_reference import gpt2_logits
from configs import gpt2_small
from tests.test_hf_gpt2 import ATOL, TINY, random_params, tiny_config
from transformer import kinds
from transformer.cli import export
from transformer.config import ConfigError
from transformer.data import foreign_meta
from transformer.data.facts import DataFacts
from transformer.data.tokenizers import build_tokenizer, train_bpe
from transformer.weights import hf_gpt2
from transformer.weights import hf_tokenizer
from transformer.weights import init_from

BPE_VOCAB = 300  # the tokenizer's ids 0..299, 299 = <|endoftext|>; the run's 303
TEXT = "def f(x):\n    return x + 1  # naïve café 🙂\n"
_STDLIB = os.path.dirname(os.__file__)


def _texts(limit=12):
  for path in sorted(glob.glob(os.path.join(_STDLIB, "*.py")))[:limit]:
    with open(path, encoding="utf-8", errors="replace") as f:
      yield f.read()


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
  return train_bpe(_texts(), str(tmp_path_factory.mktemp("bpe") / "tokenizer.json"), BPE_VOCAB)


def _token_folder(directory, bpe_path, tokenizer):
  """A nanoGPT folder (raw uint16 train.bin / val.bin of the BPE's own ids) and its meta.json,
  naming `tokenizer` (`hf:<file>` or `ids`)."""
  raw = np.asarray(build_tokenizer(f"hf:{bpe_path}").encode(TEXT * 4), np.uint16) - 3
  os.makedirs(directory, exist_ok=True)
  for split in ("train", "val"):
    raw.tofile(os.path.join(directory, f"{split}.bin"))
  foreign_meta.describe(str(directory), "nanogpt", BPE_VOCAB, tokenizer=tokenizer)
  return str(directory)


def _workdir(path, params, data: dict, **model):
  """A run's workdir as --mode=export reads it: config.json (test_hf_gpt2's tiny GPT-2 with
  `model` and `data` overrides) and checkpoint 7 holding `params`."""
  c = gpt2_small.get_config()
  for k, v in {**TINY, **model}.items():
    setattr(c.model, k, v)
  for k, v in data.items():
    setattr(c.data, k, v)
  config = c.to_dict()
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)
  manager = ocp.CheckpointManager(os.path.join(path, "checkpoints"),
                                  item_names=("state", "config"))
  manager.save(7, args=ocp.args.Composite(state=ocp.args.StandardSave({"params": params}),
                                          config=ocp.args.JsonSave(config)))
  manager.wait_until_finished()
  manager.close()
  return str(path)


def _shifted_run(tmp_path, bpe_path, tokenizer="hf:"):
  tokens = _token_folder(tmp_path / "tokens", bpe_path,
                         f"hf:{bpe_path}" if tokenizer == "hf:" else tokenizer)
  cfg = tiny_config(vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)  # 303 ids, 320 rows
  model, params = random_params(cfg, seed=5)
  workdir = _workdir(tmp_path / "run", params, {"name": "token_file", "source_dir": tokens},
                     vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  return cfg, model, params, workdir


def test_exported_bpe_run_is_the_tokenizers_ids_and_the_reference_gives_our_logits(
    tmp_path, bpe_path):
  cfg, model, params, workdir = _shifted_run(tmp_path, bpe_path)
  out, lines = tmp_path / "hf", []
  export.export_run(workdir, str(out), log=lines.append)
  saved = json.loads((out / "config.json").read_text())
  assert saved["vocab_size"] == BPE_VOCAB
  assert saved["bos_token_id"] == saved["eos_token_id"] == BPE_VOCAB - 1  # <|endoftext|>
  assert "ids are the tokenizer's" in lines[0] and "tokenizer.json" in lines[0]
  # the tokenizer is the run's (the token folder's copy of it), loaded by its own library
  assert (out / "tokenizer.json").read_bytes() == open(bpe_path, "rb").read()
  hf_tok = Tokenizer.from_file(str(out / "tokenizer.json"))
  ids = np.asarray([hf_tok.encode(TEXT).ids[:cfg.model.max_len]])
  assert ids.shape[1] == cfg.model.max_len and ids.max() < saved["vocab_size"]
  ref = gpt2_logits(str(out), ids)
  assert ref.shape == (1, cfg.model.max_len, BPE_VOCAB)
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(ids + 3)), np.float64)
  assert ours.shape[-1] == BPE_VOCAB + 3
  np.testing.assert_allclose(ours[..., 3:], ref, rtol=0, atol=ATOL)
  assert np.abs(ref).max() > 1
  settings = json.loads((out / "tokenizer_config.json").read_text())
  assert settings["eos_token"] == "<|endoftext|>"


def test_import_puts_three_rows_back_and_export_again_is_bitwise(tmp_path, bpe_path):
  cfg = tiny_config(vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  _, params = random_params(cfg, seed=6)
  out = tmp_path / "hf"
  hf_gpt2.write_hf_dir(cfg.model, params, str(out), id_offset=3)
  lines = []
  loaded = init_from.matching_params(f"hf:{out}", params, lines.append,
                                     vocab_size=BPE_VOCAB + 3, id_offset=3)
  want = init_from._flat(params)
  assert loaded.keys() == want.keys()
  emb, ours = loaded["embedder/token_embedding/embedding"], want[
      "embedder/token_embedding/embedding"]
  assert emb.shape == ours.shape == (320, cfg.model.d_model)
  assert np.array_equal(emb[3:303], ours[3:303])  # the shared rows, bitwise
  mean = ours[3:303].astype(np.float64).mean(0).astype(np.float32)
  assert np.array_equal(emb[:3], np.stack([mean] * 3)) and not emb[303:].any()
  for path, leaf in want.items():
    if path != "embedder/token_embedding/embedding":
      assert np.array_equal(loaded[path], leaf), path
  again = tmp_path / "again"
  hf_gpt2.write_hf_dir(cfg.model, init_from.merge(params, loaded), str(again), id_offset=3)
  assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
  # a run whose 303 ids are its own (not shifted): the embedding starts fresh, said in a line
  lines.clear()
  other = init_from.matching_params(f"hf:{out}", params, lines.append,
                                    vocab_size=BPE_VOCAB + 3, id_offset=0)
  assert "embedder/token_embedding/embedding" not in other
  assert any("token embedding starts fresh" in line for line in lines)


def test_a_bpe_run_starting_from_the_export_gets_its_rows_back(tmp_path, bpe_path):
  """`model.init_from=hf:DIR` through the task, as a training run builds it: the run's
  tokenizer (hf:, ids + 3) decides where the folder's rows go."""
  cfg = tiny_config(vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  _, params = random_params(cfg, seed=7)
  hf_gpt2.write_hf_dir(cfg.model, params, str(tmp_path / "hf"), id_offset=3)
  new = dataclasses.replace(
      cfg, model=dataclasses.replace(cfg.model, init_from=f"hf:{tmp_path / 'hf'}"),
      data=dataclasses.replace(cfg.data, seq_len=cfg.model.max_len))
  facts = DataFacts.of_tokenizer(build_tokenizer(f"hf:{bpe_path}"))
  task = kinds.build_task(new, facts)
  emb = task.pretrained["embedder/token_embedding/embedding"]
  ours = params["embedder"]["token_embedding"]["embedding"]
  assert emb.shape == ours.shape and np.array_equal(emb[3:303], ours[3:303])


def _ranks(bpe_path) -> dict[bytes, int]:
  """tiktoken ranks of the trained BPE: each token's bytes, ranked by its id (the trainer
  numbers the byte alphabet first, then each merge's token in the order it was learned)."""
  tok = build_tokenizer(f"hf:{bpe_path}")
  return {tok._token_bytes(i): i for i in range(BPE_VOCAB - 1)}


def test_tiktoken_ranks_give_back_the_bpe_merges(bpe_path):
  vocab, merges = hf_tokenizer.ranks_to_bpe(_ranks(bpe_path))
  trained = json.load(open(bpe_path))["model"]
  assert vocab == trained["vocab"]
  assert [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
          for m in trained["merges"]] == merges
  assert len(merges) == BPE_VOCAB - 1 - 256


def test_gpt2_run_exports_vocab_merges_and_a_tokenizer_encoding_as_tiktoken(tmp_path, bpe_path):
  ranks = _ranks(bpe_path)
  ranks_file = tmp_path / "small.tiktoken"
  ranks_file.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n"
                                for t, r in ranks.items()))
  tok = build_tokenizer(f"gpt2:{ranks_file}")
  out = tmp_path / "hf"
  out.mkdir()
  written, special = hf_tokenizer.write_tokenizer(tok, str(out), 16)
  assert {os.path.basename(p) for p in written} == {
      "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"}
  assert special == {"bos_token_id": BPE_VOCAB - 1, "eos_token_id": BPE_VOCAB - 1}
  assert json.loads((out / "vocab.json").read_text())["<|endoftext|>"] == BPE_VOCAB - 1
  from_files = Tokenizer(models.BPE.from_file(str(out / "vocab.json"), str(out / "merges.txt")))
  from_files.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  from_files.decoder = decoders.ByteLevel()
  from_json = Tokenizer.from_file(str(out / "tokenizer.json"))
  for text in [TEXT, "  x = {'k': [1, 2]}\n\n\tz 日本語", *_texts(3)]:
    want = [i - 3 for i in tok.encode(text)]  # tiktoken's own ids
    assert from_json.encode(text).ids == want
    assert from_files.encode(text).ids == want
    assert from_json.decode(want) == text
  assert from_json.encode("a<|endoftext|>b").ids[1] == BPE_VOCAB - 1


def test_ranks_no_bpe_made_are_refused():
  with pytest.raises(ValueError, match="not the merge of two lower-ranked tokens"):
    hf_tokenizer.ranks_to_bpe({b"a": 0, b"b": 1, b"c": 2, b"abc": 3})


@pytest.mark.parametrize("data, kept_rows, says", [
    ({"tokenizer": "bytes"}, 259, "id = UTF-8 byte + 3"),
    ("ids", BPE_VOCAB, "ids are the token files' own")])
def test_runs_without_a_hugging_face_tokenizer_say_what_the_ids_mean(
    tmp_path, bpe_path, data, kept_rows, says):
  if data == "ids":  # a nanoGPT folder described without its tokenizer: rows 0..2 dropped
    cfg, _, params, workdir = _shifted_run(tmp_path, bpe_path, tokenizer="ids")
  else:
    cfg = tiny_config(vocab_size=259)
    _, params = random_params(cfg)
    workdir = _workdir(tmp_path / "run", params, data, vocab_size=259)
  lines = []
  written = export.export_run(workdir, str(tmp_path / "hf"), log=lines.append)
  assert sorted(os.path.basename(p) for p in written) == ["config.json", "model.safetensors"]
  saved = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert saved["vocab_size"] == kept_rows and says in lines[0]
  if data != "ids":  # our own ids: pad, BOS, EOS are rows 0, 1, 2 of the export too
    assert (saved["pad_token_id"], saved["bos_token_id"], saved["eos_token_id"]) == (0, 1, 2)
  else:
    assert "eos_token_id" not in saved


def test_a_sentencepiece_run_keeps_its_ids_and_says_so(tmp_path):
  from transformer.data.tokenizers import train_sentencepiece
  spm = train_sentencepiece(_texts(3), str(tmp_path / "spm.model"), 600)
  vocab = build_tokenizer("sentencepiece", spm).vocab_size
  cfg = tiny_config(vocab_size=vocab)
  _, params = random_params(cfg)
  workdir = _workdir(tmp_path / "run", params, {"tokenizer": "sentencepiece", "spm_model": spm},
                     vocab_size=vocab)
  lines = []
  export.export_run(workdir, str(tmp_path / "hf"), log=lines.append)
  assert json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"] == vocab
  assert f"ids are those of {spm}" in lines[0] and not (tmp_path / "hf" / "tokenizer.json").exists()


def test_a_missing_or_changed_tokenizer_stops_export_before_the_checkpoint(tmp_path, bpe_path):
  """One line, nothing written: the run's checkpoint is not even read (there is none here)."""
  workdir = str(tmp_path / "run")
  for tokenizer, vocab, message in ((f"hf:{tmp_path / 'gone.json'}", 303, "is not a file"),
                                    (f"hf:{bpe_path}", 259, "export needs the tokenizer")):
    c = gpt2_small.get_config()
    c.data.tokenizer, c.model.vocab_size = tokenizer, vocab
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      json.dump(c.to_dict(), f)
    with pytest.raises(ConfigError, match=message):
      export.export_run(workdir, str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()


@pytest.fixture(scope="module")
def other_bpe(tmp_path_factory):
  """Another byte-level BPE of the same size, trained on other files."""
  texts = (open(p, encoding="utf-8", errors="replace").read()
           for p in sorted(glob.glob(os.path.join(_STDLIB, "*.py")))[30:42])
  return train_bpe(texts, str(tmp_path_factory.mktemp("other") / "tokenizer.json"), BPE_VOCAB)


def test_an_export_made_with_another_bpe_of_the_same_size_is_refused_at_import(
    tmp_path, bpe_path, other_bpe):
  """Its 300 rows used to load into a run of another BPE without a word."""
  cfg = tiny_config(vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  _, params = random_params(cfg, seed=8)
  out = tmp_path / "hf"
  hf_gpt2.write_hf_dir(cfg.model, params, str(out), id_offset=3)
  new = dataclasses.replace(
      cfg, model=dataclasses.replace(cfg.model, init_from=f"hf:{out}"),
      data=dataclasses.replace(cfg.data, seq_len=cfg.model.max_len))
  ours = build_tokenizer(f"hf:{bpe_path}")
  theirs = build_tokenizer(f"hf:{other_bpe}")
  assert theirs.vocab_size == ours.vocab_size and theirs.encode(TEXT) != ours.encode(TEXT)
  hf_tokenizer.write_tokenizer(theirs, str(out), cfg.model.max_len)
  with pytest.raises(ConfigError, match=r"^--config.model.init_from='hf:.*': its .*tokenizer"
                                        r"\.json is not this run's tokenizer \(.*\): they encode "
                                        r"a probe text differently .* Train with "
                                        r"--config.data.tokenizer=hf:"):
    kinds.build_task(new, DataFacts.of_tokenizer(ours))
  # the folder's own tokenizer, and the same BPE as tiktoken ranks (same ids, another file)
  assert kinds.build_task(new, DataFacts.of_tokenizer(theirs)).pretrained
  ranks_file = tmp_path / "other.tiktoken"
  ranks_file.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n"
                                for t, r in _ranks(other_bpe).items()))
  as_ranks = build_tokenizer(f"gpt2:{ranks_file}")
  hf_tokenizer.check_folder_tokenizer(str(out), as_ranks, "--config.model.init_from")
  with pytest.raises(ConfigError, match="is not this run's tokenizer"):
    hf_tokenizer.check_folder_tokenizer(str(out), ours, "--config.model.init_from")


def test_a_run_moved_without_its_copy_whose_path_holds_another_bpe_is_not_exported(
    tmp_path, bpe_path, other_bpe):
  """config.json's recorded sha256 is the reference when the run's tokenizer/ copy did not
  travel: before it, the other BPE was exported beside the weights."""
  used = tmp_path / "tokenizer.json"
  used.write_bytes(open(bpe_path, "rb").read())
  cfg = tiny_config(vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  _, params = random_params(cfg, seed=9)
  workdir = _workdir(tmp_path / "run", params, {"tokenizer": f"hf:{used}"},
                     vocab_size=BPE_VOCAB + 3, vocab_pad_multiple=64)
  saved_path = os.path.join(workdir, "config.json")
  saved = json.load(open(saved_path))
  saved["provenance"] = {"tokenizer": {"file": str(used), "sha256": hashlib.sha256(
      used.read_bytes()).hexdigest()}}
  with open(saved_path, "w") as f:
    json.dump(saved, f)
  used.write_bytes(open(other_bpe, "rb").read())
  with pytest.raises(ConfigError, match=r"changed since the run .* put back the file it "
                                        r"trained with"):
    export.export_run(workdir, str(tmp_path / "hf"))
  assert not (tmp_path / "hf").exists()
  used.write_bytes(open(bpe_path, "rb").read())  # put back: it exports, with that tokenizer
  export.export_run(workdir, str(tmp_path / "hf"))
  assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == open(bpe_path, "rb").read()


def test_init_from_an_export_folder_without_hf_says_to_add_it(tmp_path):
  cfg = tiny_config()
  _, params = random_params(cfg)
  out = tmp_path / "export"
  hf_gpt2.write_hf_dir(cfg.model, params, str(out))
  with pytest.raises(ConfigError, match=rf"^--config.model.init_from='{out}': no checkpoints/ "
                                        r"folder there; it holds a Hugging Face export .*: give "
                                        rf"--config.model.init_from=hf:{out}\.$"):
    init_from.load_params(str(out))
  (out / "model.safetensors").unlink()  # config.json with model_type alone says it too
  with pytest.raises(ConfigError, match="it holds a Hugging Face export"):
    init_from.load_params(str(out))
  with pytest.raises(ConfigError, match="no checkpoints/ folder there; point it at the workdir"):
    init_from.load_params(str(tmp_path / "empty"))


def test_a_folder_tokenizer_that_cannot_be_compared_is_refused_in_one_line(
    tmp_path, bpe_path, monkeypatch):
  """An unreadable tokenizer.json, or no `tokenizers` package to read it: refused, not
  taken on trust (nothing compared them before)."""
  ours = build_tokenizer(f"hf:{bpe_path}")
  (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
  with pytest.raises(ConfigError, match=r"^--config.model.init_from: .*tokenizer\.json is not a "
                                        r"readable tokenizer\.json \(.*\), so it cannot be "
                                        r"compared"):
    hf_tokenizer.check_folder_tokenizer(str(tmp_path), ours, "--config.model.init_from")
  monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
  with pytest.raises(ConfigError, match=r"`tokenizers` package, which is not installed"):
    hf_tokenizer.check_folder_tokenizer(str(tmp_path), ours, "--config.model.init_from")
  hf_tokenizer.check_folder_tokenizer(str(tmp_path / "none"), ours, "x")  # no file: nothing
