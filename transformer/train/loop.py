"""The training loop: data, model and state, jit-compiled steps, metrics, eval, checkpoints.

`train_and_evaluate(config, workdir)` is the whole run. Running it again on the same workdir
resumes from the latest checkpoint (train state, input position and all) and, if the run had
finished, only reports its final figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer import kinds
from transformer.evaluation import evaluate as evaluation
from transformer.train import diagnostics
from transformer.config import ConfigError, ExperimentConfig
from transformer.train import flops, optim
from transformer.train.checkpoint import Checkpointer, checkpoint_steps
from transformer.train.health import HealthGuard, NonFiniteError
from transformer.train.parallel import Parallel
from transformer.train.prefetch import Prefetcher
from transformer.train.profiler import StepProfiler
from transformer.train.state import TrainState, count_params
from transformer.train.writers import MetricWriter, format_duration, log

# Fields that may change between a run and its resumption: they do not change the
# trajectory up to the resumed step.
RESUMABLE_CHANGES = ("train.num_steps", "train.log_every", "train.eval_every",
                     "checkpoint.every_steps", "checkpoint.keep", "data.eval_batches",
                     "checkpoint.keep_best", "checkpoint.async_save", "model.remat",
                     "train.peak_flops_per_device", "parallel.strategy", "parallel.data",
                     "parallel.fsdp", "parallel.tensor", "parallel.rules", "train.nonfinite",
                     "train.prefetch", "train.profile_steps", "train.compilation_cache_dir",
                     "train.xla_gpu_flags", "train.diagnostics_every")


# Multi-process runs agree on stopping (after a signal) every this many steps.
STOP_CHECK_EVERY = 10


def _flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = v
  return out


def check_workdir_config(workdir: str, config: ExperimentConfig) -> None:
  """Refuses to resume a workdir whose saved config differs in a field that matters. A
  workdir without a checkpoint holds no run yet: its config.json is simply replaced."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path) or not checkpoint_steps(os.path.join(workdir, "checkpoints")):
    return
  with open(path) as f:
    saved = _flatten(json.load(f))
  current = _flatten(config.to_dict())
  diffs = sorted(k for k in set(saved) | set(current)
                 if saved.get(k) != current.get(k) and k not in RESUMABLE_CHANGES
                 and k not in kinds.FROM_DATA)
  if diffs:
    lines = "\n".join(f"  {k}: saved {saved.get(k)!r}, now {current.get(k)!r}" for k in diffs)
    raise ConfigError(
        f"The workdir {workdir} holds a run with a different config:\n{lines}\n"
        "Resuming would mix two experiments. Pass another --workdir (or remove this one).")


class _StopRequest:
  """Turns SIGINT / SIGTERM into a request to stop after the current step and save."""

  def __init__(self):
    self.signal_name: Optional[str] = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGINT, signal.SIGTERM):
      try:
        self._previous[sig] = signal.signal(sig, self._handle)
      except ValueError:  # not the main thread: leave signals alone
        pass
    return self

  def _handle(self, signum, frame):
    del frame
    if self.signal_name is not None:  # a second signal: stop now
      signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
      raise KeyboardInterrupt
    self.signal_name = signal.Signals(signum).name
    log(f"\n{self.signal_name} received: finishing this step, saving a checkpoint, then exiting.")

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    return False


def _on_any_process(flag: bool) -> bool:
  """True on every process if `flag` is true on one (a signal may reach only some of them;
  all must stop after the same step, or the next collective hangs)."""
  if jax.process_count() == 1:
    return flag
  from jax.experimental import multihost_utils  # noqa: PLC0415
  return bool(np.max(multihost_utils.process_allgather(np.int32(flag))))


def _last_eval(workdir: str) -> Optional[dict]:
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return None
  last = None
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      if row.get("split") == "eval":
        last = row
  return last


def format_eval(metrics: dict) -> str:
  """`loss 1.2345 | bits_per_byte 0.9876 | ...`: every figure a task reports, but counts."""
  return " | ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in metrics.items()
                    if k not in ("step", "time", "tokens", "examples")
                    and isinstance(v, (float, str)))


