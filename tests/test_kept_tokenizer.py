"""A run keeps its tokenizer file (transformer/data/run_tokenizer.py): a copy in
`<workdir>/tokenizer/` at each start; a resume, eval, sample or export whose configured file has
changed since is refused in one line; a configured file that is gone is replaced by the copy;
workdirs made before the copy existed read the configured file as before."""

import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil

import pytest

from transformer import provenance
from transformer.config import ConfigError, from_config_dict
from transformer.data import run_tokenizer as rt
from transformer.data.tokenizers import HFTokenizer, train_bpe
from transformer.sampling import Sampling

_STDLIB = os.path.dirname(os.__file__)
TEXT = "def f(x):\n    return x + 1  # naïve café\n"


def _texts(start, limit=8):
  for path in sorted(glob.glob(os.path.join(_STDLIB, "*.py")))[start:start + limit]:
    with open(path, encoding="utf-8", errors="replace") as f:
      yield f.read()


@pytest.fixture(scope="module")
def two_bpes(tmp_path_factory):
  """Two byte-level BPEs of the same size (300 ids) trained on different files."""
  folder = tmp_path_factory.mktemp("bpes")
  return [train_bpe(_texts(start), str(folder / f"bpe{start}.json"), 300) for start in (0, 20)]


def _config(tokenizer_path, tiny_corpus=None):
  from configs.default import get_config
  c = get_config("smoke")
  with c.unlocked():
    c.data.tokenizer = f"hf:{tokenizer_path}"
    if tiny_corpus:
      c.data.source_dir, c.data.data_dir = tiny_corpus["source_dir"], tiny_corpus["data_dir"]
      c.data.validation_percent, c.data.seq_len = 20, 16
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
    c.train.batch_size, c.train.num_steps, c.train.eval_every = 8, 4, 2
  return from_config_dict(c)


def test_a_changed_file_is_refused_a_missing_one_is_replaced_by_the_copy(two_bpes, tmp_path):
  used = str(tmp_path / "tokenizer.json")
  shutil.copyfile(two_bpes[0], used)
  config, workdir = _config(used), str(tmp_path / "run")
  kept = rt.keep_tokenizer(config, workdir)
  assert kept == os.path.join(workdir, "tokenizer", "tokenizer.json")
  assert open(kept, "rb").read() == open(used, "rb").read()
  want = HFTokenizer(used).encode(TEXT)
  assert rt.run_tokenizer(config, workdir).encode(TEXT) == want
  shutil.copyfile(two_bpes[1], used)  # another tokenizer of the same size at the same path
  assert HFTokenizer(used).encode(TEXT) != want
  with pytest.raises(ConfigError, match=r"changed since the run .* trained with it \(sha256 "
                                        r"[0-9a-f]{12} then, [0-9a-f]{12} now\); restore it"):
    rt.run_tokenizer(config, workdir)
  os.remove(used)  # gone: the run's copy stands in
  tok = rt.run_tokenizer(config, workdir)
  assert tok.path == kept and tok.encode(TEXT) == want


def test_a_workdir_without_a_copy_reads_the_configured_file(two_bpes, tmp_path):
  config = _config(two_bpes[1])
  tok = rt.run_tokenizer(config, str(tmp_path / "old-run"))
  assert tok.path == two_bpes[1] and not (tmp_path / "old-run").exists()
  assert rt.with_kept_tokenizer(config, str(tmp_path / "old-run")) is config


def test_a_sentencepiece_model_file_is_kept_too(tmp_path):
  from transformer.data.tokenizers import train_sentencepiece
  spm = train_sentencepiece([TEXT * 20], str(tmp_path / "given.model"), 300)
  config = _config("x")
  config = dataclasses.replace(config, data=dataclasses.replace(
      config.data, tokenizer="sentencepiece", spm_model=spm))
  workdir = str(tmp_path / "run")
  kept = rt.keep_tokenizer(config, workdir)
  assert kept.endswith(os.path.join("tokenizer", "spm_model.model"))
  with open(spm, "ab") as f:
    f.write(b"\0")
  with pytest.raises(ConfigError, match="--config.data.spm_model=.*changed since"):
    rt.run_tokenizer(config, workdir)


def test_train_keeps_the_file_and_a_changed_one_stops_resume_eval_and_sample(
    two_bpes, tiny_corpus, tmp_path):
  from transformer.evaluation.evaluate import evaluate_workdir
  from transformer.evaluation.sample import sample_from_workdir
  from transformer.train.loop import train_and_evaluate
  used = str(tmp_path / "tokenizer.json")
  shutil.copyfile(two_bpes[0], used)
  config, workdir = _config(used, tiny_corpus), str(tmp_path / "run")
  train_and_evaluate(config, workdir, stop_after=2)
  kept = os.path.join(workdir, "tokenizer", "tokenizer.json")
  assert open(kept, "rb").read() == open(two_bpes[0], "rb").read()
  shutil.copyfile(two_bpes[1], used)
  metrics = os.path.join(workdir, "metrics.jsonl")
  rows = open(metrics).read()
  with pytest.raises(ConfigError, match="changed since the run"):
    train_and_evaluate(config, workdir)
  assert open(metrics).read() == rows  # refused before any step
  with pytest.raises(ConfigError, match="changed since the run"):
    evaluate_workdir(workdir)
  with pytest.raises(ConfigError, match="changed since the run"):
    sample_from_workdir(workdir, "def", Sampling(max_new=2))
  assert not os.path.exists(os.path.join(workdir, "eval"))
  shutil.copyfile(kept, used)  # restored as the message says: the run resumes and ends
  assert train_and_evaluate(config, workdir)["step"] == 4
  assert json.loads(open(os.path.join(workdir, "config.json")).read())["data"]["tokenizer"] \
      == f"hf:{used}"


