"""The count-model baselines a run records at its start (`transformer.train.baselines`)."""

import collections
import json
import math
import os

import numpy as np
import pytest

from transformer.errors import UserFileError
from transformer.train import baselines


def _reference(pairs):
  """float64 plug-in entropies written from their definitions, with Python dicts."""
  n = len(pairs)
  py = collections.Counter(y for _, y in pairs)
  px = collections.Counter(x for x, _ in pairs)
  pxy = collections.Counter(pairs)
  unigram = -sum(c / n * math.log(c / n) for c in py.values())
  bigram = -sum(c / n * math.log(c / px[x]) for (x, _), c in pxy.items())
  return unigram, bigram


def test_plug_in_entropies_match_their_definitions():
  rng = np.random.default_rng(0)
  batches, pairs = [], []
  for _ in range(3):
    inputs = rng.integers(0, 70_000, (4, 9))  # ids past 2**16: the pair code must not mix them
    inputs[:, ::3] = rng.integers(0, 5, (4, 3))  # frequent contexts
    targets = rng.integers(0, 7, (4, 9))
    weights = (rng.random((4, 9)) > 0.2).astype(np.float32)
    batches.append({"inputs": inputs, "targets": targets, "weights": weights})
    pairs += [(int(x), int(y)) for x, y, w in zip(inputs.ravel(), targets.ravel(),
                                                   weights.ravel()) if w > 0]
  unigram, bigram, n = baselines.plug_in_entropies(batches)
  ref_unigram, ref_bigram = _reference(pairs)
  assert n == len(pairs)
  np.testing.assert_allclose([unigram, bigram], [ref_unigram, ref_bigram], rtol=1e-12)
  assert bigram < unigram  # conditioning cannot raise a plug-in entropy


def test_a_deterministic_successor_has_zero_bigram_entropy():
  inputs = np.array([[0, 1, 2, 0, 1, 2]])
  targets = np.array([[1, 2, 0, 1, 2, 0]])
  unigram, bigram, _ = baselines.plug_in_entropies(
      [{"inputs": inputs, "targets": targets, "weights": np.ones_like(inputs)}])
  assert bigram == pytest.approx(0.0, abs=1e-12)
  assert unigram == pytest.approx(math.log(3))


class _Data:
  def __init__(self):
    self.calls = 0

  def eval_batches(self):
    self.calls += 1
    yield {"inputs": np.array([[0, 1, 1, 0]]), "targets": np.array([[1, 1, 0, 1]]),
           "weights": np.ones((1, 4))}


def test_record_writes_once_and_remeasures_a_torn_file(tmp_path):
  data = _Data()
  written = baselines.record(str(tmp_path), data, "validation", train_tokens=1000, params=10)
  assert written["tokens_per_param"] == 100.0 and data.calls == 1
  assert baselines.read(str(tmp_path)) == written
  assert baselines.record(str(tmp_path), data, "validation", train_tokens=1000, params=10) is None
  assert data.calls == 1  # a resumed run keeps its first start's record
  path = os.path.join(tmp_path, baselines.FILE)
  with open(path, "w") as f:
    f.write('{"unigram_nats": 0.6')  # torn by a crash
  with pytest.raises(UserFileError, match="baselines.json.*Delete it"):
    baselines.read(str(tmp_path))
  assert baselines.record(str(tmp_path), data, "validation", train_tokens=1000, params=10)
  assert json.load(open(path))["params"] == 10 and data.calls == 2


def _bincount_entropy(cfg):
  """The unigram entropy of the eval split's scored targets, by a bincount (the code that
  filled the studies' entropy caches before the baselines record)."""
  from transformer.config import from_config_dict
  from transformer.data.pipeline import lm_data
  data = lm_data(from_config_dict(cfg.to_dict()).data, cfg.train.batch_size, seed=0)
  counts = np.zeros(data.tokenizer.vocab_size, np.int64)
  for batch in data.eval_batches():
    counts += np.bincount(batch["targets"][batch["weights"] > 0].ravel(),
                          minlength=counts.size)[:counts.size]
  p = counts[counts > 0] / counts.sum()
  return float(-(p * np.log(p)).sum())


def _old_study(tmp_path, tiny_corpus):
  """A study folder with one decoder-LM run from before baselines.json (config, metrics)."""
  from configs.default import get_config
  cfg = get_config()
  cfg.data.source_dir, cfg.data.data_dir = tiny_corpus["source_dir"], tiny_corpus["data_dir"]
  cfg.data.seq_len, cfg.train.batch_size, cfg.train.num_steps = 32, 4, 10
  cfg.model.d_model, cfg.model.num_heads, cfg.model.d_ff, cfg.model.num_layers = 32, 2, 64, 2
  study = tmp_path / "study"
  (study / "run").mkdir(parents=True)
  (study / "run" / "config.json").write_text(json.dumps(cfg.to_dict()))
  (study / "sweep.json").write_text(json.dumps({
      "sweep_file": "x.py", "config": "configs/default.py", "overrides": [],
      "points": [{"name": "run", "overrides": {"seed": 0}, "num_steps": 10}]}))
  return study, cfg


def test_a_study_from_before_the_record_gets_it_measured_and_checked(tmp_path, tiny_corpus):
  """experiments/record_baselines.py measures what a run records at its start, checks the
  unigram entropy against the one the report's entropy cache computed (another code path:
  a bincount of the eval targets), and writes nothing when they differ."""
  from experiments import record_baselines
  from transformer.report import runs as sweep_runs
  study, cfg = _old_study(tmp_path, tiny_corpus)
  workdir = str(study / "run")
  assert sweep_runs.recorded_baselines(workdir) == {}
  cached = _bincount_entropy(cfg)  # as the studies' committed caches were computed
  (study / "unigram_entropy.json").write_text(json.dumps(
      {sweep_runs.entropy_key(cfg.to_dict()["data"], None): cached}))
  out = record_baselines.record_study(str(study), "")
  [record] = out["records"]
  assert record["points"] == ["run"] and record["unigram_nats"] == pytest.approx(cached, abs=1e-9)
  assert record["train_tokens"] == 10 * 4 * 32 and record["bigram_nats"] < record["unigram_nats"]
  assert record["params"] == record_baselines._params(cfg.to_dict()) > 10_000
  read = sweep_runs.recorded_baselines(workdir)  # the report's reader finds it
  assert read["bigram_nats"] == record["bigram_nats"] and "points" not in read
  cache = study / "unigram_entropy.json"
  values = json.loads(cache.read_text())
  cache.write_text(json.dumps({k: v + 0.01 for k, v in values.items()}))  # another corpus's
  os.remove(study / sweep_runs.STUDY_BASELINES)
  with pytest.raises(ValueError, match="another corpus"):
    record_baselines.record_study(str(study), "")
  assert not os.path.exists(study / sweep_runs.STUDY_BASELINES)
