"""Autoregressive decoding over a KV cache: greedy, sampling and beam search; all jittable.

The decoding loops are model-agnostic. They drive a `step_fn(tokens, positions, cache,
context) -> (logits, cache)`: `tokens, positions: [batch, t]` are the next `t` tokens and their
positions, `cache` is the model's "cache" collection (`init_cache`), `context` is a pytree of
per-example arrays the model reads at every step (the encoder output and source tokens for
an encoder-decoder; `{}` for a decoder-only LM) and `logits: [batch, t, vocab]`.
`lm_step_fn` and `seq2seq_step_fn` build it from the models in `transformer.model.models`.

Sequences returned hold the generated tokens only (not the prompt), `[batch, max_new]`, with
`pad_id` after the first `eos_id`. How tokens are picked (greedy, temperature, top-k, top-p,
beams, how many) is one `transformer.sampling.Sampling` value, validated where it is built.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer.model.models import DecoderLM, EncoderDecoder
from transformer.sampling import Sampling

StepFn = Callable[[jax.Array, jax.Array, Any, Any], tuple[jax.Array, Any]]

NEG_INF = -1.0e9  # a finite "minus infinity" for scores, so arithmetic on it stays finite


# ---------------------------------------------------------------------------- model glue


def init_cache(model: nn.Module, batch_size: int, max_len: int, src_len: int = 0) -> Any:
  """A zero KV cache for `batch_size` sequences of up to `max_len` tokens.

  Args:
    model: a `DecoderLM` or `EncoderDecoder` (its `decode` flag is ignored).
    src_len: source length, for an `EncoderDecoder`.
  Returns:
    The "cache" collection: per self-attention layer `cached_key`, `cached_value`
    `[batch_size, max_len, kv_heads, head_dim]` and a scalar `cache_index`.
  """
  m = model.clone(decode=True)
  tokens = jnp.zeros((batch_size, max_len), jnp.int32)
  rng = jax.random.PRNGKey(0)
  if isinstance(model, EncoderDecoder):
    if src_len <= 0:
      raise ValueError("init_cache for an EncoderDecoder needs src_len > 0.")
    encoded = jnp.zeros((batch_size, src_len, model.cfg.d_model), jnp.float32)
    inputs = jnp.ones((batch_size, src_len), jnp.int32)
    shapes = jax.eval_shape(lambda: m.init(rng, encoded, inputs, tokens,
                                           method=EncoderDecoder.decode_logits))
  elif isinstance(model, DecoderLM):
    shapes = jax.eval_shape(lambda: m.init(rng, tokens))
  else:
    raise ValueError(f"Cached decoding supports DecoderLM and EncoderDecoder, not "
                     f"{type(model).__name__}.")
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["cache"])


def lm_step_fn(model: DecoderLM, params: Any) -> StepFn:
  """A `step_fn` for a decoder-only LM (`context` unused)."""
  m = model.clone(decode=True)

  def step(tokens, positions, cache, context):
    del context
    logits, variables = m.apply({"params": params, "cache": cache}, tokens, positions,
                                mutable=["cache"])
    return logits, variables["cache"]

  return step


def seq2seq_step_fn(model: EncoderDecoder, params: Any) -> StepFn:
  """A `step_fn` for an encoder-decoder; `context = {"encoded": [batch, src_len, d_model],
  "inputs": [batch, src_len]}` (see `seq2seq_context`)."""
  m = model.clone(decode=True)

  def step(tokens, positions, cache, context):
    logits, variables = m.apply(
        {"params": params, "cache": cache}, context["encoded"], context["inputs"], tokens,
        positions, method=EncoderDecoder.decode_logits, mutable=["cache"])
    return logits, variables["cache"]

  return step


def seq2seq_context(model: EncoderDecoder, params: Any, inputs: jax.Array) -> dict:
  """Runs the encoder once: `{"encoded": [batch, src_len, d_model], "inputs": inputs}`."""
  encoded = model.apply({"params": params}, inputs, method=EncoderDecoder.encode)
  return {"encoded": encoded, "inputs": inputs}


# ------------------------------------------------------------------- choosing a token


def sample_logits(logits: jax.Array, rng: Optional[jax.Array],
                  sampling: Sampling) -> jax.Array:
  """Picks one token per row of `logits: [batch, vocab]` -> `[batch]` int32.

  `sampling.temperature` 0 is greedy (argmax). Otherwise sample from softmax(logits /
  temperature), restricted to the `top_k` most likely tokens (0 = all) and to the smallest set
  of most likely tokens whose probability reaches `top_p` (nucleus sampling; 1.0 = all).
  """
  temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
  if temperature == 0.0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  if rng is None:
    raise ValueError("Sampling with temperature > 0 needs an rng.")
  logits = logits.astype(jnp.float32) / temperature
  if top_k:
    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, NEG_INF, logits)
  if top_p < 1.0:
    sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly more likely tokens
    keep = before < top_p  # the most likely token is always kept
    threshold = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    logits = jnp.where(logits < threshold, NEG_INF, logits)
  return jax.random.categorical(rng, logits, axis=-1).astype(jnp.int32)


# ------------------------------------------------------------- greedy and sampling


def generate(step_fn: StepFn, cache: Any, context: Any, prompt: jax.Array, sampling: Sampling,
             *, eos_id: int, pad_id: int = 0, rng: Optional[jax.Array] = None) -> jax.Array:
  """Greedy decoding (temperature 0) or sampling, one token per step over the KV cache
  (`sampling.beams` is not read: see `beam_search`).

  Args:
    step_fn, cache, context: see the module docstring; the cache holds at least
      `prompt_len + sampling.max_new` positions.
    prompt: `[batch, prompt_len]` tokens fed first (e.g. just BOS), no padding.
    sampling: how to pick each token and how many (`max_new`); static.
  Returns:
    `[batch, max_new]` int32; `pad_id` after each row's first `eos_id`.
  """
  batch, prompt_len = prompt.shape
  max_new = sampling.max_new
  positions = jnp.broadcast_to(jnp.arange(prompt_len), prompt.shape)
  logits, cache = step_fn(prompt, positions, cache, context)
  rng = jax.random.PRNGKey(0) if rng is None else rng

  def body(i, carry):
    out, finished, last_logits, cache = carry
    token = sample_logits(last_logits, jax.random.fold_in(rng, i), sampling)
    token = jnp.where(finished, pad_id, token)
    out = out.at[:, i].set(token)
    finished = finished | (token == eos_id)
    pos = jnp.full((batch, 1), prompt_len + i)
    logits, cache = step_fn(token[:, None], pos, cache, context)
    return out, finished, logits[:, -1], cache

  out = jnp.full((batch, max_new), pad_id, jnp.int32)
  finished = jnp.zeros((batch,), bool)
  out, *_ = jax.lax.fori_loop(0, max_new, body, (out, finished, logits[:, -1], cache))
  return out


# ------------------------------------------------------------------------ beam search


def length_normalizer(length: jax.Array, alpha: float) -> jax.Array:
  """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016); scores are
  log P(Y) / lp(Y). alpha = 0 ranks by plain log-probability."""
  return ((5.0 + length) / 6.0) ** alpha


def _tile_beams(tree: Any, beam_size: int) -> Any:
  """Leaves `[batch, ...]` -> `[batch * beam_size, ...]`, the beams of an example adjacent."""
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0) if x.ndim else x, tree)


def _cache_batch_axis(path) -> Optional[int]:
  """The batch axis of a cache leaf: 0, or 1 under scanned layers (params and cache stacked
  on a leading `[num_layers]` axis in a module named "layers"); None for `cache_index`."""
  names = [getattr(k, "key", None) for k in path]
  if names and names[-1] == "cache_index":
    return None
  return 1 if "layers" in names else 0


def _gather_beams(cache: Any, flat_index: jax.Array) -> Any:
  """Reorders a KV cache's `[batch * beams, ...]` leaves along their batch axis."""
  def gather(path, x):
    axis = _cache_batch_axis(path)
    return x if axis is None else jnp.take(x, flat_index, axis=axis)
  return jax.tree_util.tree_map_with_path(gather, cache)


