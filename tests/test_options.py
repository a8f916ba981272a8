"""Each option list has one source, `transformer/config.py`; the mappings from a name to what it
means (jnp dtype, remat policy, activation function, norm module, attention kernel) cover
exactly its names, so adding a choice to config.py without its meaning fails here."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import analysis, warmup_stability
from transformer.config import (ACTIVATIONS, ATTENTION_IMPLS, DTYPES, NORM_PLACEMENTS, NORMS,
                                REMAT_POLICIES, ModelConfig, options_text)
from transformer.model.attention import check_implementation
from transformer.model.block import SUBLAYERS, Block
from transformer.model.common import JNP_DTYPES
from transformer.model.feedforward import ELEMENTWISE
from transformer.model.norms import make_norm
from transformer.model.stacks import JAX_REMAT_POLICIES


def test_options_text_lists_choices_as_error_messages_do():
  assert options_text(("relu", "gelu", "swiglu")) == "relu, gelu or swiglu"
  assert options_text(("'stop'", "'skip'")) == "'stop' or 'skip'"


def test_every_dtype_name_is_a_jnp_floating_dtype():
  assert tuple(JNP_DTYPES) == DTYPES
  for name, dtype in JNP_DTYPES.items():
    assert jnp.dtype(dtype).name == name and jnp.issubdtype(dtype, jnp.floating)


def test_every_remat_policy_but_none_has_a_jax_policy():
  assert set(JAX_REMAT_POLICIES) == set(REMAT_POLICIES) - {"none"}


def test_every_activation_is_elementwise_or_swiglu():
  assert set(ELEMENTWISE) | {"swiglu"} == set(ACTIVATIONS)


@pytest.mark.parametrize("kind", NORMS)
def test_every_norm_kind_builds(kind):
  norm = make_norm(kind, epsilon=1e-6, use_bias=True, dtype=jnp.float32,
                   param_dtype=jnp.float32, name="n")
  x = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
  y = norm.apply(norm.init(jax.random.PRNGKey(0), x), x)
  assert y.shape == x.shape


@pytest.mark.parametrize("impl", ATTENTION_IMPLS)
def test_every_attention_implementation_is_known(impl):
  try:
    check_implementation(impl, jnp.bfloat16)
  except ValueError as e:  # cudnn on a CPU: it names what is missing, not an unknown name
    assert "Unknown" not in str(e)


def test_the_block_names_its_sublayers_as_sublayers_lists_them():
  cfg = ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1)
  x = jnp.zeros((1, 3, 8))
  params = Block(cfg, cross_attention=True).init(jax.random.PRNGKey(0), x, encoded=x)["params"]
  modules = [k for k, v in params.items() if isinstance(v, (dict, nn.FrozenDict))
             and not k.endswith("norm")]
  assert tuple(modules) == SUBLAYERS


def test_studies_name_known_placements_and_activations():
  assert set(warmup_stability.PLACEMENTS) <= set(NORM_PLACEMENTS)
  for activation in ACTIVATIONS:  # each has the spelling papers use
    assert analysis.activation_name(activation) != activation
