"""Optimizers and schedules by name (transformer/train/optim.py): each optimizer equals optax's
own transformation on a small tree, the wsd schedule equals a float64 NumPy transcription of
its formula, a field the optimizer does not read is refused, a checkpoint of one optimizer does
not resume under another, and every name trains the main job's smoke model."""

import dataclasses
import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs.default import get_config
from transformer import workdir as workdir_lib
from transformer.config import OPTIMIZERS, ConfigError, OptimConfig, from_config_dict
from transformer.model.models import DecoderLM
from transformer.tasks.losses import cross_entropy_sums
from transformer.train import optim, steps
from transformer.train.state import create_state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR = 0.01


def _tree():
  """A small params tree with each role: dense and attention kernels, an embedding, the
  output layer's kernel, a bias and a norm scale."""
  rng = np.random.default_rng(0)
  shapes = {"embedder": {"token_embedding": {"embedding": (7, 4)}},
            "attention": {"query": {"kernel": (4, 2, 3), "bias": (2, 3)},
                          "out": {"kernel": (2, 3, 4)}},
            "feed_forward": {"wi": {"kernel": (4, 6), "bias": (6,)}},
            "norm": {"scale": (4,)}, "logits": {"kernel": (4, 7)}}
  return jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s), jnp.float32), shapes,
                      is_leaf=lambda s: isinstance(s, tuple))


# Written out by hand, not computed by transformer/train/optim.py: kernels and the embedding.
DECAYED = {"embedder": {"token_embedding": {"embedding": True}},
           "attention": {"query": {"kernel": True, "bias": False}, "out": {"kernel": True}},
           "feed_forward": {"wi": {"kernel": True, "bias": False}},
           "norm": {"scale": False}, "logits": {"kernel": True}}


def _updates(tx, params, steps_=3):
  """The updates of `steps_` steps of `tx` on fixed pseudo-random gradients (params moved by
  each update), as a list of trees."""
  state, out = tx.init(params), []
  for i in range(steps_):
    grads = jax.tree.map(lambda p: jnp.sin(p * (i + 2.0)) + 0.1 * i, params)
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    out.append(updates)
  return out


def _assert_same_updates(ours, reference, atol=1e-6):
  for a, b in zip(ours, reference):
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=atol, err_msg=jax.tree_util.keystr(path))


def _cfg(name, **kw):
  """A constant learning rate, no warm-up and no clipping: the optimizer alone."""
  return OptimConfig(name=name, learning_rate=LR, warmup_steps=0, decay="constant",
                     clip_norm=0.0, **kw)


REFERENCES = {
    "adamw": (dict(b1=0.8, b2=0.95, eps=1e-8, weight_decay=0.3),
              lambda: optax.adamw(LR, b1=0.8, b2=0.95, eps=1e-8, weight_decay=0.3, mask=DECAYED)),
    "adam": (dict(b1=0.8, b2=0.95, eps=1e-8),
             lambda: optax.adam(LR, b1=0.8, b2=0.95, eps=1e-8)),
    "sgd": (dict(momentum=0.8, nesterov=True),
            lambda: optax.sgd(LR, momentum=0.8, nesterov=True)),
    "lion": (dict(b1=0.8, b2=0.95, weight_decay=0.3),
             lambda: optax.lion(LR, b1=0.8, b2=0.95, weight_decay=0.3, mask=DECAYED)),
    "adafactor": (dict(adafactor_decay_rate=0.7, adafactor_clipping=0.5, adafactor_min_dim=4,
                       weight_decay=0.3),
                  lambda: optax.adafactor(LR, min_dim_size_to_factor=4, decay_rate=0.7,
                                          clipping_threshold=0.5, weight_decay_rate=0.3,
                                          weight_decay_mask=DECAYED)),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_optimizer_is_optax_own(name):
  fields, reference = REFERENCES[name]
  params = _tree()
  ours = optim.build_optimizer(_cfg(name, **fields), 100)
  _assert_same_updates(_updates(ours, params), _updates(reference(), params))


def test_sgd_without_momentum_is_plain_gradient_descent():
  params = _tree()
  (update,) = _updates(optim.build_optimizer(_cfg("sgd", momentum=0.0), 10), params, 1)
  grads = jax.tree.map(lambda p: jnp.sin(p * 2.0), params)
  _assert_same_updates([update], [jax.tree.map(lambda g: -LR * g, grads)])


def test_adamw_is_unchanged_with_clipping_and_schedule():
  """The default optimizer: the chain it always was, bit for bit, with the same state tree
  (old checkpoints restore into it)."""
  cfg = OptimConfig(learning_rate=3e-3, warmup_steps=5)
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, 3e-3, 5),
       optax.cosine_decay_schedule(3e-3, 95, alpha=cfg.end_lr_factor)], [5])
  reference = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      schedule, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1, mask=DECAYED))
  params = _tree()
  ours = optim.build_optimizer(cfg, 100)
  assert (jax.tree.structure(ours.init(params)) == jax.tree.structure(reference.init(params)))
  _assert_same_updates(_updates(ours, params, 6), _updates(reference, params, 6), atol=0)