def beam_search(step_fn: StepFn, cache: Any, context: Any, prompt: jax.Array, max_new: int, *,
                beam_size: int, eos_id: int, length_penalty: float = 0.6, pad_id: int = 0
                ) -> tuple[jax.Array, jax.Array]:
  """Beam search for the sequence with the best length-normalized log-probability.

  Keeps `beam_size` live hypotheses and the `beam_size` best finished ones (ended by
  `eos_id`, scored `log P / length_normalizer(len, length_penalty)`); stops when no live
  hypothesis can still beat the worst finished one, or after `max_new` tokens.

  Args:
    step_fn, context: as for `generate`, but `context` has `batch` rows (tiled here).
    cache: a cache for `batch * beam_size` rows and `prompt_len + max_new` positions.
    prompt: `[batch, prompt_len]`.
  Returns:
    (`[batch, max_new]` best sequences, `[batch]` their scores). A row with no finished
    hypothesis returns its best live one, scored by its log-probability.
  """
  batch, prompt_len = prompt.shape
  k = beam_size
  context = _tile_beams(context, k)
  tiled_prompt = _tile_beams(prompt, k)
  positions = jnp.broadcast_to(jnp.arange(prompt_len), tiled_prompt.shape)
  logits, cache = step_fn(tiled_prompt, positions, cache, context)
  # Only beam 0 is live at first, so the k copies of the prompt don't yield k equal beams.
  live_lp = jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1)), (batch, 1))
  live_seqs = jnp.full((batch, k, max_new), pad_id, jnp.int32)
  fin_seqs = jnp.full((batch, k, max_new), pad_id, jnp.int32)
  fin_scores = jnp.full((batch, k), NEG_INF)
  max_norm = length_normalizer(jnp.float32(max_new), length_penalty)
  cond = functools.partial(_beam_cond, max_new=max_new, max_norm=max_norm)
  body = functools.partial(_beam_body, step_fn=step_fn, context=context, prompt_len=prompt_len,
                           eos_id=eos_id, length_penalty=length_penalty)
  carry = (jnp.int32(0), live_lp, live_seqs, fin_seqs, fin_scores, logits[:, -1], cache)
  _, live_lp, live_seqs, fin_seqs, fin_scores, _, _ = jax.lax.while_loop(cond, body, carry)
  return _best_hypothesis(live_lp, live_seqs, fin_seqs, fin_scores)


