"""Cached incremental decoding against the full forward pass; greedy, sampling, beam search."""

import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.tasks import decode
from transformer.config import ModelConfig
from transformer.model.models import DecoderLM, EncoderDecoder
from transformer.sampling import Sampling

V = 19


def _cfg(**kw):
  base = dict(vocab_size=V, d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=64)
  base.update(kw)
  return ModelConfig(**base)


def _init(model, *args):
  return nn.meta.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), *args)["params"])


@pytest.mark.parametrize("positions,kv_heads,impl", [("sinusoidal", 0, "xla"),
                                                     ("rope", 2, "reference"),
                                                     ("learned", 1, "xla")])
def test_cached_lm_decoding_matches_full_forward(positions, kv_heads, impl):
  model = DecoderLM(_cfg(positions=positions, num_kv_heads=kv_heads, attention_impl=impl))
  tokens = np.random.default_rng(0).integers(3, V, size=(2, 10)).astype(np.int32)
  params = _init(model, tokens)
  full = jax.jit(model.apply)({"params": params}, tokens)

  @jax.jit
  def cached(params, tokens):
    step = decode.lm_step_fn(model, params)
    cache = decode.init_cache(model, 2, 10)
    pos = jnp.broadcast_to(jnp.arange(4), (2, 4))
    first, cache = step(tokens[:, :4], pos, cache, {})  # a 4-token prefill, then one at a time
    outs = [first]
    for i in range(4, 10):
      logits, cache = step(tokens[:, i:i + 1], jnp.full((2, 1), i), cache, {})
      outs.append(logits)
    return jnp.concatenate(outs, axis=1)

  np.testing.assert_allclose(cached(params, tokens), full, rtol=1e-5, atol=1e-5)


def test_cached_encoder_decoder_decoding_matches_full_forward():
  model = EncoderDecoder(_cfg(kind="encoder_decoder", num_kv_heads=2))
  rng = np.random.default_rng(0)
  src = rng.integers(3, V, size=(2, 7)).astype(np.int32)
  src[0, 5:] = 0
  tgt = rng.integers(3, V, size=(2, 9)).astype(np.int32)
  params = _init(model, src, tgt)
  full = jax.jit(model.apply)({"params": params}, src, tgt)

  @jax.jit
  def cached(params, src, tgt):
    context = decode.seq2seq_context(model, params, src)
    step = decode.seq2seq_step_fn(model, params)
    cache = decode.init_cache(model, 2, 9, src_len=7)
    outs = []
    for i in range(9):
      logits, cache = step(tgt[:, i:i + 1], jnp.full((2, 1), i), cache, context)
      outs.append(logits)
    return jnp.concatenate(outs, axis=1)

  np.testing.assert_allclose(cached(params, src, tgt), full, rtol=1e-5, atol=1e-5)


def test_greedy_equals_argmax_of_full_forward_and_beam_of_one_equals_greedy():
  model = EncoderDecoder(_cfg(kind="encoder_decoder"))
  rng = np.random.default_rng(1)
  src = rng.integers(3, V, size=(3, 6)).astype(np.int32)
  params = _randomized(_init(model, src, src))
  greedy = jax.jit(lambda p, s: decode.seq2seq_decode(model, p, s, Sampling(max_new=8),
                                                          bos_id=1, eos_id=2))(
      params, src)

  @jax.jit  # seq2seq_decode takes the greedy path for beam_size=1: call beam_search itself
  def beam1(params, src):
    step = decode.seq2seq_step_fn(model, params)
    context = decode.seq2seq_context(model, params, src)
    return decode.beam_search(step, decode.init_cache(model, 3, 9, 6), context,
                              jnp.ones((3, 1), jnp.int32), 8, beam_size=1, eos_id=2,
                              length_penalty=0.0)[0]

  np.testing.assert_array_equal(beam1(params, src), greedy)
  assert (np.asarray(greedy) == 2).any()  # the comparison covers stopping at EOS

  # Greedy, re-derived without a cache: argmax of the full forward pass, token by token (the
  # prefix is right-padded to a fixed length; the decoder is causal, so padding is unseen).
  forward = jax.jit(model.apply)
  prefix = np.zeros((3, 9), np.int32)
  prefix[:, 0] = 1
  done = np.zeros(3, bool)
  for i in range(8):
    logits = np.asarray(forward({"params": params}, src, prefix))[:, i]
    nxt = np.where(done, 0, logits.argmax(-1))
    np.testing.assert_array_equal(greedy[:, i], nxt)
    done |= nxt == 2
    prefix[:, i + 1] = nxt


def _randomized(params):
  """Larger random weights, so that the decoded sequences vary and EOS appears."""
  rng = np.random.default_rng(3)
  return jax.tree.map(lambda p: rng.normal(0.0, 0.5, p.shape).astype(np.float32), params)