MATRICES = ("['attention']['query']['kernel']", "['attention']['out']['kernel']",
            "['feed_forward']['wi']['kernel']")


def _by_path(tree) -> dict:
  return {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _muon_reference(params, weight_decay):
  """optax's muon on the three matrices alone (their dimension numbers written by hand), and
  optax's AdamW (Nesterov, as muon's Adam is) on the other leaves alone, decayed by the
  hand-written mask; the gradients are elementwise, so each leaf sees the same ones."""
  dims = optax.contrib.MuonDimensionNumbers
  flat, mask = _by_path(params), _by_path(DECAYED)
  matrices = {k: flat[k] for k in MATRICES}
  rest = {k: v for k, v in flat.items() if k not in MATRICES}
  muon = optax.contrib.muon(
      LR, ns_steps=4, beta=0.9, eps=1e-8, weight_decay=weight_decay, adam_b1=0.8, adam_b2=0.95,
      muon_weight_dimension_numbers={MATRICES[0]: dims((0,), (1, 2)),
                                     MATRICES[1]: dims((0, 1), (2,)),
                                     MATRICES[2]: dims((0,), (1,))})
  adam = optax.adamw(LR, b1=0.8, b2=0.95, eps=1e-8, weight_decay=weight_decay,
                     mask={k: mask[k] for k in rest}, nesterov=True)
  ups = [{**m, **a} for m, a in zip(_updates(muon, matrices), _updates(adam, rest))]
  return [jax.tree.unflatten(jax.tree.structure(params), [u[k] for k in flat]) for u in ups]


@pytest.mark.parametrize("weight_decay", [0.0, 0.3])
def test_muon_is_optax_muon_on_matrices_and_adamw_on_the_rest(weight_decay):
  fields = dict(muon_momentum=0.9, muon_ns_steps=4, b1=0.8, b2=0.95, eps=1e-8,
                weight_decay=weight_decay)
  params = _tree()
  ours = _updates(optim.build_optimizer(_cfg("muon", **fields), 100), params)
  _assert_same_updates(ours, _muon_reference(params, weight_decay), atol=1e-5)


def test_muon_dimension_numbers_of_a_scanned_stack():
  """A scanned stack's leading `layers` axis is a batch axis: each layer's matrix apart."""
  params = {"layers": {"query": {"kernel": np.zeros((3, 4, 2, 5))},
                       "out": {"kernel": np.zeros((3, 2, 5, 4))},
                       "wo": {"kernel": np.zeros((3, 8, 4)), "bias": np.zeros((3, 4))}},
            "head": {"kernel": np.zeros((4, 2))}, "embedding": np.zeros((9, 4))}
  dims = optim.muon_dimension_numbers(params)
  assert dims["layers"]["query"]["kernel"] == ((1,), (2, 3))
  assert dims["layers"]["out"]["kernel"] == ((1, 2), (3,))
  assert dims["layers"]["wo"]["kernel"] == ((1,), (2,))
  assert dims["layers"]["wo"]["bias"] is None and dims["head"]["kernel"] is None
  assert dims["embedding"] is None


def _wsd_numpy(t, n, warmup, fraction, end_factor, shape, peak):
  """Warm-up, then the peak, then the last `fraction * n` steps decay to end_factor * peak."""
  t = np.float64(t)
  if t < warmup:
    return peak * t / warmup
  decay = round(fraction * n)
  start = max(n - decay, warmup)
  p = min(max((t - start) / max(n - start, 1), 0.0), 1.0)
  s = np.sqrt(p) if shape == "1-sqrt" else p
  return peak * (1.0 - s) + end_factor * peak * s


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
@pytest.mark.parametrize("n,warmup,fraction", [(100, 10, 0.3), (50, 0, 0.2), (40, 20, 1.0)])
def test_wsd_schedule_matches_its_formula(shape, n, warmup, fraction):
  cfg = OptimConfig(learning_rate=3e-3, warmup_steps=warmup, decay="wsd", end_lr_factor=0.1,
                    decay_fraction=fraction, cooldown_shape=shape)
  schedule = optim.learning_rate_schedule(cfg, n)
  ours = np.array([float(schedule(t)) for t in range(n + 5)])
  ref = np.array([_wsd_numpy(t, n, warmup, fraction, 0.1, shape, 3e-3) for t in range(n + 5)])
  np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-12)
  assert ours[n - round(fraction * n) - 1] == pytest.approx(3e-3) or warmup + round(
      fraction * n) > n  # the peak holds until the decay starts


@pytest.mark.parametrize("kw,named", [
    (dict(name="sgd", b2=0.95), "--config.optim.b2=0.95 is not read by optim.name='sgd'"),
    (dict(name="adam", weight_decay=0.0), "--config.optim.weight_decay=0.0 is not read"),
    (dict(name="adamw", momentum=0.5), "--config.optim.momentum=0.5 is not read"),
    (dict(decay_fraction=0.5), "is not read by optim.decay='cosine'"),
    (dict(name="rmsprop"), "--config.optim.name='rmsprop' is not supported; choose one of"),
    (dict(decay="step"), "--config.optim.decay='step' is not supported"),
    (dict(name="sgd", momentum=0.0, nesterov=True), "nesterov=True needs"),
])
def test_an_unread_or_unknown_field_is_a_one_line_error(kw, named):
  with pytest.raises(ConfigError, match="^[^\n]*$") as e:
    OptimConfig(**kw)
  assert named in str(e.value)


