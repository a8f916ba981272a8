"""The training loop: data, model and state, jit-compiled steps, metrics, eval, checkpoints.

`train_and_evaluate(config, workdir)` is the whole run. Running it again on the same workdir
resumes from the latest checkpoint (train state, input position and all) and, if the run had
finished, only reports its final figures. `TrainSteps` is the loop itself, one named part per
thing a step may do. A train metric is added in the step (`steps.make_train_step`'s dict) or
in a task's loss (its aux sums, `TaskBase.train_aux`), not here: the row and the log line take
whatever the step returns. The kind and the norm placement are looked up in their registries
(`transformer.kinds`, `transformer.model.placements`), never named here. Where rows go (JSON
lines, TensorBoard, wandb) is `writers.py`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Optional

import jax
from jax.experimental import multihost_utils
import numpy as np

from transformer import kinds, paths, provenance
from transformer.config import ExperimentConfig
from transformer.data.run_tokenizer import keep_tokenizer, tokenizer_record
from transformer.model import placements
from transformer.train import eval_loop
from transformer.train import baselines, diagnostics, optim, peaks
from transformer.train.checkpoint import Checkpointer
from transformer.train.health import HealthGuard, NonFiniteError
from transformer.train.parallel import Parallel, build_parallel, on_any_process
from transformer.train.prefetch import Prefetcher
from transformer.train.profiler import StepProfiler
from transformer.train.state import TrainState, count_params
from transformer.train.writers import MetricWriter, format_duration, log
from transformer.workdir import (check_data_facts, check_workdir_config, checkpoint_steps,
                                last_eval, named_tokenizer, resume_config)

# Multi-process runs agree on stopping (after a signal) every this many steps.
STOP_CHECK_EVERY = 10

# Keys of the train step's metrics that the loop reads itself and does not log as columns:
# whether the step's update was applied (`health`), and its weight (for tokens/s).
NOT_LOGGED = ("finite", "tokens")
# Columns the loop and the writer add to a train row: a step metric may not take these names.
LOOP_COLUMNS = ("step", "split", "time", "learning_rate", "tokens_per_sec", "step_time", "mfu",
                "skipped_steps", "diverged")


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
  workdir = paths.absolute(workdir)
  paths.makedirs(workdir)
  check_workdir_config(workdir, config)
  t_start = time.time()
  if task is None:  # a resume whose tokenizer file is gone reads the run's copy of it
    data, task = kinds.build_data_and_task(resume_config(config, workdir), workdir)
  config = named_tokenizer(task.config, config)  # now with the tokenizer's vocab_size
  check_data_facts(workdir, config)  # the vocabulary the checkpoints were trained with
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  par = build_parallel(config, task, optim.build_optimizer(config.optim, config.train.num_steps))
  first = None
  if jax.process_index() == 0:  # only once every check on the config has passed
    first = _record_start(config, workdir)
  checkpointer = _checkpointer(config, workdir)
  t_state = time.time()
  state, first_batch = _restore_or_init(config, par, checkpointer, data, init_rng, workdir)
  _log_model(config, par, state, time.time() - t_state)
  if jax.process_index() == 0 and kinds.get(config.model.kind).baselines:
    _record_baselines(config, data, workdir, count_params(par.params(state)))
  writer = MetricWriter(workdir, sinks=_extra_sinks(config, workdir, first))
  writer.write_hparams(config.to_dict(), trial_id=os.path.basename(workdir))
  step = int(par.to_checkpoint(state).step)
  writer.start_at(step)

  # A SIGINT / SIGTERM from here until the last checkpoint is written waits for it (it used
  # to kill a run that was writing its final checkpoint when the signal came).
  with _StopRequest() as stop:
    if step >= config.train.num_steps:
      if checkpointer.latest_step() is None:  # num_steps=0: init_from's model is checkpoint 0
        checkpointer.save(step, par.to_checkpoint(state), data.train_iterator, config.to_dict())
      final_eval = _eval_of_finished_run(task, data, par, state, step, writer)
    else:
      try:
        final_eval = TrainSteps(config, task, data, par, checkpointer, writer, dropout_rng,
                                first_batch=first_batch).run(state, stop, stop_after)
      except NonFiniteError as e:
        _end_diverged(e, checkpointer, writer)
        raise
    checkpointer.close()
    writer.close()
  _log_end(final_eval, step, workdir, t_start)
  return final_eval or {}


def _record_start(config: ExperimentConfig, workdir: str) -> dict:
  """Keeps the run's copy of its tokenizer file, records this start (`provenance`, with the
  tokenizer file's sha256) and writes config.json; returns the first start's record."""
  keep_tokenizer(config, workdir)  # the run's own copy of its tokenizer file
  steps = checkpoint_steps(paths.join(workdir, "checkpoints"))
  first = provenance.record_start(workdir, config.to_dict()["data"], sys.argv,
                                  steps[-1] if steps else None,
                                  tokenizer=tokenizer_record(config, workdir))
  paths.write_text(paths.join(workdir, "config.json"),
                   provenance.config_json(config.to_dict(), first))
  return first


def _checkpointer(config: ExperimentConfig, workdir: str) -> Checkpointer:
  return Checkpointer(paths.join(workdir, "checkpoints"), config.checkpoint.keep,
                      async_save=config.checkpoint.async_save,
                      keep_best=config.checkpoint.keep_best,
                      log_path=_local_log(workdir, "checkpoint_errors.log"))


def _local_log(workdir: str, name: str) -> str:
  """`<workdir>/<name>`; for a URL workdir, the same name in its local mirror
  (`paths.local_mirror`): stderr is redirected into this file, which takes a local file."""
  folder = paths.local_mirror(workdir)
  if folder != workdir:
    os.makedirs(folder, exist_ok=True)
  return os.path.join(folder, name)


def _restore_or_init(config: ExperimentConfig, par: Parallel, checkpointer: Checkpointer, data,
                     init_rng: jax.Array, workdir: str) -> tuple[TrainState, Optional[dict]]:
  """The latest checkpoint's state (and `data`'s input position), placed for training; or a
  fresh state from `init_rng` when there is none.

  A fresh run whose norm placement profiles at init (`placements.init_profile` says which,
  and what) has `init` run on the run's first training batch, read here before training and
  returned, so that the first step still trains on it (`TrainSteps(first_batch=...)`): the
  batches, and the iterator position saved with each checkpoint, are those of any other run.
  With several processes every one profiles on process 0's rows, so all hold the same
  profile. A resumed run restores it with the other params and reads nothing. Returns
  (state, the batch read ahead or None)."""
  latest, state = checkpointer.restore_latest(par.checkpoint_target(), data.train_iterator,
                                              warn=lambda m: log(f"WARNING: {m}"))
  if latest is None:
    profiled = placements.init_profile(config.model.norm_placement)
    if not profiled:
      return par.init_state(init_rng), None
    first = data.next_train_batch()
    profile = first
    if jax.process_count() > 1:
      profile = multihost_utils.broadcast_one_to_all(first)
    log(f"{profiled}: profiled on the first training batch.")
    return par.init_state(init_rng, profile_batch=profile), first
  log(f"Resumed from {workdir}/checkpoints at step {latest}.")
  return par.from_checkpoint(state), None


def _log_model(config: ExperimentConfig, par: Parallel, state: TrainState,
               state_s: float) -> None:
  """The model line; `state_s`: the seconds the state took (init or restore, compiled)."""
  log(f"Model: {config.model.kind}, {count_params(par.params(state)):,} parameters, "
      f"norm_placement={config.model.norm_placement}; data: {config.data.name}, "
      f"batch {config.train.batch_size} x {kinds.get(config.model.kind).row_shape(config)} "
      f"tokens; {par.describe()}; state ready in {state_s:.1f}s.")


def _record_baselines(config: ExperimentConfig, data, workdir: str, params: int) -> None:
  """`baselines.json` at a run's first start: the eval split's unigram and bigram levels and
  the run's token budget, which the study reports read (`transformer.train.baselines`)."""
  t = time.time()
  train_tokens = config.train.num_steps * config.train.batch_size * config.data.seq_len
  split = config.data.eval_split
  if jax.process_count() > 1:  # each process reads its own shard of the split
    split += f" (process 0's shard of {jax.process_count()})"
  written = baselines.record(workdir, data, split,
                             train_tokens=train_tokens, params=params)
  if written:
    log(f"Baselines of the eval split ({written['scored_tokens']:,} tokens, "
        f"{time.time() - t:.1f}s): unigram {written['unigram_nats']:.4f}, bigram "
        f"{written['bigram_nats']:.4f} nats/token; {train_tokens:,} training tokens, "
        f"{written['tokens_per_param']:.2f} per parameter.")