# A Markov "model" with known probabilities: the next token depends on the last one only.
# Tokens: 0 pad, 1 bos, 2 eos, 3 "a", 4 "b". Greedy takes "a" (0.6) and then faces a
# near-uniform choice; "b" (0.4) is followed by EOS with probability 0.9.
TOY = np.full((5, 5), 1e-9)
TOY[1, [3, 4]] = [0.6, 0.4]
TOY[3, [2, 3, 4]] = [0.34, 0.33, 0.33]
TOY[4, [2, 3, 4]] = [0.9, 0.05, 0.05]
TOY /= TOY.sum(1, keepdims=True)


def _toy_step(tokens, positions, cache, context):
  del positions, context
  logits = jnp.log(jnp.asarray(TOY, jnp.float32))[tokens]  # [batch, t, 5]
  return logits, cache + 1  # the "cache" is a per-row counter, gathered like a real one


def _best_sequence_by_enumeration(max_len, alpha):
  best, best_score = None, -np.inf
  for n in range(1, max_len + 1):
    for body in itertools.product([3, 4], repeat=n - 1):
      seq = list(body) + [2]
      prev, logp = 1, 0.0
      for t in seq:
        logp += np.log(TOY[prev, t])
        prev = t
      score = logp / ((5 + n) / 6) ** alpha
      if score > best_score:
        best, best_score = seq, score
  return best, best_score


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_finds_the_known_best_sequence_and_greedy_does_not(alpha):
  max_len = 5
  want, want_score = _best_sequence_by_enumeration(max_len, alpha)
  assert want == [4, 2]  # b EOS: 0.4 * 0.9 = 0.36 beats a EOS: 0.6 * 0.34 = 0.204
  prompt = jnp.ones((1, 1), jnp.int32)
  greedy = decode.generate(_toy_step, jnp.zeros((1,)), {}, prompt, Sampling(max_new=max_len),
                           eos_id=2)
  assert list(np.asarray(greedy[0])) == [3, 2, 0, 0, 0]
  search = jax.jit(lambda c: decode.beam_search(_toy_step, c, {}, prompt, max_len,
                                                beam_size=2, eos_id=2, length_penalty=alpha))
  seqs, scores = search(jnp.zeros((2,)))
  assert list(np.asarray(seqs[0])) == want + [0] * (max_len - len(want))
  assert float(scores[0]) == pytest.approx(want_score, rel=1e-5)


def test_top_k_and_top_p_sample_only_allowed_tokens():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]] * 4000))
  rng = jax.random.PRNGKey(0)
  k2 = np.asarray(decode.sample_logits(logits, rng, Sampling(temperature=1.0, top_k=2)))
  assert set(np.unique(k2)) == {0, 1}
  assert abs((k2 == 0).mean() - 0.5 / 0.8) < 0.03  # renormalized over the kept tokens
  p = np.asarray(decode.sample_logits(logits, rng, Sampling(temperature=1.0, top_p=0.85)))
  assert set(np.unique(p)) == {0, 1, 2}  # 0.5 + 0.3 < 0.85, so the third is needed
  full = np.asarray(decode.sample_logits(logits, rng, Sampling(temperature=1.0)))
  np.testing.assert_allclose(np.bincount(full, minlength=4) / 4000, [0.5, 0.3, 0.15, 0.05],
                             atol=0.03)
  cold = np.asarray(decode.sample_logits(logits, rng, Sampling(temperature=0.01)))
  assert (cold == 0).all()
  greedy = decode.sample_logits(logits, None, Sampling())  # temperature 0: argmax
  assert (np.asarray(greedy) == 0).all()


def test_lm_generate_is_jittable_and_continues_the_prompt_greedily():
  model = DecoderLM(_cfg())
  prompt = np.random.default_rng(0).integers(3, V, size=(2, 3)).astype(np.int32)
  params = _randomized(_init(model, prompt))
  out = jax.jit(lambda p, x: decode.lm_generate(model, p, x, Sampling(max_new=5), eos_id=2))(
      params, prompt)
  seq = np.concatenate([prompt, np.asarray(out)], axis=1)  # causal: row t sees seq[:t + 1]
  logits = np.asarray(jax.jit(model.apply)({"params": params}, seq))
  for i in range(5):
    nxt = logits[:, 2 + i].argmax(-1)
    done = (np.asarray(out[:, :i]) == 2).any(1)
    np.testing.assert_array_equal(np.asarray(out[:, i])[~done], nxt[~done])
  sampled = jax.jit(lambda p, x, r: decode.lm_generate(
      model, p, x, Sampling(max_new=5, temperature=1.0, top_k=5), eos_id=2, rng=r))(
      params, prompt, jax.random.PRNGKey(1))
  assert sampled.shape == (2, 5) and ((sampled >= 0) & (sampled < V)).all()
