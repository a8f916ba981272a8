"""Per-layer diagnostics: names, values against NumPy and against gradients taken directly,
scanned == unrolled, and the rows the training loop and --mode=diagnose write."""

import dataclasses
import json
import os
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests import numpy_reference as ref
from transformer import figure_file, kinds
from transformer.train import diagnostics
from transformer.config import (CheckpointConfig, DataConfig, ExperimentConfig, ModelConfig,
                                OptimConfig, TrainConfig)
from transformer.data.facts import DataFacts
from transformer.model.models import DecoderLM
from transformer.tasks.losses import cross_entropy_sums

V, T = 23, 6


def _lm_task(cfg: ModelConfig):
  """The real LM task (`transformer.tasks`) with the model of `cfg`, built from facts alone."""
  config = ExperimentConfig(seed=0, model=cfg, data=DataConfig(seq_len=T), optim=OptimConfig(),
                            train=TrainConfig(batch_size=2), checkpoint=CheckpointConfig())
  task = kinds.build_task(config, DataFacts(vocab_size=cfg.vocab_size))
  assert isinstance(task.model, DecoderLM)
  return task


def _setup(**kw):
  cfg = ModelConfig(**{**dict(vocab_size=V, d_model=16, num_heads=4, num_layers=3, d_ff=32,
                              attention_impl="xla"), **kw})
  rng = np.random.default_rng(0)
  batch = {"inputs": rng.integers(3, V, size=(2, T)).astype(np.int32),
           "targets": rng.integers(3, V, size=(2, T)).astype(np.int32),
           "weights": np.ones((2, T), np.float32)}
  task = _lm_task(cfg)
  params = nn.meta.unbox(task.model.init(jax.random.PRNGKey(0), batch["inputs"])["params"])
  return cfg, task, params, batch


def _stats(task, params, batch, tx=None):
  tx = tx or optax.sgd(0.1)
  return jax.device_get(jax.jit(
      lambda p, b: diagnostic_stats_of(task, tx, p, b))(params, batch))


def diagnostic_stats_of(task, tx, params, batch):
  return diagnostics.diagnostic_stats(task, tx, params, tx.init(params), batch,
                                      jax.random.PRNGKey(0))


def test_every_layer_and_sublayer_has_every_statistic():
  _, task, params, batch = _setup()
  stats = _stats(task, params, batch)
  for i in range(3):
    for s in ("self_attention", "feed_forward"):
      for m in ("grad_norm", "param_norm", "update_ratio", "out_rms"):
        assert np.isfinite(stats[f"decoder/layer_{i}/{s}/{m}"])
    for m in ("grad_norm", "param_norm", "update_ratio", "residual_rms",
              "self_attention/attn_entropy", "self_attention/attn_max_logit"):
      assert np.isfinite(stats[f"decoder/layer_{i}/{m}"])
  assert all(np.ndim(v) == 0 for v in stats.values())
  assert "output/log_z" in stats and "embedder/token_embedding/grad_norm" in stats


def test_norms_match_gradients_taken_directly_and_sgd_update_ratio():
  """grad_norm per layer/sublayer equals the norm of jax.grad of the plain loss; with SGD
  the update is -lr * grad, so update_ratio = lr * grad_norm / param_norm."""
  _, task, params, batch = _setup()
  stats = _stats(task, params, batch, optax.sgd(0.1))

  def mean_loss(p):
    s, w, _ = task.loss_sums(p, batch, None)
    return s / w
  grads = jax.grad(mean_loss)(params)
  norm = lambda t: np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64)))
                               for a in jax.tree.leaves(t)))
  for i in range(3):
    layer_g, layer_p = grads["decoder"][f"layer_{i}"], params["decoder"][f"layer_{i}"]
    np.testing.assert_allclose(stats[f"decoder/layer_{i}/grad_norm"], norm(layer_g), rtol=1e-4)
    attn = {k: v for k, v in layer_g.items() if k.startswith("self_attention")}
    np.testing.assert_allclose(stats[f"decoder/layer_{i}/self_attention/grad_norm"], norm(attn),
                               rtol=1e-4)
    np.testing.assert_allclose(stats[f"decoder/layer_{i}/param_norm"], norm(layer_p), rtol=1e-5)
    np.testing.assert_allclose(stats[f"decoder/layer_{i}/update_ratio"],
                               0.1 * norm(layer_g) / norm(layer_p), rtol=1e-4)