def test_an_unread_field_left_at_its_default_is_fine():
  assert OptimConfig(name="sgd").b2 == OptimConfig().b2
  assert OptimConfig(name="sgd", momentum=0.5, nesterov=True).nesterov


def _saved_run(tmp_path, optim_section):
  """A workdir with a checkpoint and a config.json whose optim section is `optim_section`."""
  cfg = from_config_dict(get_config("smoke"))
  saved = cfg.to_dict()
  saved["optim"] = optim_section(saved["optim"])
  (tmp_path / "config.json").write_text(json.dumps(saved))
  (tmp_path / "checkpoints" / "10").mkdir(parents=True)
  return cfg


def test_a_checkpoint_of_one_optimizer_refuses_another(tmp_path):
  cfg = _saved_run(tmp_path, lambda o: o)
  lion = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, name="lion"))
  with pytest.raises(ConfigError, match="^[^\n]*$") as e:
    workdir_lib.check_workdir_config(str(tmp_path), lion)
  assert "optim.name='adamw'" in str(e.value) and "'lion'" in str(e.value)
  workdir_lib.check_workdir_config(str(tmp_path), cfg)  # the same optimizer resumes


def test_a_run_saved_before_optimizers_had_names_is_an_adamw_run(tmp_path):
  new = ("name", "momentum", "nesterov", "decay_fraction", "cooldown_shape", "muon_momentum",
         "muon_ns_steps", "adafactor_decay_rate", "adafactor_clipping", "adafactor_min_dim")
  cfg = _saved_run(tmp_path, lambda o: {k: v for k, v in o.items() if k not in new})
  workdir_lib.check_workdir_config(str(tmp_path), cfg)
  sgd = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, name="sgd", b2=0.98))
  with pytest.raises(ConfigError, match="optim.name='adamw'"):
    workdir_lib.check_workdir_config(str(tmp_path), sgd)


def _smoke(name: str):
  c = get_config("smoke")
  c.optim.name = name
  return from_config_dict(c, vocab_size=259)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_trains_the_smoke_model(name):
  """The main job's smoke model and config, each optimizer: 8 steps on one batch lower its
  loss (the full launch is the slow test below)."""
  cfg = _smoke(name)
  model = DecoderLM(cfg.model)
  tx = optim.build_optimizer(cfg.optim, cfg.train.num_steps)
  tokens = np.random.default_rng(0).integers(3, 259, size=(8, 33)).astype(np.int32)
  batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
           "weights": np.ones((8, 32), np.float32)}
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), batch["inputs"])["params"])

  def loss_sums(params, batch, rng):
    logits = model.apply({"params": params}, batch["inputs"], deterministic=True)
    return cross_entropy_sums(logits, batch["targets"], batch["weights"])

  step, state = jax.jit(steps.make_train_step(loss_sums, tx)), create_state(params, tx)
  losses = []
  for _ in range(8):
    state, metrics = step(state, batch, jax.random.PRNGKey(1))
    losses.append(float(metrics["loss"]))
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.05, losses


@pytest.mark.slow
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_launch_trains_the_smoke_config_with_each_optimizer(tmp_path, name):
  r = subprocess.run(
      [sys.executable, os.path.join(ROOT, "launch.py"), "--config=configs/default.py:smoke",
       f"--config.optim.name={name}", "--config.train.num_steps=4",
       "--config.train.eval_every=4", "--config.checkpoint.every_steps=4",
       f"--workdir={tmp_path / 'w'}"], cwd=ROOT, capture_output=True, text=True, timeout=280,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert r.returncode == 0, r.stderr[-3000:]
  rows = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").read_text().split("\n")
          if line.strip()]
  assert any(row["split"] == "eval" and np.isfinite(row["loss"]) for row in rows)


def test_muon_state_gets_shardings():
  """Muon's state holds `optax.MaskedNode` slots (inside a parameter's logical-axis box, for
  the leaves the other half of it owns): each keeps its slot, no sharding."""
  from transformer.train import parallel
  cfg = _smoke("muon")
  model = DecoderLM(cfg.model)
  tx = optim.build_optimizer(cfg.optim, cfg.train.num_steps)
  tokens = np.zeros((2, 8), np.int32)
  boxed = jax.eval_shape(lambda: create_state(model.init(jax.random.PRNGKey(0), tokens)["params"],
                                              tx))
  mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "tensor"))
  shardings = parallel.state_shardings(boxed, mesh, parallel.logical_rules(cfg.parallel))
  assert jax.tree.structure(shardings) == jax.tree.structure(nn.meta.unbox(boxed))
