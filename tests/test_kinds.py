"""The registry of model kinds, --mode=eval on another layout, init_from, label smoothing and
the rsqrt schedule."""

import dataclasses
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests import numpy_reference as ref
from tests.test_tasks import package_corpus  # noqa: F401 -- a module-scoped fixture
from tests.test_train import _tiny_config
from transformer import kinds
from transformer.config import ConfigError, ModelConfig, OptimConfig, ParallelConfig
from transformer.evaluation.evaluate import evaluate_workdir
from transformer.train import optim
from transformer.weights import init_from
from transformer.tasks.losses import cross_entropy_sums
from transformer.train.loop import train_and_evaluate


def _checkpoint_params(workdir, step):
  """A checkpoint's params read with orbax directly (not through the code under test)."""
  manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"), item_names=("state",))
  state = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  manager.close()
  return state["state"]["params"]


def test_every_kind_names_a_model_and_a_task():
  for name, kind in kinds.KINDS.items():
    model = kinds.build_model(ModelConfig(kind=name, d_model=16, num_heads=2, num_layers=1,
                                          d_ff=32))
    assert type(model).__name__ == kind.model.split(":")[1]
    task_cls = kinds._resolve(kind.task)
    for method in ("example_inputs", "model_inputs", "loss_sums", "eval_sums", "summarize",
                   "init_params", "random_batch", "facts_from_config", "model_fields",
                   "train_forward"):
      assert callable(getattr(task_cls, method)), (name, method)
    assert callable(kinds._resolve(kind.data))
    assert kind.generative in ("", "lm", "seq2seq")


def test_unknown_kind_names_the_registered_ones():
  with pytest.raises(ConfigError, match="encoder_decoder.*masked_lm.*classifier"):
    ModelConfig(kind="vision_lm")


def test_the_config_names_exactly_the_registered_kinds_in_order():
  from transformer import config
  assert config.MODEL_KINDS == kinds.names()


def test_a_new_kind_needs_only_a_registry_entry_and_its_name(tiny_corpus, tmp_path, monkeypatch):
  from transformer import config
  toy = dataclasses.replace(kinds.KINDS["decoder_lm"], name="toy_lm")
  monkeypatch.setitem(kinds.KINDS, "toy_lm", toy)
  monkeypatch.setattr(config, "MODEL_KINDS", config.MODEL_KINDS + ("toy_lm",))
  cfg = _tiny_config(tiny_corpus)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kind="toy_lm"))
  data, task = kinds.build_data_and_task(cfg, str(tmp_path / "toy"))
  batch = data.next_train_batch()
  loss_sum, n, _ = task.loss_sums(task.init_params(jax.random.PRNGKey(0)), batch,
                               jax.random.PRNGKey(1))
  assert math.isfinite(float(loss_sum)) and float(n) == batch["weights"].sum()
  assert kinds.experiment_flops_per_step(cfg) == kinds.experiment_flops_per_step(
      dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kind="decoder_lm")))


@pytest.fixture(scope="module")
def lm_run(package_corpus, tmp_path_factory):
  """A tiny LM trained 4 steps on the 8 fake devices (jit, data=8), checkpoints at 2 and 4."""
  cfg = _tiny_config(package_corpus, num_steps=4, log_every=2, eval_every=2)
  cfg = dataclasses.replace(cfg, checkpoint=dataclasses.replace(cfg.checkpoint, every_steps=2))
  workdir = str(tmp_path_factory.mktemp("kinds") / "lm")
  return cfg, workdir, train_and_evaluate(cfg, workdir)


def test_generative_runs_write_samples_at_every_eval(lm_run):
  _, workdir, _ = lm_run
  with open(os.path.join(workdir, "samples.txt")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows] == [2, 2, 2, 4, 4, 4]
  assert [r["prompt"] for r in rows[:3]] == [r["prompt"] for r in rows[3:]]  # fixed prompts
  assert all(isinstance(r["sample"], str) and r["prompt"] for r in rows)
  assert os.listdir(os.path.join(workdir, "tensorboard", "samples"))


def test_eval_mode_restores_onto_another_layout(lm_run):
  cfg, workdir, final = lm_run
  other = ParallelConfig(data=2, fsdp=2, tensor=2)
  got = evaluate_workdir(workdir, parallel=other, log=lambda m: None)
  assert got["step"] == 4 and got["split"] == cfg.data.eval_split
  np.testing.assert_allclose(got["loss"], final["loss"], rtol=1e-5)
  np.testing.assert_allclose(got["bits_per_byte"], final["bits_per_byte"], rtol=1e-5)
  with open(os.path.join(workdir, "eval", f"{cfg.data.eval_split}-4.json")) as f:
    assert json.load(f)["loss"] == got["loss"]

  pmap = evaluate_workdir(workdir, parallel=ParallelConfig(strategy="pmap"), log=lambda m: None)
  np.testing.assert_allclose(pmap["loss"], final["loss"], rtol=1e-5)
  earlier = evaluate_workdir(workdir, step=2, split="train", log=lambda m: None)
  assert earlier["step"] == 2 and earlier["split"] == "train"
  assert os.path.exists(os.path.join(workdir, "eval", "train-2.json"))
  with pytest.raises(ConfigError, match="has steps"):
    evaluate_workdir(workdir, step=3)


