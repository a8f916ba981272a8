"""Reading what a run left in its workdir: config.json, metrics.jsonl, the checkpoint steps.

A workdir holds `config.json` (the validated config, and under `provenance` where its first
start came from), `provenance.jsonl` (one record per start), `checkpoints/<step>/` (orbax),
`metrics.jsonl` (one `{"step", "split", ...metrics}` object a line) and `tensorboard/`. A
committed study keeps its runs' metrics gzipped (`metrics.jsonl.gz`, see
experiments/compress_results.py); `read_metrics` reads that when there is no plain file. The
training loop, eval, sample, diagnose, the sweep runner and its report all read it through
here. This module imports no JAX and no TensorFlow, so the sweep runner and report stay light.
Every file a run keeps is written through `transformer.paths` (`write_text` / `write_bytes`,
atomic; `append_text` for metrics.jsonl): make a new file crash-safe there.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

from transformer import packed_runs, paths, provenance, user_files
from transformer.config import (FROM_DATA, LEGACY_DEFAULTS, ConfigError, ExperimentConfig,
                                flat_config, from_config_dict)
from transformer.data.run_tokenizer import kept_tokenizer, tokenizer_file, with_kept_tokenizer

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
METRICS_GZ = METRICS_FILE + ".gz"  # committed results: the same lines, gzipped
CHECKPOINTS = "checkpoints"
# config.json's key for the run's first provenance record (`transformer.provenance`): not part
# of the config, so neither validated nor compared on resume (a new commit may resume a run).
PROVENANCE = provenance.KEY

# Fields that may change between a run and its resumption: they do not change the
# trajectory up to the resumed step.
RESUMABLE_CHANGES = ("train.num_steps", "train.log_every", "train.eval_every",
                     "checkpoint.every_steps", "checkpoint.keep", "data.eval_batches",
                     "checkpoint.keep_best", "checkpoint.async_save", "model.remat",
                     "train.peak_flops_per_device", "parallel.strategy", "parallel.data",
                     "parallel.fsdp", "parallel.tensor", "parallel.rules", "train.nonfinite",
                     "train.prefetch", "train.profile_steps", "train.compilation_cache_dir",
                     "train.xla_gpu_flags", "train.diagnostics_every", "train.wandb_project",
                     "train.wandb_entity", "train.wandb_group", "train.wandb_tags")


# --- metrics.jsonl ----------------------------------------------------------------------------

def read_metrics(workdir: str) -> dict[str, list[dict]]:
  """`{"train": [rows], "eval": [rows], ...}` from `<workdir>/metrics.jsonl` (or, when there
  is none, `<workdir>/metrics.jsonl.gz`, or the run's entry in its sweep's packed file,
  `transformer.packed_runs`), in step order; `{}` when there is none of them.

  A resumed run may log a step twice; the last line for a step wins. A line cut short by a
  kill (a torn last line) is skipped.
  """
  path, text = paths.join(workdir, METRICS_FILE), None
  if not paths.exists(path):
    path += ".gz"  # a run compressed by experiments/compress_results.py
    if not paths.exists(path):
      path, text = paths.join(workdir, METRICS_FILE), packed_runs.text(workdir, METRICS_FILE)
      if text is None:  # not a run of a packed study either
        return {}
  rows = user_files.read_json_lines(path, "the run's metrics", skip_bad=True, text=text)
  by_split: dict[str, dict[int, dict]] = {}
  for row in rows:
    if not (isinstance(row.get("split"), str) and isinstance(row.get("step"), int)
            and not isinstance(row["step"], bool)):  # not a metrics row: nothing to place it by
      continue
    by_split.setdefault(row["split"], {})[row["step"]] = row
  return {split: [rows[s] for s in sorted(rows)] for split, rows in by_split.items()}


def last_eval(workdir: str) -> Optional[dict]:
  """The eval row of the latest step in the workdir's metrics, or None."""
  evals = read_metrics(workdir).get("eval")
  return evals[-1] if evals else None


# --- config.json ------------------------------------------------------------------------------

def run_config(workdir: str) -> ExperimentConfig:
  """The validated config a run saved in `<workdir>/config.json`. A file that is not valid
  JSON, not an object, or fails validation is a one-line error naming it."""
  path = paths.join(workdir, CONFIG_FILE)
  if not paths.exists(path):
    raise ConfigError(f"--workdir={workdir!r} holds no config.json; point it at a trained run.")
  saved = user_files.read_json_object(path, user_files.SAVED_CONFIG, user_files.SAVED_CONFIG_FIX)
  saved.pop(PROVENANCE, None)  # where the run came from, not part of its config
  try:
    return from_config_dict(saved)
  except (ConfigError, TypeError, ValueError, AttributeError) as e:
    raise user_files.file_error(path, f"its config is not valid: {e}",
                                user_files.SAVED_CONFIG_FIX, what=user_files.SAVED_CONFIG) from None