def evaluate(task, data, eval_step, state, max_batches: int, outputs_step=None) -> dict:
  """Sums `eval_step(state, batch)` over the eval split (or its first `max_batches`), then
  summarizes; with `outputs_step` (`transformer.evaluation.evaluate.outputs_step`), adds the task's
  host-side metrics of those outputs (BLEU, ...)."""
  totals, template, outputs = None, None, []
  batches = iter(data.eval_batches(max_batches))
  while True:
    batch = next(batches, None)
    # Processes may hold eval shards of different lengths, but each step is a collective:
    # one that runs out first feeds all-zero (zero-weight) batches until every one is done.
    if not _on_any_process(batch is not None):
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


def train_and_evaluate(config: ExperimentConfig, workdir: str, *,
                       stop_after: Optional[int] = None, task=None, data=None) -> dict:
  """Trains `config` in `workdir`, resuming if it holds a checkpoint.

  Args:
    config: validated experiment config.
    workdir: where config.json, checkpoints/, metrics.jsonl and tensorboard/ go.
    stop_after: end this process after this step (saving a checkpoint), as a preemption
      would; the next call resumes.
    task, data: a prebuilt task and its data (tests); default: both built from `config`
      (`kinds.build_data_and_task`).
  Returns:
    The final eval metrics (`loss`, `bits_per_byte`, ...) and `step`.
  """
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  check_workdir_config(workdir, config)
  t_start = time.time()

  if task is None:
    data, task = kinds.build_data_and_task(config, workdir)
  config = task.config  # now with the tokenizer's vocab_size

  num_steps = config.train.num_steps
  tx = optim.build_optimizer(config.optim, num_steps)
  schedule = optim.learning_rate_schedule(config.optim, num_steps)
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  par = build_parallel(config, task, tx)
  if jax.process_index() == 0:  # only once every check on the config has passed
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json())

  checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), config.checkpoint.keep,
                              async_save=config.checkpoint.async_save,
                              keep_best=config.checkpoint.keep_best,
                              log_path=os.path.join(workdir, "checkpoint_errors.log"))
  latest, state = checkpointer.restore_latest(par.checkpoint_target(), data.train_iterator,
                                              warn=lambda m: log(f"WARNING: {m}"))
  if latest is not None:
    state = par.from_checkpoint(state)
    log(f"Resumed from {workdir}/checkpoints at step {latest}.")
  else:
    state = par.init_state(init_rng)
  log(f"Model: {config.model.kind}, {count_params(par.params(state)):,} parameters, "
      f"norm_placement={config.model.norm_placement}; data: {config.data.name}, "
      f"batch {config.train.batch_size} x {kinds.get(config.model.kind).row_shape(config)} tokens; {par.describe()}.")

  train_step, eval_step = par.train_step, par.eval_step
  writer = MetricWriter(workdir)
  step = int(par.to_checkpoint(state).step)
  final_eval = None

  if step >= num_steps:
    final_eval = _last_eval(workdir)
    if final_eval is None:
      final_eval = evaluate(task, data, eval_step, state, 0, evaluation.outputs_step(task, par))
      writer.write(step, "eval", final_eval)
    log(f"The run in {workdir} is already at step {step} of {num_steps}; nothing to train.")
  else:
    try:
      final_eval = _run_steps(config, task, data, state, train_step, eval_step, schedule,
                              dropout_rng, checkpointer, writer, stop_after, par)
    except NonFiniteError as e:  # the good checkpoints finish writing; then say where they are
      # The metrics say how the run ended (reports mark it diverged; sweeps do not rerun it).
      writer.write(e.step, "train", {"loss": e.loss, "grad_norm": e.grad_norm, "diverged": 1})
      checkpointer.close()
      writer.close()
      last = checkpointer.latest_step()
      e.last_checkpoint = None if last is None else f"{checkpointer.directory}/{last}"
      raise

  checkpointer.close()
  writer.close()
  if final_eval is not None:
    final_eval = {k: v for k, v in final_eval.items() if k not in ("tokens", "examples")}
    log(f"Final eval at step {final_eval.get('step', step)}: {format_eval(final_eval)} "
        f"({time.time() - t_start:.0f}s in this process).")
  log(f"Workdir: {workdir} (config.json, checkpoints/, metrics.jsonl, tensorboard/)")
  return final_eval or {}


