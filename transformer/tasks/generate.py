"""Text in, text out with a model and its tokenizer: prompts cut to the model's context, then
the decoder LM's continuations or the encoder-decoder's decoded targets (`generate_texts`).
Used by `--mode=sample` and by the samples written at every eval."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ConfigError, ExperimentConfig
from transformer.data.foreign_tokens import IdsTokenizer
from transformer.errors import CommandLineError
from transformer.sampling import Sampling
from transformer.tasks import decode
from transformer.weights.hf_tokenizer import id_offset


def _pad_rows(rows: list[list[int]], length: int) -> np.ndarray:
  out = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r[:length]
  return out


def prompt_room(max_len: int, max_new_tokens: int) -> int:
  """How many prompt tokens fit in a context of `max_len` positions beside the start token
  and `max_new_tokens` new ones; a CommandLineError if none does."""
  room = max_len - 1 - max_new_tokens
  if room < 0:
    raise CommandLineError(f"--max_new_tokens={max_new_tokens} does not fit the model's context "
                           f"of max_len={max_len} tokens (with the start token); give at most "
                           f"{max_len - 1}.")
  return room


def keep_last(ids: list[int], room: int) -> tuple[list[int], int]:
  """The last `room` tokens of `ids`, and how many were dropped from its start."""
  dropped = max(0, len(ids) - room)
  return ids[dropped:], dropped


# Decoding compiled once per model, `Sampling` and input shape, not once per call: jit's cache
# keys on the static arguments (a Flax module compares by its fields, a `Sampling` by its
# knobs), so the samples written at every eval of a run, and each of `--mode=sample
# --num_samples=N`, reuse one program. Both take (model, params, inputs, sampling, ...).
_IDS = ("eos_id", "pad_id")
_lm_continue = jax.jit(decode.lm_generate, static_argnums=(0, 3), static_argnames=_IDS)
_seq2seq_decode = jax.jit(decode.seq2seq_decode, static_argnums=(0, 3),
                          static_argnames=_IDS + ("bos_id", "length_penalty"))


def _lm_rows(config: ExperimentConfig, tok, texts: list[str], max_new_tokens: int,
             log: Callable[[str], None]) -> list[list[int]]:
  """The decoder LM's input ids for each prompt in `texts`: the start token (if the run has
  one) and the prompt's last tokens that fit the context (a cut said through `log`). A
  ConfigError for a prompt that leaves nothing to continue (no start token, no tokens)."""
  # Training rows start documents with BOS when packed / padded, and follow an EOS in a
  # concatenated stream: begin the prompt the same way. A run whose ids are another
  # tokenizer's shifted (hf:, gpt2:, foreign token files) is fed exactly the prompt's tokens,
  # as that tokenizer's own models are (Hugging Face's generate): our BOS / EOS have no row
  # in its export.
  start = [] if id_offset(tok) else [
      tok.bos_id if config.data.packing != "concat" else tok.eos_id]
  room = prompt_room(config.model.max_len, max_new_tokens)
  rows = []
  for t in texts:
    ids = list(tok.encode(t))
    kept, dropped = keep_last(ids, room)
    if dropped:
      log(f"Note: the prompt is {len(ids)} tokens and the model's context "
          f"{config.model.max_len} (model.max_len), {max_new_tokens} of them for new tokens "
          f"(--max_new_tokens): kept its last {len(kept)} tokens, dropped the first "
          f"{dropped}.")
    if not start and not kept:
      raise (_no_room(config, max_new_tokens) if ids else _blank_prompt(tok, t))
    rows.append(start + kept)
  return rows


def _blank_prompt(tok, text: str) -> ConfigError:
  """A prompt that encodes to no tokens, for a run with no start token of its own."""
  if isinstance(tok, IdsTokenizer):  # ids only: the prompt is ids written with spaces
    top = tok.vocab_size - tok.offset - 1
    return ConfigError(f"--prompt={text!r} holds no ids, and this run (ids only, no tokenizer) "
                       "has no start token to begin from: give the files' ids 0.."
                       f"{top} written with spaces, e.g. --prompt='{min(464, top // 2)} "
                       f"{min(3290, top)}'.")
  return ConfigError(f"--prompt={text!r} gives no tokens, and this run (its ids another "
                     "tokenizer's) has no start token to begin from: give text of one token "
                     "or more.")


def _no_room(config: ExperimentConfig, max_new_tokens: int) -> CommandLineError:
  """`--max_new_tokens` that leaves no prompt token in a run with no start token."""
  return CommandLineError(f"--max_new_tokens={max_new_tokens} leaves no room for the prompt in "
                          f"the model's context of max_len={config.model.max_len} tokens (this "
                          "run has no start token); give at most "
                          f"{config.model.max_len - 2}.")


def generate_texts(config: ExperimentConfig, model, params: Any, tok, texts: list[str],
                   sampling: Sampling, *, generative: str, seed: int = 0,
                   log: Callable[[str], None] = print) -> list[str]:
  """One output per text in `texts`, decoded as `sampling` says with the rng of `seed`: the
  LM's continuation (text after the prompt, up to the first EOS) of a kind that continues a
  prompt (`generative` "lm"), or the decoded target of one that decodes a source ("seq2seq"):
  the callers read it from the kind registry (`transformer.kinds.check_generative`), which
  tasks/ does not import (it names tasks). `params` may be sharded arrays.

  A prompt longer than the model's context (`model.max_len` less `max_new` and the start
  token) keeps its last tokens; a source longer than `data.src_len` its first ones. Either is
  said through `log`."""
  if generative not in ("lm", "seq2seq"):
    raise ConfigError(f"generate_texts: generative={generative!r}; a generative kind's answer "
                      "is 'lm' or 'seq2seq' (transformer.kinds.check_generative).")
  if sampling.beams > 1 and generative != "seq2seq":
    raise CommandLineError(f"--beam_size={sampling.beams}: beam search is for kinds that decode "
                           f"a source; this {config.model.kind} run samples (--temperature, "
                           "--top_k, --top_p; --temperature=0 for greedy).")
  rng = jax.random.PRNGKey(seed)
  ids = dict(eos_id=tok.eos_id, pad_id=tok.pad_id)
  if generative == "lm":
    # Prompts differ in length and the cache has no left padding: one by one.
    outs = [np.asarray(_lm_continue(model, params, jnp.asarray([row], jnp.int32), sampling,
                                    rng=rng, **ids))[0]
            for row in _lm_rows(config, tok, texts, sampling.max_new, log)]
  else:
    outs = np.asarray(_seq2seq_decode(
        model, params, jnp.asarray(_seq2seq_sources(config, tok, texts, log)), sampling,
        bos_id=tok.bos_id, length_penalty=config.model.length_penalty, rng=rng, **ids))
  return [tok.decode(decode.until_eos(o, tok.eos_id)) for o in outs]



def _seq2seq_sources(config: ExperimentConfig, tok, texts: list[str],
                     log: Callable[[str], None]) -> np.ndarray:
  """`[len(texts), data.src_len]` int32 sources: each text's first tokens and the end token,
  padded."""
  src_len = config.data.src_len
  encoded = [list(tok.encode(t)) for t in texts]
  for ids in encoded:
    if len(ids) > src_len - 1:
      log(f"Note: the source is {len(ids)} tokens and the model reads {src_len} "
          f"(data.src_len, with the end token): kept its first {src_len - 1} tokens, dropped "
          f"the last {len(ids) - (src_len - 1)}.")
  return _pad_rows([ids[:src_len - 1] + [tok.eos_id] for ids in encoded], src_len)
