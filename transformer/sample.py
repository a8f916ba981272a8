"""Sampling text from a trained decoder-only LM checkpoint (`launch.py --mode=sample`)."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from transformer import decode
from transformer.config import ConfigError, from_config_dict


def sample_from_workdir(workdir: str, prompt: str, *, max_new_tokens: int = 200,
                        temperature: float = 0.8, top_k: int = 0, top_p: float = 0.95,
                        num_samples: int = 1, seed: int = 0) -> list[str]:
  """Continues `prompt` `num_samples` times with the latest checkpoint of the LM run in
  `workdir`; returns the continuations (text after the prompt, up to the first EOS) and
  appends them to `<workdir>/samples.txt`."""
  from transformer.tasks import build_task, load_params  # TensorFlow only from here on
  from transformer.train.checkpoint import checkpoint_steps
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise ConfigError(f"--workdir={workdir!r} holds no config.json; point it at a trained run.")
  with open(path) as f:
    config = from_config_dict(json.load(f))
  if config.model.kind != "decoder_lm":
    raise ConfigError(f"--mode=sample needs a decoder_lm run; {workdir} is a "
                      f"{config.model.kind!r} run.")
  if not checkpoint_steps(os.path.join(workdir, "checkpoints")):
    raise ConfigError(f"--workdir={workdir!r} holds a config.json but no checkpoint yet: train "
                      "it first (--mode=train with this --workdir), or point --workdir at a "
                      "trained run.")
  task = build_task(config, workdir)  # for the run's tokenizer (and model with its vocab)
  params, _ = load_params(workdir)
  tok = task.data.tokenizer
  # Training rows start documents with BOS when packed / padded, and follow an EOS in a
  # concatenated stream: begin the prompt the same way.
  start = tok.bos_id if config.data.packing != "concat" else tok.eos_id
  ids = [start] + list(tok.encode(prompt))
  if len(ids) + max_new_tokens > config.model.max_len and config.model.positions == "learned":
    raise ConfigError(f"prompt + max_new_tokens = {len(ids) + max_new_tokens} exceeds the "
                      f"model's max_len={config.model.max_len}.")
  prompts = jnp.asarray(np.tile(np.asarray(ids, np.int32), (num_samples, 1)))
  generate = jax.jit(lambda p, x, r: decode.lm_generate(
      task.model, p, x, max_new_tokens, eos_id=tok.eos_id, rng=r, temperature=temperature,
      top_k=top_k, top_p=top_p, pad_id=tok.pad_id))
  out = np.asarray(generate(params, prompts, jax.random.PRNGKey(seed)))
  texts = []
  for row in out:
    row = list(row)
    if tok.eos_id in row:
      row = row[:row.index(tok.eos_id)]
    texts.append(tok.decode(row))
  with open(os.path.join(workdir, "samples.txt"), "a") as f:
    for text in texts:
      f.write(json.dumps({"prompt": prompt, "temperature": temperature, "top_k": top_k,
                          "top_p": top_p, "seed": seed, "sample": text}) + "\n")
  return texts