def _eval_of_finished_run(task, data, par: Parallel, state: TrainState, step: int,
                          writer: MetricWriter) -> dict:
  """The final eval row the run left (computed and written if it left none)."""
  final_eval = last_eval(writer.workdir)
  if final_eval is None:
    final_eval = eval_loop.evaluate(task, data, par.eval_step, state, 0,
                                     eval_loop.outputs_step(task, par))
    writer.write(step, "eval", final_eval)
  log(f"The run in {writer.workdir} is already at step {step} of "
      f"{task.config.train.num_steps}; nothing to train.")
  return final_eval


def _extra_sinks(config, workdir: str, first) -> list:
  """Metric sinks beside TensorBoard: wandb when train.wandb_project is set (process 0)."""
  if not config.train.wandb_project or jax.process_index() != 0:
    return []
  from transformer.train.wandb_writer import WandbSink  # optional package
  return [WandbSink(workdir, config.to_dict(), first)]


def _end_diverged(e: NonFiniteError, checkpointer: Checkpointer, writer: MetricWriter) -> None:
  """The metrics say how the run ended (reports mark it diverged; sweeps do not rerun it);
  the good checkpoints finish writing, and the error says where the last one is."""
  writer.write(e.step, "train", dict(train_means([e.metrics]), diverged=1))
  checkpointer.close()
  writer.close()
  last = checkpointer.latest_step()
  e.last_checkpoint = None if last is None else f"{checkpointer.directory}/{last}"