# A beam search's loop state: (step i, live_lp [batch, k], live_seqs [batch, k, max_new],
# fin_seqs [batch, k, max_new], fin_scores [batch, k] (best first), last_logits
# [batch * k, vocab], cache).
_BeamCarry = tuple


def _beam_cond(carry: _BeamCarry, *, max_new: int, max_norm: jax.Array) -> jax.Array:
  """Whether the search goes on: steps are left and some live beam can still beat its row's
  worst finished hypothesis."""
  i, live_lp, _, _, fin_scores, _, _ = carry
  # Log-probabilities only fall as hypotheses grow, and the normalizer is largest at
  # max_new, so live_lp / max_norm bounds every score a live beam can still reach.
  best_possible = live_lp[:, 0] / max_norm
  can_improve = jnp.any(best_possible > fin_scores[:, -1])
  return (i < max_new) & can_improve


def _beam_body(carry: _BeamCarry, *, step_fn: StepFn, context: Any, prompt_len: int,
               eos_id: int, length_penalty: float) -> _BeamCarry:
  """One step of the search: extends every live beam by every token, moves the best that end
  in `eos_id` into the finished set, keeps the k best others live and feeds their tokens."""
  i, live_lp, live_seqs, fin_seqs, fin_scores, last_logits, cache = carry
  batch, k = live_lp.shape
  vocab = last_logits.shape[-1]
  log_probs = jax.nn.log_softmax(last_logits.reshape(batch, k, vocab), axis=-1)
  cand = (live_lp[:, :, None] + log_probs).reshape(batch, k * vocab)
  scores, flat = jax.lax.top_k(cand, 2 * k)  # enough to keep k live after EOS ones leave
  parent, token = flat // vocab, (flat % vocab).astype(jnp.int32)
  seqs = jnp.take_along_axis(live_seqs, parent[:, :, None], axis=1).at[:, :, i].set(token)
  is_eos = token == eos_id

  # Finished: merge the new EOS hypotheses into the k best so far.
  new_fin = jnp.where(is_eos, scores / length_normalizer(i + 1.0, length_penalty), NEG_INF)
  all_scores = jnp.concatenate([fin_scores, new_fin], axis=1)
  all_seqs = jnp.concatenate([fin_seqs, seqs], axis=1)
  fin_scores, keep = jax.lax.top_k(all_scores, k)
  fin_seqs = jnp.take_along_axis(all_seqs, keep[:, :, None], axis=1)

  # Live: the k best that did not end.
  live_lp, keep = jax.lax.top_k(jnp.where(is_eos, NEG_INF, scores), k)
  live_seqs = jnp.take_along_axis(seqs, keep[:, :, None], axis=1)
  live_parent = jnp.take_along_axis(parent, keep, axis=1)
  live_token = jnp.take_along_axis(token, keep, axis=1)
  flat_parent = (jnp.arange(batch)[:, None] * k + live_parent).reshape(-1)
  cache = _gather_beams(cache, flat_parent)
  pos = jnp.full((batch * k, 1), prompt_len + i)
  logits, cache = step_fn(live_token.reshape(batch * k, 1), pos, cache, context)
  return i + 1, live_lp, live_seqs, fin_seqs, fin_scores, logits[:, -1], cache


