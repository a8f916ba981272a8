"""Norm placements, norm kinds, qk-norm and z-loss against the float64 NumPy transcriptions of
the papers' formulas in tests/numpy_reference.py; their init rules; scan == unrolled."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import numpy_reference as ref
from transformer.tasks import decode
from transformer.config import NORM_PLACEMENTS, ConfigError, ModelConfig, TrainConfig
from transformer.model.block import Block, deepnorm_constants
from transformer.model.models import DecoderLM, EncoderDecoder, MaskedLM, VisionTransformer
from transformer.model.stacks import TransformerStack
from transformer.tasks.losses import cross_entropy_sums

def _randomize(params, seed):
  """Every parameter (norm scales, biases, DyT alpha, Admin omega) random, so no term of a
  formula can hide behind an initial 1 or 0."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: rng.normal(0.0, 0.3, p.shape).astype(np.float32) + (
      1.0 if p.ndim <= 1 else 0.0), params)


def _to64(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def _cfg(**kw):
  base = dict(d_model=16, num_heads=4, d_ff=32, num_layers=3, attention_impl="reference")
  base.update(kw)
  return ModelConfig(**base)


@pytest.mark.parametrize("placement,norm,qk_norm,impl", [
    ("post", "layernorm", False, "reference"), ("pre", "layernorm", False, "reference"),
    ("peri", "layernorm", False, "reference"), ("deepnorm", "layernorm", False, "reference"),
    ("admin", "layernorm", False, "reference"), ("pre", "rmsnorm", False, "reference"),
    ("pre", "dyt", False, "reference"), ("pre", "none", False, "reference"),
    ("peri", "dyt", True, "reference"), ("post", "rmsnorm", True, "xla"),
    ("pre", "layernorm", True, "xla"), ("deepnorm", "dyt", True, "xla"),
    ("hybrid", "layernorm", False, "reference"), ("hybrid", "rmsnorm", False, "xla"),
    ("hybrid", "dyt", False, "reference"), ("hybrid_v0", "layernorm", False, "reference"),
    ("hybrid_v0", "rmsnorm", False, "xla")])
def test_block_matches_numpy_reference(placement, norm, qk_norm, impl):
  cfg = _cfg(norm_placement=placement, norm=norm, qk_norm=qk_norm, attention_impl=impl)
  x = np.random.default_rng(0).normal(size=(2, 7, 16)).astype(np.float32)
  block = Block(cfg, num_layers=5, role="decoder_only")
  mask = np.tril(np.ones((7, 7), bool))
  params = _randomize(nn.meta.unbox(block.init(jax.random.PRNGKey(0), x, mask)["params"]), 1)
  got = np.asarray(block.apply({"params": params}, x, mask))
  alpha = ref.deepnorm_alpha_beta("decoder_only", 0, 5)[0]
  want = np.stack([ref.general_block(xb, _to64(params), placement, norm, mask, ref.gelu_tanh,
                                     cfg.norm_epsilon, alpha, qk_norm)[0]
                   for xb in x.astype(np.float64)])
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_hybridnorm_is_the_papers_block_with_grouped_queries():
  """HybridNorm (Zhuo et al. 2025) as its paper and official config build it: RMSNorm with
  eps 1e-5, no bias, grouped-query attention (4 query heads, 2 key/value heads); its q, k, v
  norms are per head (one `[head_dim]` scale for all heads), the earlier reading's over all
  heads (`[heads * head_dim]`)."""
  cfg = _cfg(norm_placement="hybrid", norm="rmsnorm", norm_epsilon=1e-5, num_kv_heads=2,
             use_bias=False, activation="swiglu")
  x = np.random.default_rng(3).normal(size=(2, 6, 16)).astype(np.float32)
  mask = np.tril(np.ones((6, 6), bool))
  block = Block(cfg, role="decoder_only")
  params = _randomize(nn.meta.unbox(block.init(jax.random.PRNGKey(0), x, mask)["params"]), 4)
  attention = params["self_attention"]
  assert {n: attention[f"{n}_norm"]["scale"].shape for n in ("query", "key", "value")} == {
      "query": (4,), "key": (4,), "value": (4,)}
  got = np.asarray(block.apply({"params": params}, x, mask))
  p64 = _to64(params)
  ffn = lambda h, p: ref.swiglu_feed_forward(h, {k: {"bias": 0.0, **v} for k, v in p.items()})
  want = []
  for xb in x.astype(np.float64):  # Y = MHA_QKV(X) + X; X' = FFN(Norm(Y)) + Norm(Y)
    y = xb + ref.qkv_normed_attention(xb, xb, p64["self_attention"], "rmsnorm", mask, 1e-5)
    y_normed = ref.rms_norm(y, p64["feed_forward_norm"]["scale"], 1e-5)
    want.append(ffn(y_normed, p64["feed_forward"]) + y_normed)
  np.testing.assert_allclose(got, np.stack(want), rtol=2e-5, atol=2e-5)
  old = Block(dataclasses.replace(cfg, norm_placement="hybrid_v0"), role="decoder_only")
  old_attention = nn.meta.unbox(old.init(jax.random.PRNGKey(0), x, mask)["params"])[
      "self_attention"]
  assert old_attention["value_norm"]["scale"].shape == (8,)  # 2 kv heads x 4


@pytest.mark.parametrize("placement,norm", [("pre", "dyt"), ("peri", "layernorm"),
                                            ("hybrid", "rmsnorm"), ("hybrid", "dyt")])
def test_norm_parameters_start_where_the_papers_start_them(placement, norm):
  """DyT (Zhu et al. 2025, §3): a scalar alpha at alpha_0, gamma = 1, beta = 0; LayerNorm and
  RMSNorm gamma = 1 (beta = 0); Peri-LN's output norm learnable from gamma = 1 (Kim et al.
  2025); HybridNorm's q, k, v norms one `[head_dim]` set for all heads (its official code)."""
  cfg = _cfg(norm_placement=placement, norm=norm, dyt_alpha_init=0.3)
  x = np.zeros((1, 3, 16), np.float32)
  params = nn.meta.unbox(Block(cfg).init(jax.random.PRNGKey(0), x)["params"])
  norms = {k: v for k, v in params.items() if k.endswith("norm")}
  if placement == "hybrid":
    norms.update({f"attention/{k}": v for k, v in params["self_attention"].items()
                  if k.endswith("norm")})
    assert {k for k in norms if k.startswith("attention/")} == {
        "attention/query_norm", "attention/key_norm", "attention/value_norm"}
  assert ("self_attention_out_norm" in norms) == (placement == "peri")
  for name, p in norms.items():
    width = 4 if name.startswith("attention/") else 16  # head_dim = 16 / 4 heads
    np.testing.assert_array_equal(p["scale"], np.ones(width), err_msg=name)
    if "bias" in p:
      np.testing.assert_array_equal(p["bias"], np.zeros(width), err_msg=name)
    if norm == "dyt":
      assert np.shape(p["alpha"]) == () and float(p["alpha"]) == pytest.approx(0.3), name


def _stack_scanned(params, cfg, num_layers):
  """Unrolled `layer_i` params -> the scanned layout (`layers`; with mix, `post_layers` and
  `pre_layers`), each with a leading layer axis."""
  params = dict(params)
  layers = [params.pop(f"layer_{i}") for i in range(num_layers)]
  stack = lambda ls: jax.tree.map(lambda *xs: np.stack(xs), *ls)
  if cfg.norm_placement == "mix":
    k = int(np.floor(cfg.mix_post_fraction * num_layers))
    params["post_layers"], params["pre_layers"] = stack(layers[:k]), stack(layers[k:])
  else:
    params["layers"] = stack(layers)
  return params


@pytest.mark.parametrize("placement", NORM_PLACEMENTS)
def test_stack_matches_numpy_and_scan_equals_unrolled(placement):
  """A 4-layer stack (Mix-LN with 2 post + 2 pre layers) against NumPy, layer by layer with
  the final norm the placement calls for; the scanned stack computes the same."""
  L = 4
  cfg = _cfg(norm_placement=placement, num_layers=L, mix_post_fraction=0.5)
  x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
  mask = np.tril(np.ones((5, 5), bool))
  stack = TransformerStack(cfg, role="decoder_only")
  params = _randomize(nn.meta.unbox(stack.init(jax.random.PRNGKey(0), x, mask)["params"]), 2)
  got = np.asarray(stack.apply({"params": params}, x, mask))

  alpha = ref.deepnorm_alpha_beta("decoder_only", 0, L)[0]
  p64 = _to64(params)
  want = [ref.decoder_stack(xb, p64, placement, "layernorm", mask, ref.gelu_tanh,
                            cfg.norm_epsilon, alpha, post_fraction=0.5)
          for xb in x.astype(np.float64)]
  np.testing.assert_allclose(got, np.stack(want), rtol=2e-5, atol=2e-5)
  assert ("final_norm" in params) == ref.FINAL_NORM[placement]

  scan_cfg = dataclasses.replace(cfg, scan_layers=True)
  scanned = _stack_scanned(params, cfg, L)
  got_scan = TransformerStack(scan_cfg, role="decoder_only").apply({"params": scanned}, x, mask)
  np.testing.assert_allclose(got_scan, got, rtol=1e-5, atol=1e-5)


def _decoder_omegas(params, num_layers):
  """Admin's omegas of a DecoderLM's params, in execution order (unrolled or scanned)."""
  dec = params["decoder"]
  if "layers" in dec:
    dec = {f"layer_{i}": jax.tree.map(lambda a: a[i], dec["layers"]) for i in range(num_layers)}
  return [np.asarray(dec[f"layer_{i}"][f"{s}_omega"]) for i in range(num_layers)
          for s in ("self_attention", "feed_forward")]


def _numpy_admin_profile(params, tokens, cfg):
  """Admin's omegas (Liu et al. 2020), float64 NumPy: `tokens` `[batch, len]` run through a
  NumPy transcription of the decoder (sinusoidal positions, embeddings x sqrt(d), causal
  mask, post-LN-style Admin blocks with GELU) at omega = 1 with `params`' other weights;
  omega_i = sqrt(Var[x0] + sum_{j<i} Var[f_j]) (`ref.admin_omegas`)."""
  L, d = cfg.num_layers, cfg.d_model
  params = _to64(params)
  dec = params["decoder"]
  if "layers" in dec:
    dec = {f"layer_{i}": jax.tree.map(lambda a: a[i], dec["layers"]) for i in range(L)}
  table = params["embedder"]["token_embedding"]["embedding"]
  n = tokens.shape[1]
  x0 = table[tokens] * np.sqrt(d) + ref.sinusoidal(n, d)[None]
  mask = np.tril(np.ones((n, n), bool))
  ones = {f"layer_{i}": {**dec[f"layer_{i}"], "self_attention_omega": 1.0,
                         "feed_forward_omega": 1.0} for i in range(L)}
  branches = [[] for _ in range(2 * L)]
  for xb in x0:
    for i in range(L):
      xb, ys = ref.general_block(xb, ones[f"layer_{i}"], "admin", "layernorm", mask,
                                 ref.gelu_tanh, cfg.norm_epsilon)
      branches[2 * i].append(ys[0])
      branches[2 * i + 1].append(ys[1])
  return ref.admin_omegas(x0, [np.stack(b) for b in branches])


@pytest.mark.parametrize("scan", [False, True])
def test_admin_omega_is_profiled_at_init(scan):
  """omega_i = sqrt(Var[x0] + sum_{j<i} Var[f_j]) on the init batch, with the branch outputs
  of a NumPy forward pass at omega = 1."""
  L = 3
  cfg = _cfg(norm_placement="admin", num_layers=L, vocab_size=23, scan_layers=scan)
  tokens = np.random.default_rng(0).integers(3, 23, size=(2, 6)).astype(np.int32)
  params = nn.meta.unbox(DecoderLM(cfg).init(jax.random.PRNGKey(0), tokens)["params"])
  got = _decoder_omegas(params, L)
  want = _numpy_admin_profile(params, tokens, cfg)
  assert len(set(np.round(want, 6))) == len(want)  # a profile, not a constant
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, np.full(16, w), rtol=1e-4)


