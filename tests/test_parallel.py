"""Sharded (jit over a mesh) and pmap training against the single-device run, gradient
accumulation against one big step, scan against unrolled layers, remat and dtypes."""

import dataclasses
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.config import ConfigError, ModelConfig, OptimConfig, ParallelConfig
from transformer.model.models import DecoderLM
from transformer.train import optim
from transformer.tasks.losses import cross_entropy_sums
from transformer.train.parallel import (JitParallel, Parallel, PmapParallel,
                                         hybrid_device_grid, make_mesh, mesh_shape)

# No projection biases: the key bias has an exactly-zero true gradient (softmax is shift-
# invariant), so its updates are float rounding noise that no two layouts share.
MODEL = ModelConfig(vocab_size=259, d_model=32, num_heads=4, num_layers=2, d_ff=64,
                    use_bias=False)
BATCH, LEN, STEPS = 16, 12, 2


def _batches(n=STEPS, batch=BATCH, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    tokens = rng.integers(3, 259, size=(batch, LEN + 1)).astype(np.int32)
    weights = (rng.random((batch, LEN)) > 0.2).astype(np.float32)  # uneven weights per row
    out.append({"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": weights})
  return out


def _parallel(pcfg, model_cfg=MODEL, micro_batches=1, devices=None, batch=BATCH):
  model = DecoderLM(model_cfg)
  # eps above float32 noise, so that Adam does not blow near-zero gradients up to full steps.
  tx = optim.build_optimizer(OptimConfig(learning_rate=1e-2, warmup_steps=0, eps=1e-6), 100)
  tokens = jnp.zeros((2, LEN), jnp.int32)
  boxed = lambda rng: model.init({"params": rng}, tokens)["params"]

  def loss_sums(params, b, rng):
    logits = model.apply({"params": params}, b["inputs"], deterministic=False,
                         rngs={"dropout": rng})
    return cross_entropy_sums(logits, b["targets"], b["weights"])

  def eval_sums(params, b):
    loss_sum, w = cross_entropy_sums(model.apply({"params": params}, b["inputs"]),
                                     b["targets"], b["weights"])
    return {"loss_sum": loss_sum, "tokens": w}

  return Parallel(pcfg, init_params=lambda r: nn.meta.unbox(boxed(r)), tx=tx,
                  loss_sums=loss_sums, eval_sums=eval_sums, global_batch_size=batch,
                  micro_batches=micro_batches, init_boxed_params=boxed, devices=devices)


def _train(par, batches, evaluate=False):
  state = par.init_state(jax.random.PRNGKey(0))
  losses = []
  for b in batches:
    state, metrics = par.train_step(state, b, jax.random.PRNGKey(1))
    losses.append(float(metrics["loss"]))
  evals = jax.device_get(par.eval_step(state, batches[0])) if evaluate else None
  return jax.device_get(par.to_checkpoint(state)), losses, evals


@pytest.fixture(scope="module")
def single_device_run():
  par = _parallel(ParallelConfig(data=1), devices=jax.devices()[:1])
  return _train(par, _batches(), evaluate=True)


# Adam divides each update by the root of its squared gradient, so a weight whose gradient is
# all rounding noise moves by up to the LR's full step in either layout, and two summation orders
# of the same gradients land that weight apart. Seen: one weight in 1,024 (2,048 scanned) 3.0e-5
# (5.2e-5) away on a Xeon without AVX-512 (jax 0.12). So every weight must agree to OUTLIER_ATOL
# (0.5% of the 2e-2 that two steps of LR 1e-2 can move it), and all but OUTLIERS of a leaf's
# weights to `atol`: a real layout bug moves most of a leaf, not one weight.
OUTLIER_ATOL, OUTLIERS = 1e-4, 2


def _assert_same_run(run, reference, atol=2e-5):
  state, losses, evals = run
  ref_state, ref_losses, ref_evals = reference
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  if evals is not None:
    np.testing.assert_allclose(evals["loss_sum"], ref_evals["loss_sum"], rtol=1e-5)
  assert int(state.step) == STEPS
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(state.params),
                          jax.tree.leaves(ref_state.params)):
    name = jax.tree_util.keystr(path)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=OUTLIER_ATOL, err_msg=name)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    off = np.abs(a - b) > atol + 1e-4 * np.abs(b)
    assert off.sum() <= OUTLIERS, f"{name}: {off.sum()} of {off.size} weights beyond {atol:g}"


@pytest.mark.parametrize("sizes", [dict(data=8), dict(data=1, fsdp=8),
                                   dict(data=2, fsdp=2, tensor=2)], ids=str)