def test_init_from_fine_tunes_an_lm_from_another_lms_step(lm_run, tmp_path, capsys):
  cfg, base, _ = lm_run
  want = _checkpoint_params(base, 2)
  tuned_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model,
                                                                 init_from=f"{base}:2"))
  _, task = kinds.build_data_and_task(tuned_cfg, str(tmp_path / "tuned"))
  out = capsys.readouterr().out
  assert f"init_from {base} (step 2, a decoder_lm run): loaded" in out
  got = task.init_params(jax.random.PRNGKey(7))
  assert len(jax.tree.leaves(got)) == len(jax.tree.leaves(want))
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(g), w)


def test_init_from_loads_matching_params_only_and_says_which(tmp_path):
  saved = {"params": {"encoder": {"w": np.full((2, 3), 5.0, np.float32)},
                      "embedder": {"e": np.ones((4, 3), np.float32)},
                      "mlm_head": {"b": np.ones((3,), np.float32)}}}
  manager = ocp.CheckpointManager(str(tmp_path / "run" / "checkpoints"), item_names=("state",))
  manager.save(7, args=ocp.args.Composite(state=ocp.args.StandardSave(saved)))
  manager.wait_until_finished()
  manager.close()
  abstract = {"encoder": {"w": jax.ShapeDtypeStruct((2, 3), jnp.float32)},
              "embedder": {"e": jax.ShapeDtypeStruct((5, 3), jnp.float32)},  # new vocabulary
              "classifier": {"kernel": jax.ShapeDtypeStruct((3, 2), jnp.float32)}}
  lines = []
  loaded = init_from.matching_params(str(tmp_path / "run"), abstract, lines.append)
  assert set(loaded) == {"encoder/w"}
  text = "\n".join(lines)
  assert "loaded 1 of 3" in text and "new (fresh init): classifier/kernel" in text
  assert "shape differs from the checkpoint's): embedder/e" in text
  assert "unused: mlm_head/b" in text
  fresh = {"encoder": {"w": jnp.zeros((2, 3))}, "embedder": {"e": jnp.zeros((5, 3))},
           "classifier": {"kernel": jnp.zeros((3, 2))}}
  merged = init_from.merge(fresh, loaded)
  np.testing.assert_array_equal(merged["encoder"]["w"], 5.0)
  np.testing.assert_array_equal(merged["embedder"]["e"], 0.0)

  with pytest.raises(ConfigError, match="none of this model's parameters"):
    init_from.matching_params(str(tmp_path / "run"), {"x": abstract["classifier"]},
                              lines.append)
  with pytest.raises(ConfigError, match="no checkpoint of step 3"):
    init_from.matching_params(f"{tmp_path / 'run'}:3", abstract, lines.append)
  assert init_from.parse_init_from("runs/a:b:12") == ("runs/a:b", 12)
  assert init_from.parse_init_from("runs/a") == ("runs/a", None)


def test_label_smoothing_matches_the_float64_formula():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 5, 11)).astype(np.float32)
  targets = rng.integers(0, 11, size=(2, 5))
  weights = (rng.random((2, 5)) > 0.3).astype(np.float32)
  eps = 0.1
  log_p = np.log(ref.softmax(logits.astype(np.float64)))
  q = np.full(log_p.shape, eps / 11)
  q[np.arange(2)[:, None], np.arange(5)[None], targets] += 1 - eps
  want = np.sum(-(q * log_p).sum(-1) * weights)
  got, n = cross_entropy_sums(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights),
                              label_smoothing=eps)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)
  assert float(n) == weights.sum()


def test_rsqrt_schedule_is_vaswani_et_al():
  d_model, warmup = 512, 4000
  cfg = OptimConfig(decay="rsqrt", warmup_steps=warmup, learning_rate=(d_model * warmup) ** -0.5)
  schedule = optim.learning_rate_schedule(cfg, 100_000)
  for step in (1, 100, 3999, 4000, 4001, 20_000, 99_999):
    paper = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    np.testing.assert_allclose(float(schedule(step)), paper, rtol=1e-4)
