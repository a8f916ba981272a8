"""The evals inside a training run: the eval loop over a split (`evaluate`), its one-line
summary (`format_eval`), and the samples a generative run writes at every eval (`SampleWriter`).

`evaluate` sums a compiled eval step over the eval split and lets the task summarize the sums
(the training loop's evals and `--mode=eval`'s `transformer.evaluation.evaluate` both call
it). `outputs_step` compiles a task's `eval_outputs(params, batch)` (decodings that a metric
such as BLEU scores on the host, not as device sums) for `evaluate`.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer import kinds, paths
from transformer.sampling import Sampling
from transformer.tasks.decode import until_eos
from transformer.tasks.generate import generate_texts
from transformer.train.parallel import on_any_process


def format_eval(metrics: dict) -> str:
  """`loss 1.2345 | bits_per_byte 0.9876 | ...`: every figure a task reports, but counts."""
  return " | ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in metrics.items()
                    if k not in ("step", "time", "tokens", "examples")
                    and isinstance(v, (float, str)))


def outputs_step(task, par) -> Optional[Callable[[Any, dict], dict]]:
  """`(state, this process's batch) -> host arrays` of `task.eval_outputs` for all rows, or
  None when the task has no host-side metrics."""
  if not hasattr(task, "eval_outputs"):
    return None
  return par.host_outputs(task.eval_outputs)


def evaluate(task, data, eval_step, state, max_batches: int, outputs_step=None) -> dict:
  """Sums `eval_step(state, batch)` over `data`'s eval split (or its first `max_batches`;
  0: all), then summarizes; with `outputs_step` (see `outputs_step` above), adds the task's
  host-side metrics of those outputs (BLEU, ...)."""
  totals, template, outputs = None, None, []
  batches = iter(data.eval_batches(max_batches))
  while True:
    batch = next(batches, None)
    # Processes may hold eval shards of different lengths, but each step is a collective:
    # one that runs out first feeds all-zero (zero-weight) batches until every one is done.
    if not on_any_process(batch is not None):
      break
    if batch is None:
      if template is None:
        raise ValueError(f"Process {jax.process_index()} has no eval batch at all; the eval "
                         "split is too small for this many processes.")
      batch = jax.tree.map(np.zeros_like, template)
    template = batch
    sums = eval_step(state, batch)
    totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if outputs_step is not None:
      outputs.append(outputs_step(state, batch))
  if totals is None:
    raise ValueError("The eval split gave no batch; is it shorter than one sequence?")
  metrics = task.summarize(jax.device_get(totals))
  if outputs_step is not None:
    metrics.update(task.summarize_outputs(outputs))
  return metrics


NUM_SAMPLE_PROMPTS = 3
LM_PROMPT_TOKENS = 16  # a decoder LM continues the first tokens of an eval row
LM_SAMPLE_TOKENS = 48


def sample_prompts(task, data) -> list[str]:
  """A few fixed inputs of a generative run, from its first eval batch (the same every eval):
  the first tokens of eval rows (decoder LM) or eval sources (encoder-decoder)."""
  tok = data.tokenizer
  batch = next(iter(data.eval_batches(1)))
  length = LM_PROMPT_TOKENS if _generative(task) == "lm" else batch["inputs"].shape[1]
  prompts = []
  for row in batch["inputs"][:NUM_SAMPLE_PROMPTS]:
    ids = [t for t in until_eos(row[:length], tok.eos_id) if t not in (tok.pad_id, tok.bos_id)]
    prompts.append(tok.decode(ids))
  return prompts


def _generative(task) -> str:
  return kinds.generative(task.config.model.kind)


class SampleWriter:
  """Greedy outputs of `sample_prompts` at every eval of a generative run: appended to
  `<workdir>/samples.txt`, written to TensorBoard (text) and logged. The prompts are read
  from the eval split at the first eval."""

  def __init__(self, task, data, par, log=print):
    self._task, self._data, self._par, self._log = task, data, par, log
    self._prompts: Optional[list[str]] = None

  @classmethod
  def maybe(cls, config, task, data, par, log=print) -> Optional["SampleWriter"]:
    """A writer when `train.samples_at_eval` is on and the kind is generative, else None. Its
    prompts are read and encoded now, before the first step, so a tokenizer that cannot encode
    them stops the run here in one line (its ConfigError), not at the first eval."""
    if not (config.train.samples_at_eval and _generative(task)):
      return None
    writer = cls(task, data, par, log)
    writer._prompts = sample_prompts(task, data)
    for prompt in writer._prompts:
      data.tokenizer.encode(prompt)
    return writer

  def write(self, state, writer, step: int) -> None:
    if self._prompts is None:
      self._prompts = sample_prompts(self._task, self._data)
    config, prompts = self._task.config, self._prompts
    greedy = Sampling(max_new=(LM_SAMPLE_TOKENS if _generative(self._task) == "lm"
                               else config.model.max_decode_len or config.data.tgt_len))
    with jax.transfer_guard("allow"):  # decoding copies its prompts and keys from the host
      outputs = generate_texts(config, self._task.model, self._par.params(state),
                               self._data.tokenizer, prompts, greedy,
                               generative=_generative(self._task))
    if jax.process_index() != 0:
      return
    paths.append_text(paths.join(writer.workdir, "samples.txt"), "".join(
        json.dumps({"step": step, "prompt": prompt, "temperature": 0.0, "sample": out}) + "\n"
        for prompt, out in zip(prompts, outputs)))
    text = "\n\n".join(f"**{p!r}** -> {o!r}" for p, o in zip(prompts, outputs))
    writer.write_text(step, "samples", text)
    self._log(f"samples at step {step}: " + " | ".join(
        f"{p[-20:]!r} -> {o[:40]!r}" for p, o in zip(prompts, outputs)))