def _log_end(final_eval: Optional[dict], step: int, workdir: str, t_start: float) -> None:
  if final_eval is not None:
    final_eval = {k: v for k, v in final_eval.items() if k not in ("tokens", "examples")}
    log(f"Final eval at step {final_eval.get('step', step)}: "
        f"{eval_loop.format_eval(final_eval)} ({time.time() - t_start:.0f}s in this process).")
  log(f"Workdir: {workdir} (config.json, checkpoints/, metrics.jsonl, tensorboard/)")


def train_means(metrics: list[dict]) -> dict:
  """The train row's columns from the step metrics of its steps (one dict of host scalars per
  step, keyed as `steps.make_train_step`'s): every key but `NOT_LOGGED`, in the step's order,
  averaged over the steps. A metric the step adds is a column here, with nothing to change."""
  taken = [k for k in metrics[0] if k in LOOP_COLUMNS]
  if taken:
    raise ValueError(f"The train step returns metrics named {taken}, which the loop writes "
                     f"itself ({', '.join(LOOP_COLUMNS)}); rename them in the step.")
  return {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0] if k not in NOT_LOGGED}


# The log line's known columns, first and in this order: (row key, label, format); every other
# column of the row follows in the row's order (`train_means`: the step's order), then the
# throughput the line says in its own words (`OWN_WORDS`).
LOG_FIRST = (("loss", "loss", ".4f"), ("learning_rate", "lr", ".2e"),
             ("grad_norm", "grad_norm", ".3f"))
OWN_WORDS = ("tokens_per_sec", "step_time", "mfu", "skipped_steps")


