"""Whole models: the encoder-decoder against a NumPy forward pass of the equations, causality
through gradients, padding invariance and isolation of packed segments."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import numpy_reference as ref
from transformer.config import ModelConfig
from transformer.model.attention import causal_mask
from transformer.model.models import (Classifier, DecoderLM, EncoderDecoder, MaskedLM,
                                      shift_right)
from transformer.model.stacks import TransformerStack

V = 23


def _cfg(**kw):
  base = dict(vocab_size=V, d_model=16, num_heads=4, num_layers=1, d_ff=32, max_len=64)
  base.update(kw)
  return ModelConfig(**base)


def _init(model, *args):
  return nn.meta.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), *args)["params"])


def _apply(model, params, *args):
  """Jitted forward pass (much faster than op-by-op on CPU)."""
  return np.asarray(jax.jit(model.apply)({"params": params}, *args))


def _randomize(params, seed):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: rng.normal(0.0, 0.3, p.shape).astype(np.float32), params)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_encoder_decoder_matches_numpy_forward(placement):
  """The Transformer of Vaswani et al. (ReLU, sinusoidal, scaled shared embeddings, tied
  output) computed in float64 NumPy from the equations, with the same weights."""
  cfg = _cfg(kind="encoder_decoder", num_layers=2, activation="relu", norm_placement=placement,
             positions="sinusoidal", attention_impl="reference", tie_embeddings=True,
             embed_scale=True)
  rng = np.random.default_rng(0)
  src = rng.integers(3, V, size=(2, 7)).astype(np.int32)
  src[1, 5:] = 0  # padding in the source
  tgt_in = rng.integers(3, V, size=(2, 5)).astype(np.int32)
  model = EncoderDecoder(cfg)
  params = _randomize(_init(model, src, tgt_in), 1)
  got = _apply(model, params, src, tgt_in)
  p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  want = np.stack([ref.encoder_decoder(src[b], tgt_in[b], p64, placement, cfg.num_layers,
                                       cfg.norm_epsilon) for b in range(2)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "rope"])
def test_causality_through_gradients(positions):
  """d output[t] / d input[s] is zero for s > t and nonzero for s <= t."""
  cfg = _cfg(positions=positions, num_kv_heads=2, num_layers=2)
  x = np.random.default_rng(0).normal(size=(1, 8, 16)).astype(np.float32)
  stack = TransformerStack(cfg)
  params = _init(stack, x, causal_mask(8))
  w = np.random.default_rng(1).normal(size=16).astype(np.float32)  # (LN rows sum to a constant)

  jac = jax.jit(jax.jacrev(lambda x: stack.apply({"params": params}, x, causal_mask(8))[0] @ w))
  jac = np.asarray(jac(x))  # [t, 1, s, d]: d (output[t] . w) / d x[s]
  for t in range(8):
    dep = np.abs(jac[t, 0]).sum(-1)
    assert np.all(dep[t + 1:] == 0), (t, dep)
    assert np.all(dep[:t + 1] > 0), (t, dep)


def test_encoder_decoder_decoder_is_causal_and_sees_the_whole_source():
  cfg = _cfg(kind="encoder_decoder")
  rng = np.random.default_rng(0)
  src = rng.integers(3, V, size=(1, 6)).astype(np.int32)
  tgt = rng.integers(3, V, size=(1, 8)).astype(np.int32)
  model = EncoderDecoder(cfg)
  params = _init(model, src, tgt)
  base = _apply(model, params, src, tgt)
  changed_tgt = tgt.copy()
  changed_tgt[0, 5:] = (changed_tgt[0, 5:] + 1 - 3) % (V - 3) + 3
  out = _apply(model, params, src, changed_tgt)
  np.testing.assert_allclose(out[0, :5], base[0, :5], atol=1e-6)
  assert np.abs(out[0, 5:] - base[0, 5:]).max() > 1e-4
  changed_src = src.copy()
  changed_src[0, -1] = (src[0, -1] + 1 - 3) % (V - 3) + 3
  out = _apply(model, params, changed_src, tgt)
  assert np.abs(out[0, 0] - base[0, 0]).max() > 1e-4  # the first target sees the last source


def test_padding_does_not_change_real_outputs():
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, V, size=(2, 6)).astype(np.int32)
  padded = np.concatenate([tokens, np.zeros((2, 4), np.int32)], axis=1)
  for model in (MaskedLM(_cfg(kind="masked_lm")), Classifier(_cfg(kind="classifier"))):
    params = _init(model, padded)
    a = _apply(model, params, tokens)
    b = _apply(model, params, padded)
    if a.ndim == 3:
      b = b[:, :6]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

  ed = EncoderDecoder(_cfg(kind="encoder_decoder", positions="learned"))
  tgt = rng.integers(3, V, size=(2, 5)).astype(np.int32)
  params = _init(ed, padded, tgt)
  np.testing.assert_allclose(_apply(ed, params, tokens, tgt),
                             _apply(ed, params, padded, tgt), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "rope"])
def test_packed_segments_do_not_see_each_other(positions):
  rng = np.random.default_rng(0)
  a = rng.integers(3, V, size=5).astype(np.int32)
  b = rng.integers(3, V, size=4).astype(np.int32)
  packed = np.concatenate([a, b, [0]])[None]
  segments = np.array([[1] * 5 + [2] * 4 + [0]])
  pos = np.array([list(range(5)) + list(range(4)) + [0]])

  lm = DecoderLM(_cfg(positions=positions))
  params = _init(lm, packed)
  out = _apply(lm, params, packed, pos, segments)
  np.testing.assert_allclose(out[0, :5], _apply(lm, params, a[None])[0], atol=1e-5)
  np.testing.assert_allclose(out[0, 5:9], _apply(lm, params, b[None])[0], atol=1e-5)

  ed = EncoderDecoder(_cfg(kind="encoder_decoder", positions=positions))
  ta = rng.integers(3, V, size=3).astype(np.int32)
  tb = rng.integers(3, V, size=6).astype(np.int32)
  tgt = np.concatenate([ta, tb])[None]
  tseg = np.array([[1] * 3 + [2] * 6])
  tpos = np.array([list(range(3)) + list(range(6))])
  params = _init(ed, packed, tgt)
  out = _apply(ed, params, packed, tgt, pos, segments, tpos, tseg)
  np.testing.assert_allclose(out[0, :3], _apply(ed, params, a[None], ta[None])[0],
                             atol=1e-5)
  np.testing.assert_allclose(out[0, 3:], _apply(ed, params, b[None], tb[None])[0],
                             atol=1e-5)


def test_shift_right_puts_bos_first_in_every_segment():
  targets = jnp.array([[5, 6, 2, 7, 8, 2, 0]])
  segments = jnp.array([[1, 1, 1, 2, 2, 2, 0]])
  np.testing.assert_array_equal(shift_right(targets, 1), [[1, 5, 6, 2, 7, 8, 2]])
  np.testing.assert_array_equal(shift_right(targets, 1, segments), [[1, 5, 6, 1, 7, 8, 0]])


def test_untied_embeddings_add_an_output_layer_and_tied_do_not():
  tokens = np.ones((1, 4), np.int32)

  def _init(model, *args):  # shapes only
    return nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), *args)["params"])

  for kind, model_cls in [("decoder_lm", DecoderLM), ("masked_lm", MaskedLM)]:
    tied = _init(model_cls(_cfg(kind=kind, tie_embeddings=True)), tokens)
    untied = _init(model_cls(_cfg(kind=kind, tie_embeddings=False)), tokens)
    assert "logits" not in tied and untied["logits"]["kernel"].shape == (16, V)
  untied = _init(EncoderDecoder(_cfg(kind="encoder_decoder", tie_embeddings=False)), tokens,
                 tokens)
  assert untied["logits"]["kernel"].shape == (16, V)


def test_encoder_decoder_base_config_has_the_papers_size():
  from configs.seq2seq_base import get_config
  from transformer.config import from_config_dict
  cfg = from_config_dict(get_config(), vocab_size=37000).model
  model = EncoderDecoder(cfg)
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32),
                                             jnp.ones((1, 8), jnp.int32)))
  n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.meta.unbox(shapes["params"])))
  # Vaswani et al., Table 3: 65M parameters for the base model (shared 37k BPE vocabulary).
  assert 60e6 < n < 66e6, n
