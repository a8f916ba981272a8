"""A checkpoint's eval (`launch.py --mode=eval`); the eval loop itself is
`transformer.train.eval_loop.evaluate`, which the training loop calls too.

`evaluate_workdir` restores
the latest (or a given) checkpoint of any kind onto the current devices, in the parallel
layout asked for now (a run trained on one mesh evaluates on another: orbax restores each
array straight into its new sharding), scores a split and writes
`<workdir>/eval/<split>-<step>.json`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Optional

import jax

from transformer import kinds, paths
from transformer.config import ConfigError, ParallelConfig
from transformer.data.run_tokenizer import with_kept_tokenizer
from transformer.errors import CommandLineError
from transformer.train import optim
from transformer.weights.init_from import unreadable_checkpoint
from transformer.train.checkpoint import Checkpointer
from transformer.train.eval_loop import evaluate, outputs_step
from transformer.train.parallel import build_parallel
from transformer.workdir import check_data_facts, choose_step, run_config


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
  config = with_kept_tokenizer(config, workdir)  # the tokenizer file it trained with
  checkpointer = Checkpointer(paths.join(workdir, "checkpoints"), keep=saved.checkpoint.keep,
                              async_save=False)
  try:
    steps = checkpointer.all_steps()
    step = choose_step(steps, step, what=f"--workdir={workdir!r}",
                       directory=checkpointer.directory)
    data, task = _build_data_and_task(config, workdir, split)  # TensorFlow from here on
    check_data_facts(workdir, task.config)  # the vocabulary the checkpoint was trained with
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