def build_parallel(config: ExperimentConfig, task, tx) -> Parallel:
  """The device placement and compiled steps for `config.parallel` (see `parallel.py`)."""
  return Parallel(config.parallel, init_params=task.init_params, tx=tx,
                  loss_sums=task.loss_sums, eval_sums=task.eval_sums,
                  global_batch_size=config.train.batch_size,
                  micro_batches=config.train.micro_batches,
                  init_boxed_params=getattr(task, "init_boxed_params", None),
                  skip_nonfinite=config.train.nonfinite == "skip")


class _ThroughputLog:
  """The periodic `train` row and log line: mean loss and gradient norm of the steps since the
  last row, tokens/s and ms/step with compilation and eval time left out, and MFU."""

  def __init__(self, config, par, schedule, guard: HealthGuard, writer):
    self._config, self._par, self._schedule = config, par, schedule
    self._guard, self._writer = guard, writer
    self._step_flops = kinds.experiment_flops_per_step(config)
    self._peak, self._peak_source = flops.peak_flops_per_device(
        config.train.peak_flops_per_device, config.model.dtype)
    if self._peak:
      log(f"MFU: {self._step_flops / 1e9:,.4g} GFLOPs per step (MaxText convention) against "
          f"{self._peak * par.num_devices / 1e12:,.3f} TFLOP/s peak ({self._peak_source}).")
    self.pending, self._start, self._steps = [], time.time(), 0

  def add(self, metrics) -> None:
    self.pending.append(metrics)
    self._steps += 1

  def restart(self) -> None:
    """The interval starts now (after compilation)."""
    self._start = time.time()

  def leave_out(self, seconds: float) -> None:
    """`seconds` spent on something else (an eval) do not count in tokens/s."""
    self._start += seconds

  def write(self, step: int, num_steps: int) -> None:
    fetched = jax.device_get(self.pending)
    elapsed = time.time() - self._start
    tokens = float(sum(m["tokens"] for m in fetched))
    step_time = elapsed / max(self._steps, 1)
    applied = [m for m in fetched if m["finite"]] or fetched  # skipped steps: not in means
    row = {"loss": float(np.mean([m["loss"] for m in applied])),
           "grad_norm": float(np.mean([m["grad_norm"] for m in applied])),
           "learning_rate": float(self._schedule(step - 1)),
           "tokens_per_sec": tokens / max(elapsed, 1e-9),
           "step_time": step_time}
    if self._peak:
      mfu = self._step_flops / max(step_time, 1e-9) / (self._peak * self._par.num_devices)
      if mfu <= 1.0:
        row["mfu"] = mfu
      else:  # a false figure is worse than none
        log(f"WARNING: MFU would be {mfu:.0%}: the peak ({self._peak_source}) is too low, e.g. "
            "a CPU peak measured while the machine was busy. MFU is not reported from here "
            "on; delete the cached peak (or set train.peak_flops_per_device) to fix it.")
        self._peak = None
    skipped = self._guard.skipped
    if self._guard.mode == "skip":
      row["skipped_steps"] = skipped
    self._writer.write(step, "train", row)
    log(f"step {step:>6}/{num_steps} | loss {row['loss']:.4f} | lr {row['learning_rate']:.2e} "
        f"| grad_norm {row['grad_norm']:.3f} | {row['tokens_per_sec']:,.0f} tok/s "
        f"| {step_time * 1e3:,.0f} ms/step"
        + (f" | MFU {row['mfu']:.1%}" if "mfu" in row else "")
        + (f" | skipped {skipped}" if skipped else "")
        + f" | ETA {format_duration(step_time * (num_steps - step))}")
    self.pending, self._start, self._steps = [], time.time(), 0