def test_jit_mesh_matches_single_device(sizes, single_device_run):
  assert len(jax.devices()) == 8
  par = _parallel(ParallelConfig(**sizes))
  assert par.num_devices == 8
  run = _train(par, _batches(), evaluate=True)
  _assert_same_run(run, single_device_run)
  # The layout is the one asked for, not silently replicated.
  sh = par.state_shardings
  embedding = sh.params["embedder"]["token_embedding"]["embedding"]  # [vocab, embed]
  wi = sh.params["decoder"]["layer_0"]["feed_forward"]["wi"]["kernel"]  # [embed, mlp]
  adam_mu = sh.opt_state[1][0].mu["decoder"]["layer_0"]["feed_forward"]["wi"]["kernel"]
  if sizes.get("fsdp", 1) > 1:
    assert embedding.spec[1] == "fsdp" and adam_mu.spec[0] == "fsdp"
  if sizes.get("tensor", 1) > 1:
    assert wi.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    assert embedding.spec[0] is None  # a 259-token vocabulary does not split in 2: replicated
  assert par.shard_batch(_batches(1)[0])["inputs"].sharding.spec == \
      jax.sharding.PartitionSpec(("data", "fsdp"))


def test_pmap_matches_single_device(single_device_run):
  par = _parallel(ParallelConfig(strategy="pmap"))
  assert isinstance(par, PmapParallel) and par.strategy == "pmap" and par.num_devices == 8
  _assert_same_run(_train(par, _batches(), evaluate=True), single_device_run)


def test_host_outputs_give_every_row_under_both_strategies():
  """What a task decodes on the host (BLEU's outputs) comes back whole, whichever layout."""
  batch = _batches(1)[0]
  want = np.asarray(batch["inputs"]).sum(-1)
  for pcfg, cls in ((ParallelConfig(data=2, fsdp=2, tensor=2), JitParallel),
                    (ParallelConfig(strategy="pmap"), PmapParallel)):
    par = _parallel(pcfg)
    assert type(par) is cls and par.strategy == pcfg.strategy
    state = par.init_state(jax.random.PRNGKey(0))
    outputs = par.host_outputs(lambda params, b: b["inputs"].sum(-1))
    got = outputs(state, batch)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)


def test_accumulating_four_micro_batches_equals_one_big_step(single_device_run):
  par = _parallel(ParallelConfig(data=1), micro_batches=4, devices=jax.devices()[:1])
  _assert_same_run(_train(par, _batches()), single_device_run)
  # ... and sharded over 8 devices at the same time (2 rows per device per micro-batch).
  par = _parallel(ParallelConfig(data=2, fsdp=4), micro_batches=2)
  _assert_same_run(_train(par, _batches()), single_device_run)


def _loss_and_grads(cfg, params, batch):
  model = DecoderLM(cfg)

  def loss(p):
    s, w = cross_entropy_sums(model.apply({"params": p}, batch["inputs"]), batch["targets"],
                              batch["weights"])
    return s / w
  return jax.jit(jax.value_and_grad(loss))(params)


def _stack_layers(params, num_layers):
  """Unrolled `layer_i` params -> the scanned layout (`layers`, leading [num_layers] axis)."""
  params = jax.tree.map(lambda x: x, params)  # copy the dict structure
  dec = dict(params["decoder"])
  layers = [dec.pop(f"layer_{i}") for i in range(num_layers)]
  dec["layers"] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
  return {**params, "decoder": dec}


def test_scan_equals_unrolled_and_remat_changes_nothing():
  batch = _batches(1)[0]
  params = nn.meta.unbox(DecoderLM(MODEL).init(jax.random.PRNGKey(0), batch["inputs"])["params"])
  loss, grads = _loss_and_grads(MODEL, params, batch)
  stacked = _stack_layers(params, MODEL.num_layers)
  for scan, remat in ((False, "full"), (False, "minimal"), (True, "none"), (True, "full")):
      cfg = dataclasses.replace(MODEL, scan_layers=scan, remat=remat)
      l2, g2 = _loss_and_grads(cfg, stacked if scan else params, batch)
      np.testing.assert_allclose(l2, loss, rtol=1e-6)
      want = _stack_layers(grads, MODEL.num_layers) if scan else grads
      for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_scanned_model_trains_sharded_like_single_device():
  cfg = dataclasses.replace(MODEL, scan_layers=True, remat="minimal")
  ref = _train(_parallel(ParallelConfig(data=1), cfg, devices=jax.devices()[:1]), _batches())
  par = _parallel(ParallelConfig(data=2, fsdp=2, tensor=2), cfg)
  kernel = par.state_shardings.params["decoder"]["layers"]["self_attention"]["query"]["kernel"]
  assert kernel.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)  # [L, e, n, h]
  # jax 0.12's XLA sums the sharded, rematerialized scan in another order (see OUTLIERS).
  _assert_same_run(_train(par, _batches()), ref)


