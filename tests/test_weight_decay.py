"""Weight decay by parameter role (transformer/train/optim.py): the same leaves decayed whether
the layers are scanned or not, no norm or bias leaf ever decayed, and the unrolled mask equal
to the old `ndim >= 2` rule except on the 2-D attention biases."""

import itertools
import re

import jax
import numpy as np
import pytest

from transformer import kinds
from transformer.config import NORM_PLACEMENTS, NORMS, ConfigError, ModelConfig, OptimConfig
from transformer.train import optim

NOT_DECAYED = re.compile(r"(bias|scale|alpha|_omega)$")


def _shapes(cfg: ModelConfig):
  """The params' shapes (`jax.ShapeDtypeStruct` tree) of `cfg`'s model, without computing."""
  import flax.linen as nn
  model = kinds.build_model(cfg)
  if cfg.kind == "vit_classifier":
    args = (np.zeros((2, 4, 4, 1), np.float32),)
  elif cfg.kind == "encoder_decoder":
    args = (np.ones((2, 5), np.int32), np.ones((2, 5), np.int32))
  else:
    args = (np.ones((2, 5), np.int32),)
  return jax.eval_shape(lambda: nn.meta.unbox(model.init(jax.random.PRNGKey(0), *args)["params"]))


def _cfg(**kw):
  base = dict(d_model=16, num_heads=2, num_layers=4, d_ff=32, vocab_size=11, num_classes=3,
              mix_post_fraction=0.5)
  if kw.get("kind") == "vit_classifier":
    base.update(image_size=4, image_channels=1, patch_size=2)
  return ModelConfig(**{**base, **kw})


def _decayed(params, rule="role") -> dict[str, bool]:
  mask = optim.decay_mask(params, rule)
  return {jax.tree_util.keystr(p): bool(m)
          for p, m in jax.tree_util.tree_flatten_with_path(mask)[0]}


def _as_scanned_path(path: str, cfg: ModelConfig) -> str:
  """An unrolled leaf's path written as its scanned twin's: `['layer_3']` -> `['layers']`
  (Mix-LN: `['post_layers']` for the first floor(fraction * L) layers, else `['pre_layers']`)."""
  def layers(m):
    if cfg.norm_placement != "mix":
      return "['layers']"
    post = int(np.floor(cfg.mix_post_fraction * cfg.num_layers))
    return "['post_layers']" if int(m.group(1)) < post else "['pre_layers']"
  return re.sub(r"\['layer_(\d+)'\]", layers, path)


COMBOS = [(p, n, qk) for p, n, qk in itertools.product(NORM_PLACEMENTS, NORMS, (False, True))]


@pytest.mark.parametrize("placement,norm,qk_norm", COMBOS)
def test_scanned_and_unrolled_stacks_decay_the_same_roles(placement, norm, qk_norm):
  try:
    cfg = _cfg(norm_placement=placement, norm=norm, qk_norm=qk_norm)
  except ConfigError:
    pytest.skip("not a valid combination")
  unrolled = _decayed(_shapes(cfg))
  scanned = _decayed(_shapes(_cfg(norm_placement=placement, norm=norm, qk_norm=qk_norm,
                                  scan_layers=True)))
  # Every unrolled leaf maps onto one scanned leaf, with the same decision.
  mapped = {}
  for path, decayed in unrolled.items():
    mapped.setdefault(_as_scanned_path(path, cfg), set()).add(decayed)
  assert set(mapped) == set(scanned)
  for path, decisions in mapped.items():
    assert decisions == {scanned[path]}, path
  # No bias, norm scale/offset, DyT alpha or Admin omega decayed, scanned or not; the old rule
  # decayed the scanned ones (stacked to [layers, d]), which is what this test guards.
  for tree in (unrolled, scanned):
    assert not any(d for p, d in tree.items() if NOT_DECAYED.search(p.rstrip("']")))
    assert any(d for p, d in tree.items() if p.endswith("['kernel']"))
  old = _decayed(_shapes(_cfg(norm_placement=placement, norm=norm, qk_norm=qk_norm,
                              scan_layers=True)), "ndim")
  assert any(d for p, d in old.items() if NOT_DECAYED.search(p.rstrip("']")))


@pytest.mark.parametrize("kind", list(kinds.KINDS))
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_unrolled_mask_is_the_old_ndim_rule_but_for_attention_biases(kind, positions):
  """Runs made before (unrolled) decayed what they decay now, embeddings and position tables
  included, except the `[heads, head_dim]` query/key/value biases, which ndim >= 2 decayed."""
  for placement, norm in (("pre", "layernorm"), ("admin", "layernorm"), ("pre", "dyt")):
    params = _shapes(_cfg(kind=kind, positions=positions, norm_placement=placement, norm=norm,
                          qk_norm=True))
    role, old = _decayed(params), _decayed(params, "ndim")
    differ = {p for p in role if role[p] != old[p]}
    assert differ == {p for p in role if re.search(r"\['(query|key|value)'\]\['bias'\]$", p)}
    assert all(old[p] and not role[p] for p in differ)
    embeddings = [p for p in role if re.search(r"(embedding|table|cls_token)'\]$", p)]
    assert embeddings and all(role[p] for p in embeddings)


def test_an_unknown_parameter_name_is_an_error():
  with pytest.raises(ValueError, match="new_thing"):
    optim.decay_mask({"block": {"new_thing": np.zeros((3, 3))}})


def test_adamw_step_decays_kernels_only_in_a_scanned_model():
  """One AdamW step with zero gradients moves only the decayed leaves, each by exactly
  -lr * weight_decay * p (NumPy); norm scales, biases and omegas keep their values."""
  import flax.linen as nn
  cfg = _cfg(norm_placement="admin", scan_layers=True, qk_norm=True)
  model = kinds.build_model(cfg)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), np.ones((2, 5), np.int32))["params"])
  ocfg = OptimConfig(learning_rate=0.01, warmup_steps=0, weight_decay=0.5, clip_norm=0.0,
                     decay="constant")
  tx = optim.build_optimizer(ocfg, 10)
  updates, _ = tx.update(jax.tree.map(np.zeros_like, params), tx.init(params), params)
  flat_p = dict(jax.tree_util.tree_flatten_with_path(params)[0])
  for path, u in jax.tree_util.tree_flatten_with_path(updates)[0]:
    p = np.asarray(flat_p[path], np.float64)
    name = jax.tree_util.keystr(path)
    if NOT_DECAYED.search(name.rstrip("']")):
      np.testing.assert_array_equal(np.asarray(u), 0.0, err_msg=name)
    else:
      np.testing.assert_allclose(np.asarray(u, np.float64), -0.01 * 0.5 * p, rtol=1e-6,
                                 atol=1e-12, err_msg=name)
