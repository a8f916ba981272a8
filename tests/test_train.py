"""One train step, learning, and exact resumption."""

import dataclasses
import json
import os
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs.default import get_config
from transformer.config import (CheckpointConfig, ConfigError, ModelConfig, OptimConfig,
                                from_config_dict)
from transformer.model.models import DecoderLM
from transformer.train import checkpoint, optim, steps
from transformer.tasks.losses import cross_entropy_sums
from transformer.train.loop import train_and_evaluate
from transformer.train.state import create_state
from transformer.workdir import checkpoint_steps


def _tiny_config(corpus, **train):
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir = corpus["source_dir"]
    c.data.data_dir = corpus["data_dir"]
    c.data.validation_percent = 20
    c.data.seq_len = 32
    c.data.shuffle_buffer = 64
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 32, 4, 2, 64
    c.model.dropout_rate = 0.1  # dropout must replay exactly on resume too
    c.train.batch_size = 8  # divisible by the 8 fake devices the batch is split over
    c.checkpoint.keep = 5
    for k, v in train.items():
      c.train[k] = v
  return from_config_dict(c)


def test_train_step_updates_state_and_fits_a_batch():
  cfg = ModelConfig(vocab_size=259, d_model=32, num_heads=4, num_layers=2, d_ff=64)
  model = DecoderLM(cfg)
  tx = optim.build_optimizer(OptimConfig(learning_rate=1e-2, warmup_steps=0), 100)
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, 259, size=(4, 17)).astype(np.int32)
  batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
           "weights": np.ones((4, 16), np.float32)}
  state = create_state(nn.meta.unbox(model.init(jax.random.PRNGKey(0), batch["inputs"])["params"]),
                       tx)

  def loss_sums(params, batch, rng):
    logits = model.apply({"params": params}, batch["inputs"], deterministic=False,
                         rngs={"dropout": rng})
    return cross_entropy_sums(logits, batch["targets"], batch["weights"])

  step = jax.jit(steps.make_train_step(loss_sums, tx))
  new_state, metrics = step(state, batch, jax.random.PRNGKey(1))
  assert int(new_state.step) == 1
  assert float(metrics["tokens"]) == 64
  assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
  # A uniform guess over 259 symbols costs ln(259) = 5.56 nats; a fresh model is near that.
  assert abs(float(metrics["loss"]) - np.log(259)) < 1.0
  changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, new_state.params)
  assert all(jax.tree.leaves(changed))
  for _ in range(30):
    new_state, metrics = step(new_state, batch, jax.random.PRNGKey(1))
  assert float(metrics["loss"]) < 1.0  # memorized the batch


def _final_params(workdir, step):
  mngr = ocp.CheckpointManager(f"{workdir}/checkpoints", item_names=("state",))
  restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return restored["state"]["params"]


def test_resume_reproduces_an_uninterrupted_run_exactly(tiny_corpus, tmp_path):
  cfg = _tiny_config(tiny_corpus, num_steps=12, log_every=3, eval_every=6)
  cfg = dataclasses.replace(cfg, checkpoint=CheckpointConfig(every_steps=4, keep=5))
  straight = tmp_path / "straight"
  resumed = tmp_path / "resumed"
  final_straight = train_and_evaluate(cfg, str(straight))
  assert train_and_evaluate(cfg, str(resumed), stop_after=6) is not None
  assert sorted(int(p.name) for p in (resumed / "checkpoints").iterdir()
                if p.name.isdigit()) == [4, 6]
  final_resumed = train_and_evaluate(cfg, str(resumed))

  a, b = _final_params(straight, 12), _final_params(resumed, 12)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)
  assert final_straight["bits_per_byte"] == final_resumed["bits_per_byte"]
  # Row for row too, times aside: the resumed process's first step (it compiles) is in the
  # loss mean of the row at step 9, as it is in the uninterrupted run's.
  def rows(workdir):
    clock = ("time", "tokens_per_sec", "step_time", "mfu")
    return [{k: v for k, v in r.items() if k not in clock}
            for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())]
  assert rows(resumed) == rows(straight)
  assert [r["step"] for r in rows(straight) if r["split"] == "train"] == [3, 6, 9, 12]

  # A finished run, launched again, ends at once with the same figures.
  assert train_and_evaluate(cfg, str(resumed))["bits_per_byte"] == final_resumed["bits_per_byte"]


