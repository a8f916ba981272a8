"""GPU speed features (issue 19), each checked on CPU against today's path: causal attention as
`is_causal` instead of a dense mask, the padded vocabulary, and the chunked cross entropy."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.default import get_config
from transformer import kinds
from transformer.config import ConfigError, ModelConfig, from_config_dict
from transformer.tasks import decode
from transformer.model.attention import MultiHeadAttention, causal_mask, segment_mask
from transformer.model.models import DecoderLM, output_projection
from transformer.tasks.losses import chunked_cross_entropy_sums, cross_entropy_sums
from transformer.sampling import Sampling

B, T, D, H = 2, 6, 16, 4
# Packed rows (segment 0 = padding) and padded rows (real tokens, then padding).
SEGMENTS = {"packed": np.array([[1, 1, 1, 2, 2, 0], [1, 1, 2, 2, 2, 2]]),
            "padded": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])}


def _randomize(params, seed, scale=0.3):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: jnp.asarray(rng.normal(0.0, scale, p.shape), jnp.float32),
                      params)


def _attention_and_grads(mha, params, x, mask, rows):
  """Output `[B, T, D]` and the gradients (params, x) of a weighted sum over the real rows."""
  w = np.random.default_rng(5).normal(size=(B, T, D)).astype(np.float32)

  def f(params, x):
    out = mha.apply({"params": params}, x, x, mask)
    return jnp.sum(jnp.where(rows[..., None], out * w, 0.0)), out

  (_, out), grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))(params, x)
  return np.asarray(out), grads


@pytest.mark.parametrize("rows_kind", sorted(SEGMENTS))
def test_is_causal_equals_the_explicit_causal_mask_and_the_reference(rows_kind):
  segments = SEGMENTS[rows_kind]
  segment = np.asarray(segment_mask(segments, segments))
  explicit = np.asarray(causal_mask(T)) & segment
  rows = segments > 0  # padding queries see no key; their outputs are not compared
  x = np.random.default_rng(0).normal(size=(B, T, D)).astype(np.float32)
  make = lambda impl, causal: MultiHeadAttention(num_heads=H, head_dim=D // H,
                                                 implementation=impl, causal=causal)
  params = _randomize(nn.meta.unbox(make("xla", False).init(jax.random.PRNGKey(0), x, x)
                                    ["params"]), 1)
  flag, flag_grads = _attention_and_grads(make("xla", True), params, x, segment, rows)
  dense, dense_grads = _attention_and_grads(make("xla", False), params, x, explicit, rows)
  ref, ref_grads = _attention_and_grads(make("reference", True), params, x, segment, rows)
  ref_dense, _ = _attention_and_grads(make("reference", False), params, x, explicit, rows)
  # XLA's is_causal combines the same boolean masks: bit for bit today's dense-mask path
  # forward. The gradients are bit for bit too at XLA's default LLVM -O3; under the tests'
  # -O0 (tests/xla_flags.py) the two backward programs round differently in the last bit.
  np.testing.assert_array_equal(flag, dense)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
               flag_grads, dense_grads)
  np.testing.assert_array_equal(ref, ref_dense)
  np.testing.assert_allclose(flag[rows], ref[rows], rtol=1e-5, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               flag_grads, ref_grads)
  # And it is causal: the first output of each row does not equal the non-causal one.
  open_out, _ = _attention_and_grads(make("xla", False), params, x, segment, rows)
  assert not np.allclose(flag[rows], open_out[rows], atol=1e-4)


def test_packed_decoder_lm_matches_the_reference_attention():
  cfg = ModelConfig(vocab_size=23, d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=16)
  tokens = np.random.default_rng(0).integers(3, 23, size=(B, T)).astype(np.int32)
  segments = SEGMENTS["packed"]
  xla = DecoderLM(cfg)
  params = _randomize(nn.meta.unbox(xla.init(jax.random.PRNGKey(0), tokens)["params"]), 2)
  ref = DecoderLM(dataclasses.replace(cfg, attention_impl="reference"))
  loss = lambda model: jax.jit(jax.value_and_grad(lambda p: jnp.sum(jnp.where(
      segments[..., None] > 0, model.apply({"params": p}, tokens, None, segments), 0.0) ** 2)))
  (got, got_grads), (want, want_grads) = loss(xla)(params), loss(ref)(params)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
               got_grads, want_grads)


# --- model.vocab_pad_multiple ---------------------------------------------------------------

V, PAD_TO = 21, 8  # 21 -> 24 rows


def _lm_pair(tie: bool):
  """A padded DecoderLM and the unpadded one with the padded one's real rows as weights."""
  base = ModelConfig(vocab_size=V, d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=16,
                     tie_embeddings=tie)
  padded, plain = DecoderLM(dataclasses.replace(base, vocab_pad_multiple=PAD_TO)), DecoderLM(base)
  tokens = np.random.default_rng(0).integers(3, V, size=(B, T)).astype(np.int32)
  params = _randomize(nn.meta.unbox(padded.init(jax.random.PRNGKey(0), tokens)["params"]), 3)
  table = params["embedder"]["token_embedding"]["embedding"]
  assert table.shape == (24, 16)
  # Padded rows that would win every argmax if they counted.
  params["embedder"]["token_embedding"]["embedding"] = table.at[V:].set(5.0)
  real = jax.tree.map(lambda a: a, params)
  real["embedder"]["token_embedding"]["embedding"] = params["embedder"]["token_embedding"][
      "embedding"][:V]
  if not tie:
    params["logits"]["kernel"] = params["logits"]["kernel"].at[:, V:].set(5.0)
    real["logits"]["kernel"] = params["logits"]["kernel"][:, :V]
  return padded, plain, params, real, tokens