def test_weight_matrix_grad_norm_is_that_kernels_gradient():
  """`feed_forward/wo/grad_norm` is ||dL/dW_2|| of that layer's second feed-forward matrix
  alone (Xiong et al.'s Theorem 1 quantity), for unrolled and scanned stacks."""
  for scan in (False, True):
    _, task, params, batch = _setup(scan_layers=scan)
    stats = _stats(task, params, batch)

    def mean_loss(p):
      s, w, _ = task.loss_sums(p, batch, None)
      return s / w
    grads = jax.grad(mean_loss)(params)["decoder"]
    for i in range(3):
      g = (grads[f"layer_{i}"]["feed_forward"]["wo"]["kernel"] if not scan
           else grads["layers"]["feed_forward"]["wo"]["kernel"][i])
      np.testing.assert_allclose(stats[f"decoder/layer_{i}/feed_forward/wo/grad_norm"],
                                 np.linalg.norm(np.asarray(g, np.float64)), rtol=1e-4)
      assert f"decoder/layer_{i}/feed_forward/wo/param_norm" not in stats


def test_sown_statistics_match_numpy():
  """residual_rms, the residual's largest and median magnitude, out_rms, attention entropy and
  max logit of a pre-norm model against a float64 NumPy forward pass."""
  cfg, task, params, batch = _setup()
  stats = _stats(task, params, batch)
  p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  table = p64["embedder"]["token_embedding"]["embedding"]
  x = table[batch["inputs"]] * np.sqrt(16) + ref.sinusoidal(T, 16)[None]
  mask = np.tril(np.ones((T, T), bool))
  for i in range(3):
    lp = p64["decoder"][f"layer_{i}"]
    h = ref.layer_norm(x, lp["self_attention_norm"]["scale"], lp["self_attention_norm"]["bias"])
    logits = []
    for b in range(2):
      for n in range(4):
        q, k = ref._project(h[b], lp["self_attention"]["query"], n), ref._project(
            h[b], lp["self_attention"]["key"], n)
        logits.append(np.where(mask, q @ k.T / 2.0, -np.inf))
    probs = ref.softmax(np.stack(logits))
    entropy = -np.sum(np.where(mask, probs * np.log(np.where(mask, probs, 1.0)), 0.0), -1)
    outs = [ref.general_block(xb, lp, "pre", "layernorm", mask, ref.gelu_tanh)
            for xb in x]
    x = np.stack([o[0] for o in outs])
    name = f"decoder/layer_{i}"
    np.testing.assert_allclose(stats[f"{name}/self_attention/attn_max_logit"],
                               np.max(np.stack(logits)), rtol=1e-4)
    np.testing.assert_allclose(stats[f"{name}/self_attention/attn_entropy"], entropy.mean(),
                               rtol=1e-4)
    np.testing.assert_allclose(stats[f"{name}/residual_rms"], np.sqrt(np.mean(x ** 2)),
                               rtol=1e-4)
    np.testing.assert_allclose(stats[f"{name}/residual_max_abs"], np.max(np.abs(x)), rtol=1e-4)
    np.testing.assert_allclose(stats[f"{name}/residual_median_abs"], np.median(np.abs(x)),
                               rtol=1e-4)
    for j, s in enumerate(("self_attention", "feed_forward")):
      y = np.stack([o[1][j] for o in outs])
      np.testing.assert_allclose(stats[f"{name}/{s}/out_rms"], np.sqrt(np.mean(y ** 2)),
                                 rtol=1e-4)


