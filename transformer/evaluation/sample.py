"""Generating text with a trained checkpoint (`launch.py --mode=sample`) of any generative kind.

A decoder LM continues a prompt; an encoder-decoder decodes a source (greedy, sampling or beam
search). Only the workdir is read: `config.json`, the latest checkpoint's parameters, and the
tokenizer the run used (bytes, `hf:`/`gpt2:` files, `data.spm_model`, or
`<workdir>/tokenizer/`); no dataset is built. `generate_texts` is also what the training loop calls for the samples it writes at every
eval of a generative run.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer import kinds, paths
from transformer.evaluation import decode
from transformer.config import ConfigError, ExperimentConfig
from transformer.errors import CommandLineError
from transformer.train.init_from import load_params
from transformer.workdir import checkpoint_steps, run_config


def run_tokenizer(config: ExperimentConfig, workdir: str):
  """The tokenizer `workdir`'s run trained with, without building its dataset."""
  # Imported here: sampling reads no dataset.
  from transformer.data.tokenizers import ByteTokenizer, build_tokenizer  # noqa: PLC0415
  data = config.data
  if data.name == "token_file":  # the token file's sidecar names its tokenizer
    from transformer.data import token_file  # noqa: PLC0415
    return token_file.load_tokenizer(data.source_dir, token_file.read_meta(data.source_dir))
  if data.tokenizer == "bytes":
    return ByteTokenizer()
  if data.tokenizer != "sentencepiece":  # hf:<tokenizer.json>, gpt2:<ranks file>
    return build_tokenizer(data.tokenizer)
  path = data.spm_model or paths.join(workdir, "tokenizer", f"spm{data.spm_vocab_size}.model")
  if not paths.exists(path):
    raise ConfigError(f"The run in {workdir} used a SentencePiece vocabulary at {path}, which "
                      "is missing.")
  return build_tokenizer("sentencepiece", paths.local_copy(path))


def _until_eos(row, eos_id: int) -> list[int]:
  row = [int(t) for t in row]
  return row[:row.index(eos_id)] if eos_id in row else row


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


def generate_texts(config: ExperimentConfig, model, params: Any, tok, texts: list[str], *,
                   max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                   top_p: float = 1.0, beam_size: int = 1, seed: int = 0,
                   log: Callable[[str], None] = print) -> list[str]:
  """One output per text in `texts`: the LM's continuation (text after the prompt, up to the
  first EOS) or the encoder-decoder's decoded target. `params` may be sharded arrays.

  A prompt longer than the model's context (`model.max_len` less `max_new_tokens` and the
  start token) keeps its last tokens; a source longer than `data.src_len` its first ones.
  Either is said through `log`."""
  generative = kinds.get(config.model.kind).generative
  rng = jax.random.PRNGKey(seed)
  if generative == "lm":
    # Training rows start documents with BOS when packed / padded, and follow an EOS in a
    # concatenated stream: begin the prompt the same way.
    start = tok.bos_id if config.data.packing != "concat" else tok.eos_id
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
      rows.append([start] + kept)
    run = jax.jit(lambda p, x, r: decode.lm_generate(
        model, p, x, max_new_tokens, eos_id=tok.eos_id, rng=r, temperature=temperature,
        top_k=top_k, top_p=top_p, pad_id=tok.pad_id))
    # Prompts differ in length and the cache has no left padding: one by one.
    outs = [np.asarray(run(params, jnp.asarray([row], jnp.int32), rng))[0] for row in rows]
  elif generative == "seq2seq":
    src_len = config.data.src_len
    encoded = [list(tok.encode(t)) for t in texts]
    for ids in encoded:
      if len(ids) > src_len - 1:
        log(f"Note: the source is {len(ids)} tokens and the model reads {src_len} "
            f"(data.src_len, with the end token): kept its first {src_len - 1} tokens, dropped "
            f"the last {len(ids) - (src_len - 1)}.")
    sources = _pad_rows([ids[:src_len - 1] + [tok.eos_id] for ids in encoded], src_len)
    run = jax.jit(lambda p, x, r: decode.seq2seq_decode(
        model, p, x, max_new_tokens, bos_id=tok.bos_id, eos_id=tok.eos_id, beam_size=beam_size,
        length_penalty=config.model.length_penalty, pad_id=tok.pad_id, rng=r,
        temperature=temperature, top_k=top_k, top_p=top_p))
    outs = np.asarray(run(params, jnp.asarray(sources), rng))
  else:
    raise ConfigError(f"--mode=sample needs a generative run (decoder_lm or encoder_decoder); "
                      f"this is a {config.model.kind!r} run.")
  return [tok.decode(_until_eos(o, tok.eos_id)) for o in outs]


def load_for_sampling(workdir: str, step: Optional[int] = None):
  """`(config, model, params, tokenizer)` of the run in `workdir` (latest or given step)."""
  config = run_config(workdir)
  kind = kinds.get(config.model.kind)
  if not kind.generative:
    raise ConfigError(f"--mode=sample needs a generative run (decoder_lm or encoder_decoder); "
                      f"{workdir} is a {config.model.kind!r} run.")
  if not checkpoint_steps(paths.join(workdir, "checkpoints")):
    raise ConfigError(f"--workdir={workdir!r} holds a config.json but no checkpoint yet: train "
                      "it first (--mode=train with this --workdir), or point --workdir at a "
                      "trained run.")
  params, _, _ = load_params(workdir, step, what="--workdir")
  return config, kind.build_model(config.model), params, run_tokenizer(config, workdir)


def sample_from_workdir(workdir: str, prompt: str, *, max_new_tokens: int = 200,
                        temperature: float = 0.8, top_k: int = 0, top_p: float = 0.95,
                        num_samples: int = 1, seed: int = 0, beam_size: int = 1,
                        step: Optional[int] = None,
                        log: Callable[[str], None] = print) -> list[str]:
  """Continues `prompt` (decoder LM) or decodes it as a source (encoder-decoder)
  `num_samples` times with checkpoint `step` (default: the latest) in `workdir`; returns the
  outputs and appends them to `<workdir>/samples.txt`. `beam_size` > 1: beam search
  (encoder-decoder). A prompt cut to the model's context is said through `log`, once."""
  config, model, params, tok = load_for_sampling(workdir, step)
  if beam_size > 1 and kinds.get(config.model.kind).generative != "seq2seq":
    raise CommandLineError(f"--beam_size={beam_size}: beam search is for encoder_decoder runs; "
                           f"{workdir} holds a decoder_lm, which samples (--temperature, "
                           "--top_k, --top_p; --temperature=0 for greedy).")
  texts = []
  for i in range(num_samples):
    texts += generate_texts(config, model, params, tok, [prompt], max_new_tokens=max_new_tokens,
                            temperature=temperature, top_k=top_k, top_p=top_p,
                            beam_size=beam_size, seed=seed + i,
                            log=log if i == 0 else lambda _: None)
  paths.append_text(paths.join(workdir, "samples.txt"), "".join(
      json.dumps({"prompt": prompt, "temperature": temperature, "top_k": top_k,
                  "top_p": top_p, "seed": seed, "beam_size": beam_size,
                  "sample": text}) + "\n" for text in texts))
  return texts
