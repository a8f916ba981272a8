"""The training loop copies nothing between host and devices that it does not copy on purpose
(big_vision runs its loop under `jax.transfer_guard("disallow")`; DESIGN.md): the steps, the
diagnostics, the train rows, the evals and the checkpoints of a jit run and of a pmap run on 8
devices, with `TrainSteps.run` under the guard. Each copy the loop makes is explicit
(`jax.device_put`, `make_array_from_process_local_data`, `jax.device_get`) or allowed by name
where it is meant (the schedule's step number, decoding's prompts)."""

import dataclasses

import jax
import pytest

from tests.test_train import _tiny_config
from transformer.train import loop, parallel


def _guarded_run(monkeypatch):
  run = loop.TrainSteps.run

  def guarded(self, *args, **kwargs):
    with jax.transfer_guard("disallow"):
      return run(self, *args, **kwargs)
  monkeypatch.setattr(loop.TrainSteps, "run", guarded)


@pytest.mark.parametrize("strategy, train", [
    ("jit", dict(prefetch=0, diagnostics_every=2)),  # the batch placed once for both
    ("jit", dict(prefetch=2, batch_size=16, micro_batches=2, nonfinite="skip")),
    ("pmap", dict(prefetch=0, diagnostics_every=2)),
    ("pmap", dict(prefetch=2, batch_size=16, micro_batches=2, nonfinite="skip")),
])
def test_the_loop_makes_no_hidden_copy(tiny_corpus, tmp_path, monkeypatch, strategy, train):
  _guarded_run(monkeypatch)
  cfg = _tiny_config(tiny_corpus, num_steps=4, eval_every=2, log_every=1, **train)
  cfg = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, strategy=strategy))
  assert cfg.train.samples_at_eval  # decoding runs too
  final = loop.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert final["step"] == 4


@pytest.mark.parametrize("strategy, cls", [("jit", parallel.JitParallel),
                                           ("pmap", parallel.PmapParallel)])
def test_a_key_left_off_the_mesh_is_caught(tiny_corpus, tmp_path, monkeypatch, strategy, cls):
  """The guard sees what it is there for: the dropout key left where it was made is copied to
  the devices at every step (as it was before `place_replicated`), and the run stops on it."""
  _guarded_run(monkeypatch)
  monkeypatch.setattr(cls, "place_replicated", lambda self, tree: tree)
  cfg = _tiny_config(tiny_corpus, num_steps=2, eval_every=2, log_every=1)
  cfg = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, strategy=strategy))
  with pytest.raises(Exception, match="Disallowed device-to-device transfer"):
    loop.train_and_evaluate(cfg, str(tmp_path / "run"))
