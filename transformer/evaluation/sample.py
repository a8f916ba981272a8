"""Generating text with a trained checkpoint (`launch.py --mode=sample`) of any generative kind.

A decoder LM continues a prompt; an encoder-decoder decodes a source (greedy, sampling or beam
search). Only the workdir is read: `config.json`, the latest checkpoint's parameters, and the
tokenizer the run used (`transformer.data.tokenizers.run_tokenizer`); no dataset is built. The
decoding itself is `transformer.tasks.generate.generate_texts`, which the training loop also
calls for the samples it writes at every eval.
"""

from __future__ import annotations

import json
from typing import Callable, Optional


from transformer import kinds, paths
from transformer.data.run_tokenizer import run_tokenizer
from transformer.tasks.generate import generate_texts
from transformer.config import ConfigError
from transformer.sampling import Sampling
from transformer.weights.init_from import load_params
from transformer.workdir import checkpoint_steps, run_config


def load_for_sampling(workdir: str, step: Optional[int] = None):
  """`(config, model, params, tokenizer)` of the run in `workdir` (latest or given step)."""
  config = run_config(workdir)
  kinds.check_generative(config.model.kind, f"--mode=sample (--workdir={workdir})")
  if not checkpoint_steps(paths.join(workdir, "checkpoints")):
    raise ConfigError(f"--workdir={workdir!r} holds a config.json but no checkpoint yet: train "
                      "it first (--mode=train with this --workdir), or point --workdir at a "
                      "trained run.")
  params, _, _ = load_params(workdir, step, what="--workdir")
  return (config, kinds.get(config.model.kind).build_model(config.model), params,
          run_tokenizer(config, workdir))


def sample_from_workdir(workdir: str, prompt: str, sampling: Sampling, *, num_samples: int = 1,
                        seed: int = 0, step: Optional[int] = None,
                        log: Callable[[str], None] = print) -> list[str]:
  """Continues `prompt` (decoder LM) or decodes it as a source (encoder-decoder)
  `num_samples` times, as `sampling` says (seeds `seed`, `seed + 1`, ...), with checkpoint
  `step` (default: the latest) in `workdir`; returns the outputs and appends them to
  `<workdir>/samples.txt`. A prompt cut to the model's context is said through `log`, once."""
  config, model, params, tok = load_for_sampling(workdir, step)
  generative = kinds.check_generative(config.model.kind, "--mode=sample")
  texts = []
  for i in range(num_samples):
    texts += generate_texts(config, model, params, tok, [prompt], sampling,
                            generative=generative, seed=seed + i,
                            log=log if i == 0 else lambda _: None)
  paths.append_text(paths.join(workdir, "samples.txt"), "".join(
      json.dumps({"prompt": prompt, **sampling.as_flags(), "seed": seed, "sample": text}) + "\n"
      for text in texts))
  return texts