def test_bfloat16_compute_and_params():
  batch = _batches(1)[0]
  params = nn.meta.unbox(DecoderLM(MODEL).init(jax.random.PRNGKey(0), batch["inputs"])["params"])
  loss32, _ = _loss_and_grads(MODEL, params, batch)
  loss16, grads16 = _loss_and_grads(dataclasses.replace(MODEL, dtype="bfloat16"), params, batch)
  assert abs(float(loss16) - float(loss32)) < 0.05  # bf16 keeps ~3 significant digits
  assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads16))  # params stay f32
  cfg = dataclasses.replace(MODEL, dtype="bfloat16", param_dtype="bfloat16")
  state, losses, _ = _train(_parallel(ParallelConfig(data=1), cfg, devices=jax.devices()[:1]),
                            _batches(3))
  assert all(p.dtype == jnp.bfloat16 for p in jax.tree.leaves(state.params))
  assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_the_mesh_comes_from_jax_make_mesh_in_device_order_with_auto_axes():
  mesh = make_mesh(ParallelConfig(data=2, fsdp=2, tensor=2))
  assert [d.id for d in mesh.devices.flat] == [d.id for d in jax.devices()]  # CPU: in order
  assert set(mesh.axis_types) == {jax.sharding.AxisType.Auto}  # not make_mesh's Explicit
  assert make_mesh(ParallelConfig(data=2), jax.devices()[:2]).devices.size == 2


def test_dcn_data_gives_each_process_its_own_block_of_the_data_axis():
  """create_hybrid_device_mesh on 8 stand-in devices of 2 processes (4 each, ids interleaved
  on purpose): data=4 of which dcn_data=2 across processes, fsdp=2 within each."""
  fake = [types.SimpleNamespace(id=i, process_index=i % 2, platform="cpu", device_kind="cpu")
          for i in range(8)]
  grid = hybrid_device_grid(ParallelConfig(data=4, fsdp=2, dcn_data=2), fake)
  assert grid.shape == (4, 2, 1)
  assert {d.process_index for d in grid[:2].flat} == {0}
  assert {d.process_index for d in grid[2:].flat} == {1}
  with pytest.raises(ConfigError, match="dcn_data=2, but the devices are in 1 processes"):
    make_mesh(ParallelConfig(data=-1, dcn_data=2))  # 8 devices, all in this process
  with pytest.raises(ConfigError, match="dcn_data=3 must divide the data axis, which is 8"):
    mesh_shape(ParallelConfig(dcn_data=3), 8)
  with pytest.raises(ConfigError, match="dcn_data=3 must divide --config.parallel.data=4"):
    ParallelConfig(data=4, dcn_data=3)
  with pytest.raises(ConfigError, match="dcn_data=0 must be a positive int"):
    ParallelConfig(dcn_data=0)
  with pytest.raises(ConfigError, match="needs --config.parallel.strategy=jit"):
    ParallelConfig(strategy="pmap", dcn_data=2)


def test_mesh_sizes_and_errors():
  assert mesh_shape(ParallelConfig(data=-1, tensor=2), 8) == {"data": 4, "fsdp": 1, "tensor": 2}
  assert make_mesh(ParallelConfig(fsdp=-1, data=2)).shape == {"data": 2, "fsdp": 4, "tensor": 1}
  with pytest.raises(ConfigError, match="parallel data=3"):
    mesh_shape(ParallelConfig(data=3), 8)
  with pytest.raises(ConfigError, match="tensor=-1 cannot fill"):
    mesh_shape(ParallelConfig(data=3, tensor=-1), 8)
  with pytest.raises(ConfigError, match="Only one"):
    ParallelConfig(data=-1, fsdp=-1)
  with pytest.raises(ConfigError, match="rules.embed='model'"):
    ParallelConfig(rules={"embed": "model"})
  with pytest.raises(ConfigError, match="pmap replicates"):
    ParallelConfig(strategy="pmap", fsdp=2)
  with pytest.raises(ConfigError, match="divisible by parallel.data x parallel.fsdp = 8"):
    _parallel(ParallelConfig(data=8), batch=12)