def format_train_row(step: int, num_steps: int, row: dict, skipped: int = 0) -> str:
  """The log line of a train row: `step`, the `LOG_FIRST` columns, every other column (a
  metric a step or a task's aux sums add: `name value`, 4 significant digits), then tokens/s,
  ms/step, MFU, the skipped steps (when any) and the ETA (for a row whose steps were timed)."""
  first = [f"{label} {row[key]:{spec}}" for key, label, spec in LOG_FIRST if key in row]
  known = {key for key, _, _ in LOG_FIRST} | set(OWN_WORDS)
  rest = [f"{k} {v:.4g}" for k, v in row.items() if k not in known]
  timed = "tokens_per_sec" in row
  parts = [f"step {step:>6}/{num_steps}"] + first + rest + (
      [f"{row['tokens_per_sec']:,.0f} tok/s", f"{row['step_time'] * 1e3:,.0f} ms/step"]
      if timed else ["compiling step, not timed"])
  parts += [f"MFU {row['mfu']:.1%}"] if "mfu" in row else []
  parts += [f"skipped {skipped}"] if skipped else []
  parts += [f"ETA {format_duration(row['step_time'] * (num_steps - step))}"] if timed else []
  return " | ".join(parts)


class TrainSteps:
  """The steps from a state's step to `train.num_steps` (or `stop_after`, or a stop signal).

  A step is, in order: `diagnostics` (every `train.diagnostics_every` steps, on the state
  before the step), `_step` (the compiled step, health record, profiler), `_maybe_log` (the
  periodic train row), `_maybe_eval` (eval row and samples), `_stopping` (a signal to any
  process, or `stop_after`), `_maybe_save` (checkpoint schedule).
  """

  def __init__(self, config: ExperimentConfig, task, data, par: Parallel,
               checkpointer: Checkpointer, writer: MetricWriter, dropout_rng: jax.Array,
               first_batch: Optional[dict] = None):
    """`first_batch`: the batch of the first step, already read from `data` (a placement's
    init profile, `_restore_or_init`); the later ones are read as usual."""
    self.config, self.task, self.data, self.par = config, task, data, par
    self._first_batch = first_batch
    self.checkpointer, self.writer = checkpointer, writer
    self.dropout_rng = par.place_replicated(dropout_rng)  # not copied again at every step
    self.num_steps = config.train.num_steps
    self.outputs_step = eval_loop.outputs_step(task, par)
    self.guard = HealthGuard(config.train.nonfinite, log=log)  # checks where the loop syncs
    self.throughput = _ThroughputLog(
        config, par, optim.learning_rate_schedule(config.optim, self.num_steps), self.guard,
        writer)
    self.diagnostics = diagnostics.maybe_recorder(config, task, par)  # None unless asked
    self.samples = eval_loop.SampleWriter.maybe(config, task, data, par, log)
    self._compiled = self._diagnosed = False

  def run(self, state: TrainState, stop: _StopRequest,
          stop_after: Optional[int] = None) -> Optional[dict]:
    """Trains on; returns the final eval, or None when it stopped before the last step (on a
    signal `stop` caught, or at `stop_after`)."""
    step = int(self.par.to_checkpoint(state).step)
    final_eval = None
    batches = Prefetcher(self._next_batch, self.par.place_batch,
                         self.config.train.prefetch, step,
                         lambda s: self._saves_after(s, stop_after))
    with StepProfiler(self.config.train.profile_range, self.writer.workdir) as prof:
      while step < self.num_steps:
        batch = next(batches)
        if self.diagnostics is not None:  # statistics of the state before this step
          batch = self.par.place_batch(batch)  # copied once, for the diagnostics and the step
          self._diagnose(step, state, batch)
        state, step = self._step(state, batch, step, prof)
        last = step == self.num_steps
        self._maybe_log(step, last)
        metrics = self._maybe_eval(state, step, last)
        final_eval = metrics or final_eval
        stopping = self._stopping(step, last, stop, batches, stop_after)
        self._maybe_save(state, step, last or stopping, metrics)
        if stopping and not last:
          self._log_stop(step, stop, stop_after)
          return None
    return final_eval

  def _diagnose(self, step: int, state: TrainState, batch: dict) -> None:
    """The diagnostics row of `step`, if due; the first one (with compilation) is timed, to
    tell whether it holds the minutes before step 0 on a GPU shared by 8 runs."""
    t0 = time.time()
    if self.diagnostics.maybe_record(step, state, batch, self.dropout_rng, self.writer):
      if not self._diagnosed:
        log(f"First diagnostics (with compilation) took {time.time() - t0:.1f}s.")
      self._diagnosed = True

  def _next_batch(self) -> dict:
    """The next training batch: `first_batch` once, if one was read ahead, then `data`'s."""
    if self._first_batch is not None:
      batch, self._first_batch = self._first_batch, None
      return batch
    return self.data.next_train_batch()

  def _saves_after(self, step: int, stop_after: Optional[int]) -> bool:
    """Whether a checkpoint may be written after `step` (the prefetcher waits there)."""
    return (step % self.config.checkpoint.every_steps == 0 or step >= self.num_steps
            or (stop_after is not None and step >= stop_after))

  def _step(self, state: TrainState, batch: dict, step: int, prof: StepProfiler
            ) -> tuple[TrainState, int]:
    """The compiled train step; the first one (with compilation) is timed apart."""
    t0 = time.time()
    prof.before_step(step + 1)
    state, metrics = self.par.train_step(state, batch, self.dropout_rng)
    step += 1
    self.guard.record(step, metrics)
    prof.after_step(step, (state, metrics))
    if not self._compiled:  # keep compilation out of the throughput figures
      jax.block_until_ready(state)
      log(f"First step (with compilation) took {time.time() - t0:.1f}s.")
      self._compiled = True
      self.throughput.restart()
      self.throughput.add(metrics, timed=False)  # in the loss means, not in tokens/s
    else:
      self.throughput.add(metrics)
    return state, step

  def _maybe_log(self, step: int, last: bool) -> None:
    if (step % self.config.train.log_every == 0 or last) and self.throughput.pending:
      self.guard.check()
      self.throughput.write(step, self.num_steps)

  def _maybe_eval(self, state: TrainState, step: int, last: bool) -> Optional[dict]:
    """The eval at `step` (the final one sees the whole eval split), written and logged, with
    samples for generative kinds; its metrics (with `step`), or None when none is due."""
    if not (step % self.config.train.eval_every == 0 or last):
      return None
    self.guard.check()
    t0 = time.time()
    max_batches = 0 if last else self.config.data.eval_batches
    metrics = dict(eval_loop.evaluate(self.task, self.data, self.par.eval_step, state,
                                       max_batches, self.outputs_step), step=step)
    self.writer.write(step, "eval", {k: v for k, v in metrics.items() if k != "step"})
    log(f"eval at step {step}: {eval_loop.format_eval(metrics)} ({time.time() - t0:.1f}s)")
    if self.samples is not None:
      self.samples.write(state, self.writer, step)
    self.throughput.leave_out(time.time() - t0)
    return metrics

  def _stopping(self, step: int, last: bool, stop: _StopRequest, batches: Prefetcher,
                stop_after: Optional[int]) -> bool:
    """Whether to stop after `step`: the batches fetched before a signal (to any process)
    are used up, or `stop_after` is reached."""
    # Agreeing on a stop is a collective that waits for every process: in a multi-process
    # run, ask every STOP_CHECK_EVERY steps only (all processes ask at the same steps).
    ask = jax.process_count() == 1 or step % STOP_CHECK_EVERY == 0 or last
    if ask and on_any_process(stop.signal_name is not None):
      batches.drain()  # stop once the batches already fetched are used (exact resume)
    return ((batches.draining and batches.empty)
            or (stop_after is not None and step >= stop_after))

  def _maybe_save(self, state: TrainState, step: int, now: bool,
                  eval_metrics: Optional[dict]) -> None:
    if step % self.config.checkpoint.every_steps == 0 or now:
      self.guard.check()  # never save a state that followed a non-finite step
      self.checkpointer.save(step, self.par.to_checkpoint(state), self.data.train_iterator,
                             self.config.to_dict(),
                             eval_loss=None if eval_metrics is None else eval_metrics["loss"])

  def _log_stop(self, step: int, stop: _StopRequest, stop_after: Optional[int]) -> None:
    self.checkpointer.wait()
    reason = (stop.signal_name or ("a signal to another process"
                                    if stop_after is None else f"stop_after={stop_after}"))
    log(f"Stopped at step {step} ({reason}); checkpoint saved. Run the same command to resume.")


