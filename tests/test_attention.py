"""Attention, positions and feed-forward against independent references: NumPy of the
equations (tests/numpy_reference.py), `jax.nn.dot_product_attention` and
`flax.linen.MultiHeadDotProductAttention` with the same weights."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import numpy_reference as ref
from transformer.config import ACTIVATIONS, ATTENTION_IMPLS, ConfigError, ModelConfig
from transformer.model.attention import (MultiHeadAttention, causal_mask, fused_attention,
                                         padding_mask, segment_mask)
from transformer.model.feedforward import FeedForward
from transformer.model.positions import apply_rope, sinusoidal_encoding

B, T, D, H = 2, 6, 16, 4
CPU_IMPLS = [i for i in ATTENTION_IMPLS if i != "cudnn"]  # cudnn needs a GPU


def _randomize(params, seed, scale=0.3):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: rng.normal(0.0, scale, p.shape).astype(np.float32), params)


def _to64(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def _masks():
  """name -> boolean mask broadcastable to [B, heads, T, T] (numpy, for every implementation)."""
  tokens = np.array([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 4]])
  segments = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 2, 2, 2, 2]])
  return {
      "none": None,
      "causal": np.asarray(causal_mask(T)),
      "padding": np.asarray(padding_mask(tokens, tokens)),
      "causal_segments": np.asarray(causal_mask(T) & segment_mask(segments, segments)),
  }


def _visible_rows(mask):
  """[B, T] True where the query sees at least one key (other rows are padding queries)."""
  if mask is None:
    return np.ones((B, T), bool)
  return np.broadcast_to(mask, (B, 1, T, T))[:, 0].any(-1)


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "causal_segments"])
def test_reference_xla_and_flax_attention_agree(mask_name):
  mask = _masks()[mask_name]
  x = np.random.default_rng(0).normal(size=(B, T, D)).astype(np.float32)
  ours = MultiHeadAttention(num_heads=H, head_dim=D // H, implementation="reference")
  params = _randomize(nn.meta.unbox(ours.init(jax.random.PRNGKey(0), x, x)["params"]), 1)
  got_ref, inter = ours.apply({"params": params}, x, x, mask, mutable="intermediates")
  got_xla = MultiHeadAttention(num_heads=H, head_dim=D // H, implementation="xla").apply(
      {"params": params}, x, x, mask)
  flax_mha = nn.MultiHeadDotProductAttention(num_heads=H, qkv_features=D, out_features=D)
  flax_params = flax_mha.init(jax.random.PRNGKey(0), x, x)["params"]
  assert jax.tree.structure(flax_params) == jax.tree.structure(params)  # same names, shapes
  got_flax = flax_mha.apply({"params": params}, x, x, mask=mask)
  want = np.stack([ref.multi_head_attention(
      xb, xb, _to64(params), None if mask is None else np.broadcast_to(mask, (B, 1, T, T))[b, 0])
                   for b, xb in enumerate(x.astype(np.float64))])

  rows = _visible_rows(mask)
  for got in (got_ref, got_xla, got_flax):
    np.testing.assert_allclose(np.asarray(got)[rows], want[rows], rtol=1e-5, atol=1e-5)
  weights = np.asarray(inter["intermediates"]["attention_weights"][0])  # [B, H, T, T]
  np.testing.assert_allclose(weights.sum(-1)[rows[:, None, :].repeat(H, 1)], 1.0, atol=1e-6)
  if mask is not None:
    assert np.all(weights[~np.broadcast_to(mask, weights.shape)] == 0)


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_grouped_query_attention_matches_numpy(impl):
  x = np.random.default_rng(0).normal(size=(B, T, D)).astype(np.float32)
  mha = MultiHeadAttention(num_heads=H, head_dim=D // H, num_kv_heads=2, implementation=impl)
  params = _randomize(nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x)["params"]), 2)
  assert params["key"]["kernel"].shape == (D, 2, D // H)
  mask = np.asarray(causal_mask(T))
  got = np.asarray(mha.apply({"params": params}, x, x, mask))
  want = np.stack([ref.multi_head_attention(xb, xb, _to64(params), mask[0, 0])
                   for xb in x.astype(np.float64)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cross_attention_matches_numpy():
  rng = np.random.default_rng(0)
  xq = rng.normal(size=(B, T, D)).astype(np.float32)
  xkv = rng.normal(size=(B, 9, D)).astype(np.float32)
  mha = MultiHeadAttention(num_heads=H, head_dim=D // H, implementation="xla")
  params = _randomize(nn.meta.unbox(mha.init(jax.random.PRNGKey(0), xq, xkv)["params"]), 3)
  src_real = np.array([[1] * 9, [1] * 5 + [0] * 4], bool)
  got = np.asarray(mha.apply({"params": params}, xq, xkv, src_real[:, None, None, :]))
  want = np.stack([ref.multi_head_attention(
      xq[b].astype(np.float64), xkv[b].astype(np.float64), _to64(params),
      np.broadcast_to(src_real[b], (T, 9))) for b in range(B)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rope_attention_matches_numpy_complex_rotation():
  x = np.random.default_rng(0).normal(size=(B, T, D)).astype(np.float32)
  mha = MultiHeadAttention(num_heads=H, head_dim=D // H, rope=True, implementation="reference")
  params = _randomize(nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x)["params"]), 4)
  positions = np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 0, 1, 2]])
  got = np.asarray(mha.apply({"params": params}, x, x, positions=positions))
  want = np.stack([ref.multi_head_attention(x[b].astype(np.float64), x[b].astype(np.float64),
                                            _to64(params), None, positions[b])
                   for b in range(B)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rope_scores_depend_only_on_relative_position():
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)

  def score(m, n):
    rq = apply_rope(q, jnp.array([[m]]))
    rk = apply_rope(k, jnp.array([[n]]))
    return float(jnp.sum(rq * rk))

  for m, n in [(3, 1), (10, 4), (0, 5)]:
    for shift in (1, 7, 100):
      assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-4)
  assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)  # and it does depend on m - n
  # A rotation keeps lengths.
  np.testing.assert_allclose(jnp.linalg.norm(apply_rope(q, jnp.array([[13]]))),
                             jnp.linalg.norm(q), rtol=1e-6)


def test_sinusoidal_encoding_matches_the_formula():
  got = np.asarray(sinusoidal_encoding(jnp.arange(50)[None], 32))[0]
  np.testing.assert_allclose(got, ref.sinusoidal(50, 32), atol=2e-5)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_feed_forward_matches_numpy(activation):
  x = np.random.default_rng(0).normal(size=(B, T, D)).astype(np.float32)
  ffn = FeedForward(d_ff=24, activation=activation)
  params = _randomize(nn.meta.unbox(ffn.init(jax.random.PRNGKey(0), x)["params"]), 5)
  got = np.asarray(ffn.apply({"params": params}, x))
  p = _to64(params)
  if activation == "swiglu":
    want = ref.swiglu_feed_forward(x.astype(np.float64), p)
  else:
    act = ref.relu if activation == "relu" else ref.gelu_tanh
    want = ref.feed_forward(x.astype(np.float64), p, act)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unavailable_implementation_gives_a_clear_error():
  q = jnp.zeros((1, 4, 2, 8))
  with pytest.raises(ValueError, match="needs a GPU backend.*attention_impl=xla"):
    fused_attention(q, q, q, implementation="cudnn")
  x = jnp.zeros((1, 4, 16))
  with pytest.raises(ValueError, match="attention_impl"):
    MultiHeadAttention(num_heads=2, head_dim=8, implementation="flash").init(
        jax.random.PRNGKey(0), x, x)


@pytest.mark.parametrize("fields,message", [
    (dict(num_heads=4, num_kv_heads=3), "num_kv_heads"),
    (dict(d_model=12, num_heads=4, positions="rope"), "even head_dim"),
    (dict(activation="swish"), "activation"),
    (dict(kind="vision_lm"), "kind.*decoder_lm"),
])
def test_model_config_rejects_bad_combinations(fields, message):
  with pytest.raises(ConfigError, match=message):
    ModelConfig(**fields)