@pytest.mark.parametrize("placement", ["pre", "mix"])
def test_scanned_and_unrolled_stacks_give_the_same_names_and_values(placement):
  cfg, task, params, batch = _setup(norm_placement=placement, mix_post_fraction=0.34)
  stats = _stats(task, params, batch)
  dec = dict(params["decoder"])
  layers = [dec.pop(f"layer_{i}") for i in range(3)]
  stack = lambda ls: jax.tree.map(lambda *xs: jnp.stack(xs), *ls)
  if placement == "mix":  # floor(0.34 * 3) = 1 post-norm layer
    dec["post_layers"], dec["pre_layers"] = stack(layers[:1]), stack(layers[1:])
  else:
    dec["layers"] = stack(layers)
  scan_task = _lm_task(dataclasses.replace(cfg, scan_layers=True))
  scan_stats = _stats(scan_task, {**params, "decoder": dec}, batch)
  assert sorted(scan_stats) == sorted(stats)
  for k in stats:
    np.testing.assert_allclose(scan_stats[k], stats[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_diagnostics_score_the_tasks_own_training_loss():
  """A masked LM with label smoothing, z-loss and dropout: the diagnostics' loss is the task's
  `loss_sums` on the same batch and key (BERT masking included), not a plain cross entropy."""
  cfg = ModelConfig(kind="masked_lm", vocab_size=V, d_model=16, num_heads=4, num_layers=2,
                    d_ff=32, dropout_rate=0.1)
  config = ExperimentConfig(seed=0, model=cfg, data=DataConfig(seq_len=32), optim=OptimConfig(),
                            train=TrainConfig(batch_size=4, label_smoothing=0.1, z_loss=1e-2),
                            checkpoint=CheckpointConfig())
  task = kinds.build_task(config, DataFacts(vocab_size=V - 1))  # + [MASK] = V
  batch = task.random_batch(4, np.random.default_rng(0))
  params = task.init_params(jax.random.PRNGKey(0))
  stats = _stats(task, params, batch)
  loss_sum, weight_sum, _ = task.loss_sums(params, batch, jax.random.PRNGKey(0))
  np.testing.assert_allclose(stats["loss"], loss_sum / weight_sum, rtol=1e-6)
  plain_sum, plain_weight = cross_entropy_sums(task.apply(params, batch["inputs"]),
                                               batch["targets"], batch["weights"])
  assert abs(stats["loss"] - plain_sum / plain_weight) > 1e-2


def test_diagnostics_off_leaves_the_forward_pass_without_the_statistics():
  """The statistics are computed only when "diagnostics" is mutable: the plain apply (what
  the train step runs) has none of their ops (the entropy's `log`, the explicit logits)."""
  _, task, params, batch = _setup()
  plain = str(jax.make_jaxpr(lambda p: task.model.apply({"params": p}, batch["inputs"]))(params))
  sowing = str(jax.make_jaxpr(lambda p: task.model.apply({"params": p}, batch["inputs"],
                                                         mutable=["diagnostics"]))(params))
  assert re.search(r"= log ", sowing) and not re.search(r"= log ", plain)
  assert len(sowing) > len(plain)


def test_training_loop_and_diagnose_mode_write_rows_for_every_layer(tiny_corpus, tmp_path):
  from tests.test_train import _tiny_config
  from transformer.train.loop import train_and_evaluate
  config = _tiny_config(tiny_corpus, num_steps=6, diagnostics_every=3, log_every=3, eval_every=6)
  workdir = str(tmp_path / "run")
  train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  diag = [r for r in rows if r["split"] == "diagnostics"]
  assert [r["step"] for r in diag] == [0, 3]
  for r in diag:
    for i in range(config.model.num_layers):
      assert np.isfinite(r[f"decoder/layer_{i}/self_attention/grad_norm"])
      assert np.isfinite(r[f"decoder/layer_{i}/residual_rms"])
  assert os.path.isdir(os.path.join(workdir, "tensorboard", "diagnostics"))

  stats = diagnostics.run_diagnose(config, workdir, log=lambda m: None)  # from the checkpoint
  with open(os.path.join(workdir, "diagnose.json")) as f:
    saved = json.load(f)
  assert saved["step"] == 6 and len(saved["layers"]) == config.model.num_layers
  from PIL import Image  # matplotlib's own dependency
  with Image.open(os.path.join(workdir, "diagnose.webp")) as image:
    assert image.format == "WEBP" and image.size[0] > 500  # the figure file reports write
    colors = image.convert("RGB").getcolors(maxcolors=256)  # None past 256 colours
    assert colors is not None and len(colors) <= figure_file.COLORS
  assert np.isfinite(stats["decoder/layer_0/grad_norm"])


def test_pmap_records_the_diagnostics_jit_records(tiny_corpus, tmp_path):
  """The first diagnostics row (the state at init, on the first batch, with the same key) is
  the same under pmap, which reads its placed state and split batch (`Parallel.one_view`), as
  under jit, up to the order of float32 sums across 8 devices."""
  from tests.test_train import _tiny_config
  from transformer.train import loop
  rows = {}
  for strategy in ("jit", "pmap"):
    cfg = _tiny_config(tiny_corpus, num_steps=1, eval_every=1, log_every=1,
                       diagnostics_every=1)
    cfg = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel,
                                                                strategy=strategy))
    loop.train_and_evaluate(cfg, str(tmp_path / strategy))
    with open(tmp_path / strategy / "metrics.jsonl") as f:
      rows[strategy] = next(row for row in map(json.loads, f)
                            if row["split"] == "diagnostics" and row["step"] == 0)
  jit, pmap = rows["jit"], rows["pmap"]
  keys = [k for k, v in jit.items() if isinstance(v, float) and k != "time"]
  assert len(keys) > 20 and set(keys) <= set(pmap)
  np.testing.assert_allclose([pmap[k] for k in keys], [jit[k] for k in keys], rtol=2e-4,
                             atol=1e-7)