class _ThroughputLog:
  """The periodic `train` row and log line: the means of the step's metrics (`train_means`:
  loss, gradient norm, ...) over the steps since the last row, the learning rate at its last
  step, tokens/s and ms/step with compilation and eval time left out, and MFU.

  A process's first step (it compiles) counts in the loss and gradient-norm means but not in
  the throughput, so a run resumed at a row boundary writes the rows of an uninterrupted one
  (times aside); a row whose steps were all untimed (`log_every=1`, right after a start) has
  no throughput fields."""

  def __init__(self, config, par, schedule, guard: HealthGuard, writer):
    self._config, self._par, self._schedule = config, par, schedule
    self._guard, self._writer = guard, writer
    self._step_flops = kinds.experiment_flops_per_step(config)
    self._peak, self._peak_source = peaks.peak_flops_per_device(
        config.train.peak_flops_per_device, config.model.dtype)
    # A measured CPU peak below the achieved rate is measured again, once per run.
    self._remeasure = peaks.peak_is_measured(config.train.peak_flops_per_device)
    if self._peak:
      log(f"MFU: {self._step_flops / 1e9:,.4g} GFLOPs per step (MaxText convention) against "
          f"{self._peak * par.num_devices / 1e12:,.3f} TFLOP/s peak ({self._peak_source}).")
    self.pending, self._start, self._steps, self._timed = [], time.time(), 0, []

  def add(self, metrics, timed: bool = True) -> None:
    """One step's metrics; `timed=False` for a step whose time is not its own (compiling)."""
    self.pending.append(metrics)
    self._timed.append(timed)
    self._steps += timed

  def restart(self) -> None:
    """The interval starts now (after compilation)."""
    self._start = time.time()

  def leave_out(self, seconds: float) -> None:
    """`seconds` spent on something else (an eval) do not count in tokens/s."""
    self._start += seconds

  def _add_mfu(self, row: dict, step_time: float) -> None:
    """Puts the MFU of a `step_time`-second step in `row` (`peaks.checked_mfu`: never above
    100%). A peak below the achieved rate, even measured again, warns once, and MFU is left
    out of this and every later row (a false figure is worse than none)."""
    achieved = self._step_flops / max(step_time, 1e-9) / self._par.num_devices
    check = peaks.checked_mfu(achieved, self._peak, self._peak_source, self._remeasure)
    if achieved > self._peak:
      self._remeasure = False  # measured again (if at all) once per run
    if check.mfu is None:
      log(f"WARNING: MFU n/a: {check.problem}. MFU is not reported from here on.")
      self._peak = None
      return
    if check.peak != self._peak:
      total = check.peak * self._par.num_devices
      log(f"MFU: the CPU peak, measured again, is now {total / 1e12:,.3f} TFLOP/s "
          f"({check.source}).")
    self._peak, self._peak_source = check.peak, check.source
    row["mfu"] = check.mfu

  def write(self, step: int, num_steps: int) -> None:
    fetched = jax.device_get(self.pending)
    elapsed = time.time() - self._start
    tokens = float(sum(m["tokens"] for m, t in zip(fetched, self._timed) if t))
    step_time = elapsed / max(self._steps, 1)
    applied = [m for m in fetched if m["finite"]] or fetched  # skipped steps: not in means
    with jax.transfer_guard_host_to_device("allow"):  # the step number, on purpose
      learning_rate = float(self._schedule(step - 1))
    row = dict(train_means(applied), learning_rate=learning_rate)
    if self._steps:
      row.update(tokens_per_sec=tokens / max(elapsed, 1e-9), step_time=step_time)
    if self._peak and self._steps:
      self._add_mfu(row, step_time)
    skipped = self._guard.skipped
    if self._guard.mode == "skip":
      row["skipped_steps"] = skipped
    self._writer.write(step, "train", row)
    log(format_train_row(step, num_steps, row, skipped))
    self.pending, self._start, self._steps, self._timed = [], time.time(), 0, []
