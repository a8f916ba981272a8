"""Evaluating: the eval loop over a split, a checkpoint's eval (`launch.py --mode=eval`), and
the samples a generative run writes at every eval.

`evaluate` sums a compiled eval step over the eval split and lets the task summarize the sums
(the training loop's evals and `evaluate_workdir` both call it). `evaluate_workdir` restores
the latest (or a given) checkpoint of any kind onto the current devices, in the parallel
layout asked for now (a run trained on one mesh evaluates on another: orbax restores each
array straight into its new sharding), scores a split and writes
`<workdir>/eval/<split>-<step>.json`.

`outputs_step` compiles a task's `eval_outputs(params, batch)` (decodings that a metric such
as BLEU scores on the host, not as device sums) for `evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer import kinds, paths
from transformer.config import ConfigError, ParallelConfig
from transformer.errors import CommandLineError
from transformer.evaluation.sample import _until_eos, generate_texts
from transformer.train import optim
from transformer.train.init_from import unreadable_checkpoint
from transformer.train.checkpoint import Checkpointer
from transformer.train.parallel import build_parallel, on_any_process
from transformer.workdir import choose_step, run_config


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


def _file_name(split: str, step: int) -> str:
  return re.sub(r"[^A-Za-z0-9._-]+", "_", split) + f"-{step}.json"


def evaluate_workdir(workdir: str, *, split: str = "", step: Optional[int] = None,
                     parallel: Optional[ParallelConfig] = None, log=print) -> dict:
  """Scores checkpoint `step` (default: the latest) of the run in `workdir` on `split`
  (default: the run's `data.eval_split`), over the whole split.

  Args:
    parallel: the layout to evaluate with (default: the run's own).
  Returns:
    The metrics, also written to `<workdir>/eval/<split>-<step>.json` with `step` and `split`.
  """
  workdir = paths.absolute(workdir)
  saved = run_config(workdir)
  config = dataclasses.replace(
      saved, data=dataclasses.replace(saved.data, eval_split=split or saved.data.eval_split),
      model=dataclasses.replace(saved.model, init_from=""),  # the checkpoint has the params
      parallel=parallel or saved.parallel)
  checkpointer = Checkpointer(paths.join(workdir, "checkpoints"), keep=saved.checkpoint.keep,
                              async_save=False)
  try:
    steps = checkpointer.all_steps()
    step = choose_step(steps, step, what=f"--workdir={workdir!r}",
                       directory=checkpointer.directory)
    data, task = _build_data_and_task(config, workdir, split)  # TensorFlow from here on
    par = build_parallel(task.config, task,
                         optim.build_optimizer(config.optim, config.train.num_steps))
    try:
      state = checkpointer.restore(step, par.checkpoint_target(), data.train_iterator)
    except Exception as e:  # noqa: BLE001 -- partial or corrupt files: say which, in one line
      raise unreadable_checkpoint("--workdir", workdir, checkpointer.directory, step, steps,
                                  e) from None
  finally:
    checkpointer.close()
  state = par.from_checkpoint(state)
  split = config.data.eval_split
  log(f"Evaluating {config.model.kind} step {step} of {workdir} on {config.data.name} "
      f"'{split}' ({par.describe()}).")
  metrics = evaluate(task, data, par.eval_step, state, 0, outputs_step=outputs_step(task, par))
  metrics = dict(metrics, step=step, split=split)
  if jax.process_index() == 0:
    paths.makedirs(paths.join(workdir, "eval"))
    path = paths.join(workdir, "eval", _file_name(split, step))
    paths.write_text(path, json.dumps(metrics, indent=2, sort_keys=True))
    log(f"Wrote {path}")
  return metrics


def _build_data_and_task(config, workdir: str, split: str):
  """`kinds.build_data_and_task`; a `--eval_split` the data does not have is a command-line
  error (the data's check names the config field, which --mode=eval set from the flag)."""
  try:
    return kinds.build_data_and_task(config, workdir)
  except ConfigError as e:
    field = "--config.data.eval_split="
    if split and str(e).startswith(field):
      raise CommandLineError("--eval_split=" + str(e)[len(field):] + " Leave --eval_split out "
                             "for the run's own.") from None
    raise


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
    ids = [t for t in _until_eos(row[:length], tok.eos_id) if t not in (tok.pad_id, tok.bos_id)]
    prompts.append(tok.decode(ids))
  return prompts


def _generative(task) -> str:
  return kinds.get(task.config.model.kind).generative


class SampleWriter:
  """Greedy outputs of `sample_prompts` at every eval of a generative run: appended to
  `<workdir>/samples.txt`, written to TensorBoard (text) and logged. The prompts are read
  from the eval split at the first eval."""

  def __init__(self, task, data, par, log=print):
    self._task, self._data, self._par, self._log = task, data, par, log
    self._prompts: Optional[list[str]] = None

  @classmethod
  def maybe(cls, config, task, data, par, log=print) -> Optional["SampleWriter"]:
    """A writer when `train.samples_at_eval` is on and the kind is generative, else None."""
    return cls(task, data, par, log) if config.train.samples_at_eval and _generative(task) else None

  def write(self, state, writer, step: int) -> None:
    if self._prompts is None:
      self._prompts = sample_prompts(self._task, self._data)
    config, prompts = self._task.config, self._prompts
    max_new = (LM_SAMPLE_TOKENS if _generative(self._task) == "lm"
               else config.model.max_decode_len or config.data.tgt_len)
    outputs = generate_texts(config, self._task.model, self._par.params(state),
                             self._data.tokenizer, prompts, max_new_tokens=max_new,
                             temperature=0.0)
    if jax.process_index() != 0:
      return
    paths.append_text(paths.join(writer.workdir, "samples.txt"), "".join(
        json.dumps({"step": step, "prompt": prompt, "temperature": 0.0, "sample": out}) + "\n"
        for prompt, out in zip(prompts, outputs)))
    text = "\n\n".join(f"**{p!r}** -> {o!r}" for p, o in zip(prompts, outputs))
    writer.write_text(step, "samples", text)
    self._log(f"samples at step {step}: " + " | ".join(
        f"{p[-20:]!r} -> {o[:40]!r}" for p, o in zip(prompts, outputs)))