def test_a_sigterm_while_the_final_checkpoint_is_written_waits_for_it(tiny_corpus, tmp_path,
                                                                        monkeypatch):
  """SLURM's time-limit signal a moment late: SIGTERM after the last step, while the final
  checkpoint is written. The run finishes the save and returns as usual (it used to die by the
  default handler, the save unfinished), and gives the handler it found back."""
  cfg = _tiny_config(tiny_corpus, num_steps=4, log_every=2, eval_every=4)
  close = checkpoint.Checkpointer.close

  def close_after_a_signal(self):
    os.kill(os.getpid(), signal.SIGTERM)
    close(self)

  def outside_the_run(signum, frame):  # stands in for SIG_DFL, which would end this process
    raise AssertionError("SIGTERM reached the handler outside the run")

  monkeypatch.setattr(checkpoint.Checkpointer, "close", close_after_a_signal)
  previous = signal.signal(signal.SIGTERM, outside_the_run)
  try:
    final = train_and_evaluate(cfg, str(tmp_path / "w"))
    assert signal.getsignal(signal.SIGTERM) is outside_the_run
  finally:
    signal.signal(signal.SIGTERM, previous)
  assert final["step"] == 4
  assert checkpoint_steps(str(tmp_path / "w" / "checkpoints")) == [4]
  assert jax.tree.leaves(_final_params(tmp_path / "w", 4))  # complete: it restores


def test_resuming_with_a_different_model_is_refused(tiny_corpus, tmp_path):
  cfg = _tiny_config(tiny_corpus, num_steps=2, log_every=1, eval_every=2)
  train_and_evaluate(cfg, str(tmp_path / "w"))
  other = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, norm_placement="post"))
  with pytest.raises(ConfigError, match="norm_placement"):
    train_and_evaluate(other, str(tmp_path / "w"))


def test_a_jit_checkpoint_resumes_under_pmap(tiny_corpus, tmp_path):
  from transformer.config import ParallelConfig
  cfg = _tiny_config(tiny_corpus, num_steps=4, log_every=2, eval_every=4)
  # Dropout masks depend on the layout under pmap (each device draws for its rows), and the
  # key bias's exactly-zero true gradient only carries rounding noise: leave both out.
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout_rate=0.0,
                                                           use_bias=False))
  train_and_evaluate(cfg, str(tmp_path / "straight"))
  train_and_evaluate(cfg, str(tmp_path / "switched"), stop_after=2)
  pmap = dataclasses.replace(cfg, parallel=ParallelConfig(strategy="pmap"))
  train_and_evaluate(pmap, str(tmp_path / "switched"))
  a, b = _final_params(tmp_path / "straight", 4), _final_params(tmp_path / "switched", 4)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ["jit", "pmap"])
def test_a_metric_the_step_adds_is_a_train_column(tiny_corpus, tmp_path, monkeypatch, strategy):
  """The train row is built from the step's own metrics: a key added to them (here by a
  wrapper step) is a column, averaged over the row's steps, with no change to the loop."""
  from transformer.config import ParallelConfig
  plain = steps.make_train_step

  def with_step_number(*args, **kwargs):
    step = plain(*args, **kwargs)

    def train_step(state, batch, rng):
      new_state, metrics = step(state, batch, rng)
      metrics["step_number"] = new_state.step.astype(jnp.float32)
      return new_state, metrics
    return train_step

  monkeypatch.setattr(steps, "make_train_step", with_step_number)
  cfg = _tiny_config(tiny_corpus, num_steps=4, log_every=2, eval_every=4)
  cfg = dataclasses.replace(cfg, parallel=ParallelConfig(strategy=strategy))
  train_and_evaluate(cfg, str(tmp_path / "w"))
  rows = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()]
  train = [r for r in rows if r["split"] == "train"]
  assert [(r["step"], r["step_number"]) for r in train] == [(2, 1.5), (4, 3.5)]
  assert list(train[0])[:7] == ["step", "split", "time", "loss", "grad_norm", "step_number",
                                "learning_rate"]  # the step's keys in its order, then the loop's
  assert not {"tokens", "finite"} & set(train[0])