def _smoothed_z_loss(model, tokens):
  targets = np.roll(tokens, -1, axis=1)
  weights = np.array([[1, 1, 1, 1, 0, 0], [1] * T], np.float32)
  return lambda p: cross_entropy_sums(model.apply({"params": p}, tokens), targets, weights,
                                      label_smoothing=0.1, z_loss=1e-3)[0]


@pytest.mark.parametrize("tie", [True, False])
def test_padded_vocab_scores_as_the_unpadded_model_on_its_real_rows(tie):
  padded, plain, params, real, tokens = _lm_pair(tie)
  logits = np.asarray(jax.jit(padded.apply)({"params": params}, tokens))
  assert logits.shape == (B, T, V)  # padded logits never leave the model
  np.testing.assert_allclose(logits, jax.jit(plain.apply)({"params": real}, tokens),
                             rtol=1e-5, atol=1e-6)
  got, got_grads = jax.jit(jax.value_and_grad(_smoothed_z_loss(padded, tokens)))(params)
  want, want_grads = jax.jit(jax.value_and_grad(_smoothed_z_loss(plain, tokens)))(real)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  table_grad = got_grads["embedder"]["token_embedding"]["embedding"]
  np.testing.assert_array_equal(table_grad[V:], 0.0)  # padded rows learn nothing
  got_grads["embedder"]["token_embedding"]["embedding"] = table_grad[:V]
  if not tie:
    np.testing.assert_array_equal(got_grads["logits"]["kernel"][:, V:], 0.0)
    got_grads["logits"]["kernel"] = got_grads["logits"]["kernel"][:, :V]
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               got_grads, want_grads)


def test_greedy_and_sampled_decoding_never_emit_a_padded_id():
  padded, plain, params, real, tokens = _lm_pair(True)
  prompt = tokens[:, :2]
  greedy = lambda m, p: np.asarray(jax.jit(lambda p: decode.lm_generate(
      m, p, prompt, Sampling(max_new=6), eos_id=2))(p))
  got = greedy(padded, params)
  np.testing.assert_array_equal(got, greedy(plain, real))
  sampled = np.asarray(jax.jit(lambda p, r: decode.lm_generate(
      padded, p, prompt, Sampling(max_new=6, temperature=5.0), eos_id=2, rng=r))(
          params, jax.random.PRNGKey(0)))
  assert (got < V).all() and (sampled < V).all() and (sampled >= 0).all()


def test_flops_count_the_padded_vocab_the_matmul_computes():
  cfg = ModelConfig(vocab_size=50257, d_model=768, num_heads=12, num_layers=1, d_ff=3072)
  padded = dataclasses.replace(cfg, vocab_pad_multiple=64)
  assert padded.padded_vocab_size == 50304 and cfg.padded_vocab_size == 50257
  diff = kinds.training_flops_per_step(padded, 4, 32) - kinds.training_flops_per_step(cfg, 4, 32)
  assert diff == pytest.approx(3 * 2 * 4 * 32 * 768 * (50304 - 50257))


def test_gpt2_small_pads_its_vocab_to_a_multiple_of_64():
  from configs import gpt2_small
  model = from_config_dict(gpt2_small.get_config()).model
  assert model.vocab_pad_multiple == 64 and model.padded_vocab_size == 50304


# --- train.loss_chunk -----------------------------------------------------------------------

def _hidden_problem(length=10, vocab=13, d=8):
  rng = np.random.default_rng(0)
  hidden = rng.normal(size=(3, length, d)).astype(np.float32)
  weight = rng.normal(size=(d, vocab)).astype(np.float32)
  targets = rng.integers(0, vocab, size=(3, length)).astype(np.int32)
  weights = (rng.random((3, length)) < 0.7).astype(np.float32)
  return hidden, weight, targets, weights


