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