def _sha256(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _started(config, workdir):
  """A workdir as a run's start leaves it (`loop._record_start`, without JAX): the copy in
  tokenizer/ and config.json recording the tokenizer file's sha256 under its provenance."""
  rt.keep_tokenizer(config, workdir)
  record = provenance.record_start(workdir, config.to_dict()["data"], [], None,
                                   tokenizer=rt.tokenizer_record(config, workdir))
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(provenance.config_json(config.to_dict(), record))


def test_config_json_records_the_hash_and_a_run_moved_without_its_copy_is_checked(
    two_bpes, tmp_path):
  """Moved as config.json (+ checkpoints/): no tokenizer/ copy, and the configured path now
  holds another BPE of the same size. Before the hash, that BPE was used without a word."""
  used = str(tmp_path / "tokenizer.json")
  shutil.copyfile(two_bpes[0], used)
  config, workdir = _config(used), str(tmp_path / "run")
  _started(config, workdir)
  saved = json.load(open(os.path.join(workdir, "config.json")))
  assert saved["provenance"]["tokenizer"] == {"file": used, "sha256": _sha256(two_bpes[0])}
  shutil.rmtree(os.path.join(workdir, "tokenizer"))
  assert rt.run_tokenizer(config, workdir).encode(TEXT) == HFTokenizer(two_bpes[0]).encode(TEXT)
  shutil.copyfile(two_bpes[1], used)
  u = re.escape(used)
  with pytest.raises(ConfigError, match=rf"^--config.data.tokenizer=hf:{u}: {u} changed "
                                        r"since the run .* \(sha256 [0-9a-f]{12} then, "
                                        r"[0-9a-f]{12} now\); put back the file it trained with "
                                        r"\(the run keeps no copy of it in tokenizer/\)"):
    rt.run_tokenizer(config, workdir)


def test_an_edited_copy_is_named_with_the_intact_original_as_the_fix(two_bpes, tmp_path):
  """The copy changed, the configured file intact: the copy is named, restored from the
  file (the old message named the intact file and advised restoring it from the copy)."""
  used = str(tmp_path / "tokenizer.json")
  shutil.copyfile(two_bpes[0], used)
  config, workdir = _config(used), str(tmp_path / "run")
  _started(config, workdir)
  kept = rt.kept_path(config, workdir)
  shutil.copyfile(two_bpes[1], kept)
  u, k = re.escape(used), re.escape(kept)
  message = (rf"^--config.data.tokenizer=hf:{u}: the run's copy {k} of {u} changed since "
             rf"the run .* as config.json records\); {u} is intact: restore the copy from "
             rf"it \(cp {u} {k}\)\.$")
  with pytest.raises(ConfigError, match=message):
    rt.run_tokenizer(config, workdir)
  os.remove(used)  # the copy edited and the original gone: neither is what the run trained with
  with pytest.raises(ConfigError, match=rf"the run's copy {k} .* and {u} is gone; put "
                                        rf"back the file the run trained with"):
    rt.run_tokenizer(config, workdir)
  shutil.copyfile(two_bpes[0], kept)  # the copy restored: it stands in for the gone file
  assert rt.run_tokenizer(config, workdir).encode(TEXT) == HFTokenizer(two_bpes[0]).encode(TEXT)


def test_a_resume_whose_file_is_gone_reads_the_copy_and_a_moved_run_is_checked_at_every_use(
    two_bpes, tiny_corpus, tmp_path):
  """Resume without the configured file used to stop ("is not a file") in the launcher's
  check and in the data pipeline; eval, sample and export already read the copy. Then the
  run moved without its copy, another BPE at its path: resume, eval and sample refuse."""
  from transformer.cli import preflight
  from transformer.evaluation.evaluate import evaluate_workdir
  from transformer.evaluation.sample import sample_from_workdir
  from transformer.train.loop import train_and_evaluate
  used = str(tmp_path / "tokenizer.json")
  shutil.copyfile(two_bpes[0], used)
  config, workdir = _config(used, tiny_corpus), str(tmp_path / "run")
  train_and_evaluate(config, workdir, stop_after=2)
  saved = os.path.join(workdir, "config.json")
  assert json.load(open(saved))["provenance"]["tokenizer"]["sha256"] == _sha256(two_bpes[0])
  os.remove(used)
  preflight.check_before_run(config, workdir).release()  # the launcher's checks pass
  assert train_and_evaluate(config, workdir)["step"] == 4
  after = json.load(open(saved))
  assert after["data"]["tokenizer"] == f"hf:{used}"  # still the configured path
  assert after["provenance"]["tokenizer"]["sha256"] == _sha256(two_bpes[0])
  shutil.rmtree(os.path.join(workdir, "tokenizer"))  # moved as config.json + checkpoints/
  shutil.copyfile(two_bpes[1], used)
  metrics = os.path.join(workdir, "metrics.jsonl")
  rows = open(metrics).read()
  for use in (lambda: train_and_evaluate(config, workdir), lambda: evaluate_workdir(workdir),
              lambda: sample_from_workdir(workdir, "def", Sampling(max_new=2))):
    with pytest.raises(ConfigError, match="changed since the run .* put back the file it "
                                          "trained with"):
      use()
  assert open(metrics).read() == rows and not os.path.exists(os.path.join(workdir, "eval"))