@pytest.mark.parametrize("chunk", [1, 4, 10, 16])
@pytest.mark.parametrize("smoothing,z", [(0.0, 0.0), (0.1, 1e-3)])
def test_chunked_cross_entropy_equals_the_whole_logits_path(chunk, smoothing, z):
  hidden, weight, targets, weights = _hidden_problem()

  def whole(h, w):
    return cross_entropy_sums(h @ w, targets, weights, smoothing, z)

  def chunked(h, w):
    return chunked_cross_entropy_sums(h, lambda x: x @ w, targets, weights, chunk, smoothing, z)

  grad = lambda f: jax.jit(jax.value_and_grad(lambda h, w: f(h, w)[0], argnums=(0, 1)))
  (got, got_grads), (want, want_grads) = grad(chunked)(hidden, weight), grad(whole)(hidden, weight)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert float(chunked(hidden, weight)[1]) == float(weights.sum())
  for a, b in zip(got_grads, want_grads):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _largest_array(jaxpr) -> int:
  """Elements of the largest value any equation of `jaxpr` (and its sub-jaxprs) produces."""
  largest = 0
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      largest = max(largest, int(np.prod(getattr(v.aval, "shape", ()))))
    for sub in _sub_jaxprs(eqn.params):
      largest = max(largest, _largest_array(sub))
  return largest


def _sub_jaxprs(params: dict):
  """The jaxprs an equation's params hold (scan, map, remat, pjit bodies), found by their
  attributes: `jax.core.jaxprs_in_params` is gone in jax 0.12."""
  for value in params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      if hasattr(item, "eqns"):  # a Jaxpr
        yield item
      elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):  # a ClosedJaxpr
        yield item.jaxpr


def test_chunked_loss_and_its_gradient_never_hold_the_whole_logits():
  hidden, weight, targets, weights = _hidden_problem(length=64, vocab=97, d=8)
  f = lambda h, w: chunked_cross_entropy_sums(h, lambda x: x @ w, targets, weights, 8)[0]
  whole = lambda h, w: cross_entropy_sums(h @ w, targets, weights)[0]
  logits_size = 3 * 64 * 97
  chunked_jaxpr = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(hidden, weight).jaxpr
  whole_jaxpr = jax.make_jaxpr(jax.grad(whole, argnums=(0, 1)))(hidden, weight).jaxpr
  assert _largest_array(whole_jaxpr) >= logits_size  # the check can see whole logits
  assert _largest_array(chunked_jaxpr) < logits_size // 4


def _lm_task(loss_chunk, kind="decoder_lm", **model):
  c = get_config("smoke")
  with c.unlocked():
    c.model.kind = kind
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 4, 2, 32
    c.data.seq_len, c.train.batch_size = 12, 4
    c.train.loss_chunk, c.train.label_smoothing, c.train.z_loss = loss_chunk, 0.1, 1e-3
    for k, v in model.items():
      c.model[k] = v
  config = from_config_dict(c)
  kind = kinds.get(config.model.kind)
  return kind.build_task(config, kind.config_facts(config))


@pytest.mark.parametrize("model", [dict(), dict(tie_embeddings=False, vocab_pad_multiple=64)])
def test_decoder_lm_task_loss_and_gradient_are_the_same_chunked(model):
  plain, chunked = _lm_task(0, **model), _lm_task(5, **model)
  params = chunked.init_params(jax.random.PRNGKey(0))
  batch = jax.tree.map(jnp.asarray, plain.random_batch(4, np.random.default_rng(0)))
  batch["weights"] = batch["weights"].at[0, 7:].set(0.0)
  grad = lambda task: jax.jit(jax.value_and_grad(
      lambda p: task.loss_sums(p, batch, jax.random.PRNGKey(1))[0]))(params)
  (got, got_grads), (want, want_grads) = grad(chunked), grad(plain)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               got_grads, want_grads)
  assert chunked.train_forward(params, batch, jax.random.PRNGKey(1)).project is not None


def test_output_projection_is_the_models_output_layer():
  for model in (dict(), dict(tie_embeddings=False, vocab_pad_multiple=64)):
    task = _lm_task(0, **model)
    params = task.init_params(jax.random.PRNGKey(0))
    tokens = jnp.asarray(task.random_batch(2, np.random.default_rng(0))["inputs"])
    hidden = task.apply(params, tokens, return_hidden=True)
    np.testing.assert_array_equal(output_projection(task.config.model, params)(hidden),
                                  task.apply(params, tokens))


@pytest.mark.parametrize("kind", ["masked_lm", "encoder_decoder", "classifier"])
def test_other_kinds_refuse_a_loss_chunk(kind):
  with pytest.raises(ConfigError, match="loss_chunk=4 .* decoder_lm only"):
    _lm_task(4, kind=kind)


def test_a_loss_chunk_longer_than_a_row_is_refused_before_anything_compiles():
  """A chunk is positions of each row: one longer than the row pads every row to it (an H200
  bench of GPT-2 small with loss_chunk=4096 on 1024-token rows ran 1.9x slower on 2.4x the
  memory of no chunking)."""
  with pytest.raises(ConfigError, match=r"loss_chunk=48 is positions of each row per chunk, "
                                        r"more than a row's 12 .* 4x the logits .*"
                                        r"--config.train.loss_chunk=3\."):
    _lm_task(48)
  assert _lm_task(12).config.train.loss_chunk == 12  # the whole row: one chunk
