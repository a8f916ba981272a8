"""Prefetching: the same batches in the same order, and the input position saved with a
checkpoint never ahead of the steps taken (so resume stays exact)."""

import dataclasses

import jax
import numpy as np
import pytest

from tests.test_train import _final_params, _tiny_config
from transformer.config import CheckpointConfig
from transformer.train.loop import train_and_evaluate
from transformer.train.prefetch import Prefetcher


class _Source:
  """Batches numbered 1, 2, ... from a counter standing in for the tf.data iterator."""

  def __init__(self):
    self.position = 0

  def __call__(self):
    self.position += 1
    return {"inputs": np.full((2, 3), self.position)}


def _run(count, num_steps=11, every=4, start=0, stop_after=None, drain_at=None):
  """A loop as `transformer.train.loop` runs it; returns the batch ids seen and, for every step
  after which it would save, (step, iterator position)."""
  source, placed = _Source(), []

  def place(batch):
    placed.append(int(batch["inputs"][0, 0]))
    return dict(batch, placed=True)

  source.position = start
  boundary = lambda s: s % every == 0 or s >= num_steps or (stop_after and s >= stop_after)
  batches = Prefetcher(source, place, count, start, boundary)
  seen, saves, step = [], [], start
  while step < num_steps:
    batch = next(batches)
    step += 1
    seen.append(int(batch["inputs"][0, 0]))
    assert batch.get("placed", False) == (count > 0)
    if drain_at is not None and step >= drain_at:
      batches.drain()
    stopping = (batches.draining and batches.empty) or (stop_after and step >= stop_after)
    if boundary(step) or stopping:
      saves.append((step, source.position))
    if stopping:
      break
  assert placed == (seen if count else [])  # placed ahead exactly the batches used
  return seen, saves


@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_same_batches_in_the_same_order(count):
  seen, _ = _run(count)
  assert seen == list(range(1, 12))
  seen, _ = _run(count, start=6)  # resumed at step 6: the iterator is restored there
  assert seen == list(range(7, 12))


@pytest.mark.parametrize("count", [1, 2, 5])
def test_the_saved_input_position_is_the_steps_taken(count):
  _, saves = _run(count, stop_after=6)
  assert saves == [(4, 4), (6, 6)]
  _, saves = _run(count)
  assert saves == [(4, 4), (8, 8), (11, 11)]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_stop_request_runs_the_fetched_steps_then_saves_in_step(count):
  seen, saves = _run(count, num_steps=30, every=20, drain_at=5)
  step, position = saves[-1]
  assert step == position == seen[-1] == 5 + count  # the batches already fetched, no more


def test_prefetch_zero_fetches_on_demand_only():
  source = _Source()
  batches = Prefetcher(source, lambda b: 1 / 0, 0, 0, lambda s: False)
  next(batches)
  next(batches)
  assert source.position == 2 and batches.empty


@pytest.mark.slow  # three short training runs (~1-2 min on 2 busy cores); test_train's resume
# test covers prefetch (default 2) with resume in the fast suite
def test_prefetched_run_resumed_equals_unprefetched_uninterrupted_run(tiny_corpus, tmp_path):
  """Prefetch 0 straight through vs prefetch 3, stopped at step 6 and resumed: the same
  batches must reach the same steps (bitwise-equal final parameters)."""
  cfg = _tiny_config(tiny_corpus, num_steps=10, log_every=5, eval_every=10, prefetch=0)
  cfg = dataclasses.replace(cfg, checkpoint=CheckpointConfig(every_steps=4, keep=5))
  prefetched = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, prefetch=3))
  final_plain = train_and_evaluate(cfg, str(tmp_path / "plain"))
  assert train_and_evaluate(prefetched, str(tmp_path / "pf"), stop_after=6) is not None
  final_pf = train_and_evaluate(prefetched, str(tmp_path / "pf"))
  for x, y in zip(jax.tree.leaves(_final_params(tmp_path / "plain", 10)),
                  jax.tree.leaves(_final_params(tmp_path / "pf", 10))):
    np.testing.assert_array_equal(x, y)
  assert final_plain["bits_per_byte"] == final_pf["bits_per_byte"]
