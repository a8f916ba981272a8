"""Evaluating a checkpoint (`launch.py --mode=eval`) and the host-side eval metrics.

`evaluate_workdir` restores the latest (or a given) checkpoint of any kind onto the current
devices, in the parallel layout asked for now (a run trained on one mesh evaluates on another:
orbax restores each array straight into its new sharding), scores a split and writes
`<workdir>/eval/<split>-<step>.json`.

`outputs_step` compiles a task's `eval_outputs(params, batch)` (decodings that a metric such
as BLEU scores on the host, not as device sums) for the loop's `evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Optional

import jax

from transformer import kinds
from transformer.config import ConfigError, ParallelConfig


def outputs_step(task, par) -> Optional[Callable[[Any, dict], dict]]:
  """`(state, this process's batch) -> host arrays` of `task.eval_outputs` for all rows, or
  None when the task has no host-side metrics."""
  if not hasattr(task, "eval_outputs"):
    return None
  if par.strategy == "pmap":  # one device decodes this process's rows
    fn = jax.jit(task.eval_outputs)
    return lambda state, batch: jax.device_get(fn(par.params(state), batch))
  fn = jax.jit(task.eval_outputs, in_shardings=(par.state_shardings.params, par.batch_sharding),
               out_shardings=par.replicated)
  return lambda state, batch: jax.device_get(fn(state.params, par.shard_batch(batch)))


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
  from transformer.evaluation.sample import run_config  # noqa: PLC0415
  from transformer.train import optim  # noqa: PLC0415
  from transformer.train.checkpoint import Checkpointer  # noqa: PLC0415
  from transformer.train.loop import build_parallel, evaluate  # noqa: PLC0415

  workdir = os.path.abspath(workdir)
  saved = run_config(workdir)
  config = dataclasses.replace(
      saved, data=dataclasses.replace(saved.data, eval_split=split or saved.data.eval_split),
      model=dataclasses.replace(saved.model, init_from=""),  # the checkpoint has the params
      parallel=parallel or saved.parallel)
  checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), keep=saved.checkpoint.keep,
                              async_save=False)
  try:
    steps = checkpointer.all_steps()
    if not steps:
      raise ConfigError(f"--workdir={workdir!r} holds no checkpoint to evaluate.")
    step = steps[-1] if step is None else step
    if step not in steps:
      raise ConfigError(f"--step={step}: {workdir}/checkpoints has steps {steps}.")
    data, task = kinds.build_data_and_task(config, workdir)  # TensorFlow from here on
    par = build_parallel(task.config, task,
                         optim.build_optimizer(config.optim, config.train.num_steps))
    state = checkpointer.restore(step, par.checkpoint_target(), data.train_iterator)
  finally:
    checkpointer.close()
  state = par.from_checkpoint(state)
  split = config.data.eval_split
  log(f"Evaluating {config.model.kind} step {step} of {workdir} on {config.data.name} "
      f"'{split}' ({par.describe()}).")
  metrics = evaluate(task, data, par.eval_step, state, 0, outputs_step=outputs_step(task, par))
  metrics = dict(metrics, step=step, split=split)
  if jax.process_index() == 0:
    os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
    path = os.path.join(workdir, "eval", _file_name(split, step))
    with open(path, "w") as f:
      json.dump(metrics, f, indent=2, sort_keys=True)
    log(f"Wrote {path}")
  return metrics


NUM_SAMPLE_PROMPTS = 3
LM_PROMPT_TOKENS = 16  # a decoder LM continues the first tokens of an eval row
LM_SAMPLE_TOKENS = 48


def sample_prompts(task, data) -> list[str]:
  """A few fixed inputs of a generative run, from its first eval batch (the same every eval):
  the first tokens of eval rows (decoder LM) or eval sources (encoder-decoder)."""
  from transformer.evaluation.sample import _until_eos  # noqa: PLC0415
  tok = data.tokenizer
  batch = next(iter(data.eval_batches(1)))
  length = LM_PROMPT_TOKENS if kinds_generative(task) == "lm" else batch["inputs"].shape[1]
  prompts = []
  for row in batch["inputs"][:NUM_SAMPLE_PROMPTS]:
    ids = [t for t in _until_eos(row[:length], tok.eos_id) if t not in (tok.pad_id, tok.bos_id)]
    prompts.append(tok.decode(ids))
  return prompts


def kinds_generative(task) -> str:
  return kinds.get(task.config.model.kind).generative


def write_samples(task, data, par, state, writer, step: int, workdir: str, log=print) -> None:
  """Greedy outputs of `sample_prompts` for a generative run: appended to
  `<workdir>/samples.txt` and written to TensorBoard (text); nothing for other kinds."""
  if not kinds_generative(task):
    return
  from transformer.evaluation.sample import generate_texts  # noqa: PLC0415
  if not hasattr(task, "_sample_prompts"):
    task._sample_prompts = sample_prompts(task, data)
  config = task.config
  max_new = (LM_SAMPLE_TOKENS if kinds_generative(task) == "lm"
             else config.model.max_decode_len or config.data.tgt_len)
  outputs = generate_texts(config, task.model, par.params(state), data.tokenizer,
                           task._sample_prompts, max_new_tokens=max_new, temperature=0.0)
  if jax.process_index() != 0:
    return
  with open(os.path.join(workdir, "samples.txt"), "a") as f:
    for prompt, out in zip(task._sample_prompts, outputs):
      f.write(json.dumps({"step": step, "prompt": prompt, "temperature": 0.0,
                          "sample": out}) + "\n")
  text = "\n\n".join(f"**{p!r}** -> {o!r}" for p, o in zip(task._sample_prompts, outputs))
  writer.write_text(step, "samples", text)
  log(f"samples at step {step}: " + " | ".join(
      f"{p[-20:]!r} -> {o[:40]!r}" for p, o in zip(task._sample_prompts, outputs)))