def _eval_and_log(config, task, data, par, eval_step, state, step: int, last: bool, outputs_step,
                  writer) -> tuple[dict, float]:
  """The eval at `step` (the final one sees the whole eval split), written and logged, with
  samples for generative kinds; returns its metrics (with `step`) and the seconds it took."""
  t0 = time.time()
  max_batches = 0 if last else config.data.eval_batches
  metrics = dict(evaluate(task, data, eval_step, state, max_batches, outputs_step), step=step)
  writer.write(step, "eval", {k: v for k, v in metrics.items() if k != "step"})
  log(f"eval at step {step}: {format_eval(metrics)} ({time.time() - t0:.1f}s)")
  if config.train.samples_at_eval:
    evaluation.write_samples(task, data, par, state, writer, step, writer.workdir, log)
  return metrics, time.time() - t0


def _run_steps(config, task, data, state: TrainState, train_step, eval_step, schedule,
               dropout_rng, checkpointer, writer, stop_after, par) -> Optional[dict]:
  """Trains from the state's step to `train.num_steps` (or `stop_after`, or a stop signal),
  with logs, evals, diagnostics and checkpoints on their schedules; returns the final eval,
  or None when it stopped early."""
  num_steps = config.train.num_steps
  outputs_step = evaluation.outputs_step(task, par)
  step = int(par.to_checkpoint(state).step)
  compiled = False
  final_eval = None
  guard = HealthGuard(config.train.nonfinite, log=log)  # checks where the loop syncs anyway
  throughput = _ThroughputLog(config, par, schedule, guard, writer)
  diag = diagnostics.maybe_recorder(config, task, par)  # None unless train.diagnostics_every
  batches = Prefetcher(data.next_train_batch, par.place_batch, config.train.prefetch, step,
                       lambda s: (s % config.checkpoint.every_steps == 0 or s >= num_steps
                                  or (stop_after is not None and s >= stop_after)))
  with _StopRequest() as stop, StepProfiler(config.train.profile_range, writer.workdir) as prof:
    while step < num_steps:
      batch = next(batches)
      if diag is not None:  # statistics of the state before this step, on its batch
        diag.maybe_record(step, state, batch, dropout_rng, writer)
      t0 = time.time()
      prof.before_step(step + 1)
      state, metrics = train_step(state, batch, dropout_rng)
      step += 1
      guard.record(step, metrics)
      prof.after_step(step, (state, metrics))
      if not compiled:  # keep compilation out of the throughput figures
        jax.block_until_ready(state)
        log(f"First step (with compilation) took {time.time() - t0:.1f}s.")
        compiled = True
        throughput.restart()
      else:
        throughput.add(metrics)

      last = step == num_steps
      if (step % config.train.log_every == 0 or last) and throughput.pending:
        guard.check()
        throughput.write(step, num_steps)

      eval_loss = None
      if step % config.train.eval_every == 0 or last:
        guard.check()
        final_eval, seconds = _eval_and_log(config, task, data, par, eval_step, state, step, last,
                                            outputs_step, writer)
        eval_loss = final_eval["loss"]
        throughput.leave_out(seconds)

      # Agreeing on a stop is a collective that waits for every process: in a multi-process
      # run, ask every STOP_CHECK_EVERY steps only (all processes ask at the same steps).
      ask = jax.process_count() == 1 or step % STOP_CHECK_EVERY == 0 or last
      if ask and _on_any_process(stop.signal_name is not None):
        batches.drain()  # stop once the batches already fetched are used (exact resume)
      stopping = ((batches.draining and batches.empty)
                  or (stop_after is not None and step >= stop_after))
      if step % config.checkpoint.every_steps == 0 or last or stopping:
        guard.check()  # never save a state that followed a non-finite step
        checkpointer.save(step, par.to_checkpoint(state), data.train_iterator,
                          config.to_dict(), eval_loss=eval_loss)
      if stopping and not last:
        checkpointer.wait()
        reason = (stop.signal_name or ("a signal to another process"
                                        if stop_after is None else f"stop_after={stop_after}"))
        log(f"Stopped at step {step} ({reason}); checkpoint saved. Run the same command to resume.")
        return None
  return final_eval