def _admin_lm_config(corpus, **train):
  """A tiny Admin decoder LM on the `tiny_corpus` files (byte tokens, 16-token rows)."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir, c.data.data_dir = corpus["source_dir"], corpus["data_dir"]
    c.data.validation_percent, c.data.seq_len, c.data.shuffle_buffer = 20, 16, 64
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 4, 3, 32
    c.model.norm_placement, c.model.attention_impl = "admin", "reference"
    c.train.batch_size = 8
    for k, v in train.items():
      c.train[k] = v
  return from_config_dict(c)


@pytest.mark.parametrize("scan", [False, True])
def test_admin_omegas_are_profiled_on_a_training_batch(tiny_corpus, tmp_path, scan):
  """`task.init_params(rng, batch)` (what a training run calls with its first batch) gives
  the float64 NumPy profile of that batch of real text; the synthetic batch of runs without
  data is random regular tokens (not padding); and both differ from the all-zero batch that
  init used to profile on, so this test fails if the real batch is not the one used."""
  from transformer import kinds
  cfg = _admin_lm_config(tiny_corpus)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, scan_layers=scan))
  data, task = kinds.build_data_and_task(cfg, str(tmp_path / "w"))
  batch = data.next_train_batch()
  tokens = batch["inputs"]
  assert set(batch) == {"inputs", "targets", "weights"}  # concat rows: no positions/segments
  assert (tokens > 0).all() and len(np.unique(tokens)) > 10  # text, not padding
  rng = jax.random.PRNGKey(0)
  L, mcfg = 3, task.config.model
  params = jax.jit(task.init_params)(rng, batch)
  got = _decoder_omegas(params, L)
  want = _numpy_admin_profile(params, tokens, mcfg)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, np.full(16, w), rtol=1e-4)

  synthetic = np.asarray(task.example_inputs()[0])
  assert synthetic.shape == tokens.shape and synthetic.min() >= 3
  assert synthetic.max() < mcfg.vocab_size and len(np.unique(synthetic)) > 50
  no_data = _decoder_omegas(jax.jit(task.init_params)(rng), L)
  for g, w in zip(no_data, _numpy_admin_profile(params, synthetic, mcfg)):
    np.testing.assert_allclose(g, np.full(16, w), rtol=1e-4)

  zeros = np.zeros_like(tokens)
  old = _decoder_omegas(nn.meta.unbox(task.model.init(rng, zeros)["params"]), L)
  for other in (old, no_data):
    gap = max(abs(float(a[0]) - float(b[0])) / float(b[0]) for a, b in zip(got, other))
    assert gap > 0.02, gap


def test_admin_training_profiles_on_its_first_batch_and_trains_on_it(tiny_corpus, tmp_path):
  """At a learning rate of 1e-30 (no change in float32; 0 is refused) the omegas saved after
  step 1 are the profile of the pipeline's first batch, and the loss logged at step 2 (step 1,
  with compilation, is not logged) is the loss on the pipeline's *second* batch: the first was
  read for the profile and then trained on at step 1, not skipped. A run stopped after step 2
  resumes to the same params as a run that was not (the omegas come from the checkpoint, the
  data position is unchanged)."""
  import orbax.checkpoint as ocp

  from transformer import kinds
  from transformer.config import CheckpointConfig
  from transformer.train.loop import train_and_evaluate
  from transformer.workdir import read_metrics

  def saved_params(workdir, step):
    mngr = ocp.CheckpointManager(f"{workdir}/checkpoints", item_names=("state",))
    out = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    mngr.close()
    return out["state"]["params"]

  cfg = _admin_lm_config(tiny_corpus, num_steps=2, log_every=1, eval_every=2,
                         samples_at_eval=False)
  cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, learning_rate=1e-30),
                            checkpoint=CheckpointConfig(every_steps=1, keep=5))
  train_and_evaluate(cfg, str(tmp_path / "lr0"))
  data, task = kinds.build_data_and_task(cfg, str(tmp_path / "fresh"))
  first, second = data.next_train_batch(), data.next_train_batch()
  init_rng = jax.random.split(jax.random.PRNGKey(cfg.seed))[0]
  want = jax.jit(task.init_params)(init_rng, first)
  saved = saved_params(tmp_path / "lr0", 1)  # after step 1: still the initial values
  for g, w in zip(_decoder_omegas(saved, 3), _decoder_omegas(want, 3)):
    np.testing.assert_allclose(g, w, rtol=1e-6)
  loss_sum, tokens, _ = jax.jit(task.loss_sums)(saved, second, jax.random.PRNGKey(1))
  step2 = [r for r in read_metrics(str(tmp_path / "lr0"))["train"] if r["step"] == 2][0]
  np.testing.assert_allclose(step2["loss"], float(loss_sum / tokens), rtol=1e-5)
  skipped, _, _ = jax.jit(task.loss_sums)(saved, data.next_train_batch(), jax.random.PRNGKey(1))
  assert abs(float(skipped - loss_sum)) > 1e-3 * abs(float(loss_sum))  # the batches differ

  cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, learning_rate=3e-3),
                            train=dataclasses.replace(cfg.train, num_steps=4),
                            checkpoint=CheckpointConfig(every_steps=2, keep=5))
  train_and_evaluate(cfg, str(tmp_path / "straight"))
  train_and_evaluate(cfg, str(tmp_path / "resumed"), stop_after=2)
  train_and_evaluate(cfg, str(tmp_path / "resumed"))
  a, b = saved_params(tmp_path / "straight", 4), saved_params(tmp_path / "resumed", 4)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)


def test_vit_admin_omega_is_profiled_at_init():
  """The ViT's encoder gets Admin's profiled omegas like the text models: on the init images,
  x0 = [CLS (0); patches @ W + b] + position table, then the same rule as above."""
  L, p = 2, 2
  cfg = _cfg(kind="vit_classifier", norm_placement="admin", num_layers=L, num_classes=3,
             image_size=4, image_channels=1, patch_size=p)
  images = np.random.default_rng(0).random((2, 4, 4, 1)).astype(np.float32)
  params = _to64(nn.meta.unbox(VisionTransformer(cfg).init(jax.random.PRNGKey(0),
                                                           images)["params"]))
  stack = params["encoder"]["stack"]
  got = [stack[f"layer_{i}"][f"{s}_omega"] for i in range(L)
         for s in ("self_attention", "feed_forward")]
  # Row-major p x p patches, each flattened as (row, column, channel).
  patches = images.astype(np.float64).reshape(2, 2, p, 2, p, 1).transpose(0, 1, 3, 2, 4, 5)
  patches = patches.reshape(2, 4, p * p)
  embed = params["patch_embedding"]
  tokens = patches @ embed["kernel"] + embed["bias"]
  x0 = np.concatenate([np.zeros((2, 1, 16)), tokens], 1) + params["position_embedding"][None]
  ones = {f"layer_{i}": {**stack[f"layer_{i}"], "self_attention_omega": 1.0,
                         "feed_forward_omega": 1.0} for i in range(L)}
  branches = [[] for _ in range(2 * L)]
  for xb in x0:
    for i in range(L):  # every patch sees every patch: no mask
      xb, ys = ref.general_block(xb, ones[f"layer_{i}"], "admin", "layernorm", None,
                                 ref.gelu_tanh, cfg.norm_epsilon)
      branches[2 * i].append(ys[0])
      branches[2 * i + 1].append(ys[1])
  want = ref.admin_omegas(x0, [np.stack(b) for b in branches])
  assert len(set(np.round(want, 6))) == len(want) and not np.allclose(want, 1.0)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, np.full(16, w), rtol=1e-4)


@pytest.mark.parametrize("role", ["decoder_only", "encoder_only", "encoder", "decoder"])
def test_deepnorm_constants_follow_the_paper_table(role):
  for n, m in ((6, 6), (12, 4), (100, 100)):
    want = ref.deepnorm_alpha_beta(role, n, m)
    np.testing.assert_allclose(deepnorm_constants(role, n, m), want, rtol=1e-12)


def _kernels(params, path):
  for k in path:
    params = params[k]
  return np.asarray(params)


def test_deepnorm_scales_value_out_and_ffn_init_by_beta_for_each_role():
  """With the same key, DeepNorm's W_v, W_O, W_1, W_2 are beta times the standard init and
  W_q, W_k unchanged; beta by architecture and role (encoder-decoder: N=3, M=2)."""
  base = dict(vocab_size=23, num_layers=3)
  toks = np.full((2, 5), 4, np.int32)
  cases = [(DecoderLM, (toks,), ("decoder", "layer_1"), ("decoder_only", 0, 3)),
           (MaskedLM, (toks,), ("encoder", "stack", "layer_2"), ("encoder_only", 3, 0)),
           (EncoderDecoder, (toks, toks), ("encoder", "stack", "layer_0"), ("encoder", 3, 2)),
           (EncoderDecoder, (toks, toks), ("decoder", "layer_1"), ("decoder", 3, 2))]
  for cls, args, layer, (role, n, m) in cases:
    kw = dict(base, num_decoder_layers=2) if cls is EncoderDecoder else base
    kw["kind"] = {DecoderLM: "decoder_lm", MaskedLM: "masked_lm",
                  EncoderDecoder: "encoder_decoder"}[cls]
    init = lambda p: nn.meta.unbox(cls(_cfg(norm_placement=p, **kw)).init(
        jax.random.PRNGKey(3), *args)["params"])
    pre, deep = init("pre"), init("deepnorm")
    beta = ref.deepnorm_alpha_beta(role, n, m)[1]
    for sub, scaled in ((("self_attention", "value", "kernel"), True),
                        (("self_attention", "out", "kernel"), True),
                        (("feed_forward", "wi", "kernel"), True),
                        (("feed_forward", "wo", "kernel"), True),
                        (("self_attention", "query", "kernel"), False),
                        (("self_attention", "key", "kernel"), False)):
      a, b = _kernels(pre, layer + sub), _kernels(deep, layer + sub)
      np.testing.assert_allclose(b, a * (beta if scaled else 1.0), rtol=1e-5, atol=1e-7,
                                 err_msg=f"{cls.__name__} {role} {sub}")


@pytest.mark.parametrize("impl,positions,placement", [
    ("reference", "rope", "pre"), ("xla", "sinusoidal", "pre"), ("xla", "rope", "hybrid"),
    ("reference", "rope", "hybrid_v0")])
def test_qk_norm_cached_decoding_matches_full_forward(impl, positions, placement):
  """Queries and keys normalized per head (qk_norm), queries, keys and values per head
  (HybridNorm) or over all heads (hybrid_v0): the KV cache holds them normalized, so cached
  decoding equals the full pass."""
  hybrid = placement.startswith("hybrid")
  cfg = ModelConfig(vocab_size=19, d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=64,
                    qk_norm=not hybrid, norm="rmsnorm", attention_impl=impl, positions=positions,
                    norm_placement=placement, num_kv_heads=2 if hybrid else 0)
  model = DecoderLM(cfg)
  tokens = np.random.default_rng(0).integers(3, 19, size=(2, 8)).astype(np.int32)
  params = _randomize(nn.meta.unbox(model.init(jax.random.PRNGKey(0), tokens)["params"]), 4)
  attention = params["decoder"]["layer_0"]["self_attention"]
  assert "query_norm" in attention and ("value_norm" in attention) == hybrid
  full = jax.jit(model.apply)({"params": params}, tokens)

  @jax.jit
  def cached(params, tokens):
    step = decode.lm_step_fn(model, params)
    cache = decode.init_cache(model, 2, 8)
    first, cache = step(tokens[:, :3], jnp.broadcast_to(jnp.arange(3), (2, 3)), cache, {})
    outs = [first]
    for i in range(3, 8):
      logits, cache = step(tokens[:, i:i + 1], jnp.full((2, 1), i), cache, {})
      outs.append(logits)
    return jnp.concatenate(outs, axis=1)

  np.testing.assert_allclose(cached(params, tokens), full, rtol=1e-5, atol=1e-5)


def test_z_loss_matches_numpy():
  rng = np.random.default_rng(0)
  logits = rng.normal(0, 3, size=(2, 5, 11)).astype(np.float32)
  targets = rng.integers(0, 11, size=(2, 5))
  weights = (rng.random((2, 5)) > 0.3).astype(np.float32)
  for z in (0.0, 1e-4, 0.5):
    total, w = cross_entropy_sums(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights),
                                  z_loss=z)
    want = ref.z_loss_cross_entropy(logits.astype(np.float64), targets, z)
    np.testing.assert_allclose(total, np.sum(want * weights), rtol=1e-5)
    assert float(w) == weights.sum()


@pytest.mark.parametrize("fields,match", [
    (dict(norm="none", norm_placement="post"), "norm=none"),
    (dict(norm="none", norm_placement="mix"), "norm=none"),
    (dict(norm="none", qk_norm=True), "qk_norm"),
    (dict(norm_placement="hybrid", qk_norm=True), "already normalizes queries, keys and values"),
    (dict(norm_placement="hybrid_v0", qk_norm=True), "hybrid_v0.*already normalizes"),
    (dict(norm_placement="hybrid", norm="none"), "norm=none"),
    (dict(mix_post_fraction=1.5), "mix_post_fraction"),
    (dict(dyt_alpha_init=0.0), "dyt_alpha_init"),
    (dict(norm_placement="sandwich"), "norm_placement")])
def test_bad_norm_combinations_are_config_errors(fields, match):
  with pytest.raises(ConfigError, match=match):
    ModelConfig(**fields)


def test_bad_train_options_are_config_errors():
  with pytest.raises(ConfigError, match="z_loss"):
    TrainConfig(z_loss=-1.0)
  with pytest.raises(ConfigError, match="diagnostics_every"):
    TrainConfig(diagnostics_every=-5)