def _best_hypothesis(live_lp: jax.Array, live_seqs: jax.Array, fin_seqs: jax.Array,
                     fin_scores: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per row the best finished hypothesis and its score, or, where none finished, the best
  live one and its log-probability: (`[batch, max_new]`, `[batch]`)."""
  has_finished = fin_scores[:, 0] > NEG_INF / 2
  best = jnp.where(has_finished[:, None], fin_seqs[:, 0], live_seqs[:, 0])
  return best, jnp.where(has_finished, fin_scores[:, 0], live_lp[:, 0])


# --------------------------------------------------------------- model-level helpers


def seq2seq_decode(model: EncoderDecoder, params: Any, inputs: jax.Array, sampling: Sampling,
                   *, bos_id: int, eos_id: int, pad_id: int = 0, length_penalty: float = 0.6,
                   rng: Optional[jax.Array] = None) -> jax.Array:
  """Translates `inputs: [batch, src_len]` -> `[batch, sampling.max_new]`: greedy (or
  sampling with `temperature` > 0) when `sampling.beams` is 1, beam search (with
  `length_penalty`) otherwise. Jittable (`sampling` static)."""
  batch, src_len = inputs.shape
  max_new, beam_size = sampling.max_new, sampling.beams
  context = seq2seq_context(model, params, inputs)
  prompt = jnp.full((batch, 1), bos_id, jnp.int32)
  step = seq2seq_step_fn(model, params)
  if beam_size == 1:
    cache = init_cache(model, batch, 1 + max_new, src_len)
    return generate(step, cache, context, prompt, sampling, eos_id=eos_id, pad_id=pad_id,
                    rng=rng)
  cache = init_cache(model, batch * beam_size, 1 + max_new, src_len)
  return beam_search(step, cache, context, prompt, max_new, beam_size=beam_size, eos_id=eos_id,
                     length_penalty=length_penalty, pad_id=pad_id)[0]


def lm_generate(model: DecoderLM, params: Any, prompt: jax.Array, sampling: Sampling, *,
                eos_id: int, pad_id: int = 0, rng: Optional[jax.Array] = None) -> jax.Array:
  """Continues `prompt: [batch, prompt_len]` by `sampling.max_new` tokens from a decoder-only
  LM (no beam search: `sampling.beams` is not read). Jittable (`sampling` static)."""
  batch, prompt_len = prompt.shape
  cache = init_cache(model, batch, prompt_len + sampling.max_new)
  return generate(lm_step_fn(model, params), cache, {}, prompt, sampling, eos_id=eos_id,
                  pad_id=pad_id, rng=rng)


def until_eos(row, eos_id: int, drop_id: Optional[int] = None) -> list[int]:
  """Token ids of `row` (any int sequence) before its first `eos_id`, as Python ints; with
  `drop_id`, every `drop_id` (padding) among them dropped."""
  row = [int(t) for t in row]
  row = row[:row.index(eos_id)] if eos_id in row else row
  return row if drop_id is None else [t for t in row if t != drop_id]
