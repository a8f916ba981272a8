"""The Flax block computes the textbook's formulas (checked against tests/numpy_reference)."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests import numpy_reference as ref
from transformer.config import ModelConfig
from transformer.model.attention import causal_mask
from transformer.model.block import Block
from transformer.model.stacks import TransformerStack


def _randomize(params, seed):
  """Replaces every parameter (norm scales and biases included) by random values, so no
  term of the formula can hide behind an initial 1 or 0."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: rng.normal(0.0, 0.3, p.shape).astype(np.float32), params)


def _to64(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("causal", [False, True])
def test_block_matches_numpy_reference(placement, activation, causal):
  cfg = ModelConfig(d_model=16, num_heads=4, d_ff=32, num_layers=1, activation=activation,
                    norm_placement=placement, attention_impl="reference")
  x = np.random.default_rng(0).normal(size=(2, 7, 16)).astype(np.float32)
  mask = causal_mask(7) if causal else None
  block = Block(cfg)
  params = _randomize(nn.meta.unbox(block.init(jax.random.PRNGKey(0), x, mask)["params"]), 1)
  got = np.asarray(block.apply({"params": params}, x, mask))

  act = ref.relu if activation == "relu" else ref.gelu_tanh
  np_mask = np.tril(np.ones((7, 7), bool)) if causal else None
  want = np.stack([ref.block(xb, _to64(params), placement, np_mask, act, cfg.norm_epsilon)
                   for xb in x.astype(np.float64)])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_post_norm_outputs_are_normalized_and_pre_norm_residual_is_not():
  """Post-norm ends each block in LN (unit-scale rows); pre-norm leaves the residual stream
  un-normalized, so its stack needs (and has) a final norm."""
  x = np.random.default_rng(0).normal(3.0, 5.0, size=(2, 5, 16)).astype(np.float32)
  for placement, has_final in [("post", False), ("pre", True)]:
    cfg = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=2, norm_placement=placement)
    variables = TransformerStack(cfg).init(jax.random.PRNGKey(0), x)
    assert ("final_norm" in variables["params"]) == has_final
  cfg = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, norm_placement="post")
  block = Block(cfg)
  y = np.asarray(block.apply(block.init(jax.random.PRNGKey(0), x), x))
  np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(y.std(-1), 1.0, atol=1e-3)


def test_each_block_materialises_its_input_once():
  """Every block's input passes an optimization barrier, so XLA cannot recompute the residual
  stream inside later blocks (on CPU that made a 12-layer pre-norm step twice as slow as
  post-norm's; `python launch.py --mode=bench --config.model.norm_placement=pre` measures it).
  The values are the reference's, as the tests above check."""
  cfg = ModelConfig(d_model=16, num_heads=4, d_ff=32, num_layers=3, norm_placement="pre")
  stack = TransformerStack(cfg)
  x = np.zeros((2, 5, 16), np.float32)
  params = stack.init(jax.random.PRNGKey(0), x)
  eqns = str(jax.make_jaxpr(lambda p: stack.apply(p, x))(params))
  assert eqns.count("optimization_barrier") == 3