def check_workdir_config(workdir: str, config: ExperimentConfig) -> None:
  """Refuses to resume a workdir whose saved config differs in a field that matters, or whose
  tokenizer file differs from the copy the run kept (`transformer.data.run_tokenizer`). A
  workdir without a checkpoint holds no run yet: its config.json is simply replaced."""
  path = paths.join(workdir, CONFIG_FILE)
  if not paths.exists(path) or not checkpoint_steps(paths.join(workdir, CHECKPOINTS)):
    return
  saved = flat_config(user_files.read_json_object(path, user_files.SAVED_CONFIG,
                                                  user_files.SAVED_CONFIG_FIX), leaf=None)
  saved = {**LEGACY_DEFAULTS, **saved}  # what a config saved before a field existed meant
  current = flat_config(config.to_dict(), leaf=None)
  if saved["optim.name"] != current["optim.name"]:  # its optimizer state fits no other
    raise ConfigError(
        f"The workdir {workdir} holds a checkpoint of optim.name={saved['optim.name']!r}; it "
        f"cannot resume under optim.name={current['optim.name']!r} (another optimizer state): "
        f"pass another --workdir, or --config.optim.name={saved['optim.name']}.")
  diffs = sorted(k for k in set(saved) | set(current)
                 if saved.get(k) != current.get(k) and k not in RESUMABLE_CHANGES
                 and k not in FROM_DATA and k.split(".")[0] != PROVENANCE)
  if diffs:
    lines = "\n".join(f"  {k}: saved {saved.get(k)!r}, now {current.get(k)!r}" for k in diffs)
    raise ConfigError(
        f"The workdir {workdir} holds a run with a different config:\n{lines}\n"
        "Resuming would mix two experiments. Pass another --workdir (or remove this one).")
  kept_tokenizer(config, workdir)  # its tokenizer file unchanged since it trained


def check_data_facts(workdir: str, config: ExperimentConfig) -> None:
  """Refuses a run whose data now gives another vocabulary, number of classes or image shape
  (`FROM_DATA`; `config` as the data filled it in) than its config.json records: its
  checkpoints would not fit the model, and restoring them fails on array shapes. A workdir
  without a checkpoint holds no run yet."""
  path = paths.join(workdir, CONFIG_FILE)
  if not paths.exists(path) or not checkpoint_steps(paths.join(workdir, CHECKPOINTS)):
    return
  saved = flat_config(user_files.read_json_object(path, user_files.SAVED_CONFIG,
                                                  user_files.SAVED_CONFIG_FIX), leaf=None)
  # JSON's lists against the config's tuples
  current = json.loads(json.dumps(flat_config(config.to_dict(), leaf=None)))
  diffs = [k for k in FROM_DATA if saved.get(k) not in (None, current.get(k))]
  if not diffs:
    return
  where = (f"{config.data.source_dir}/meta.json" if config.data.name == "token_file"
           else f"data.name={config.data.name!r} and its tokenizer")
  raise ConfigError(
      f"{workdir} holds a run trained with " + ", ".join(f"{k} {saved[k]}" for k in diffs)
      + f" (its {CONFIG_FILE}); its data ({where}) now gives "
      + ", ".join(f"{k} {current.get(k)}" for k in diffs) + ": the data changed since the run "
      "trained (a meta.json rewritten with another vocabulary?), and its checkpoints do not "
      "fit that model. Restore the data as it was, or pass another --workdir.")


def resume_config(config: ExperimentConfig, workdir: str) -> ExperimentConfig:
  """`config` reading the run's copy of its tokenizer file (`with_kept_tokenizer`) when the
  configured file is gone and `workdir` holds a run to resume (a checkpoint and the copy), as
  eval, sample and export do; else `config` itself. A fresh start reads the configured file.
  The config a run saves still names the configured path: `named_tokenizer` puts it back."""
  named = tokenizer_file(config)
  if (named is None or os.path.isfile(named[1])
      or not checkpoint_steps(paths.join(workdir, CHECKPOINTS))):
    return config
  return with_kept_tokenizer(config, workdir)


def named_tokenizer(config: ExperimentConfig, named: ExperimentConfig) -> ExperimentConfig:
  """`config` with the tokenizer file `named` names (undoing `resume_config`)."""
  return dataclasses.replace(config, data=dataclasses.replace(
      config.data, tokenizer=named.data.tokenizer, spm_model=named.data.spm_model))


# --- checkpoints/ -----------------------------------------------------------------------------

def checkpoint_steps(directory: str) -> list[int]:
  """The steps with a (finished) checkpoint folder in `directory`; [] if there is none."""
  if not paths.isdir(directory):
    return []
  return sorted(int(d) for d in paths.listdir(directory) if d.isdigit())


def choose_step(steps: Sequence[int], step: Optional[int], *, what: str,
                directory: str) -> int:
  """`step`, or the latest of `steps` (sorted) when `step` is None.

  Raises ConfigError, starting with `what` (the flag that named the run, e.g.
  `--workdir='runs/lm'`), when `directory` has no checkpoint or none of `step`; the latter
  lists the steps it has.
  """
  if not steps:
    raise ConfigError(f"{what}: {directory} holds no checkpoint.")
  if step is None:
    return steps[-1]
  if step not in steps:
    raise ConfigError(f"{what}: {directory} has no checkpoint of step {step}; it has steps "
                      f"{list(steps)}.")
  return step
