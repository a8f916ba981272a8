"""Run a sweep's points on this machine: one `launch.py` process per point, N at a time.

Each point trains in its own workdir (`<sweep_dir>/<point name>`), logging to `log.txt` there,
so a rerun skips finished points and resumes the others exactly. A point whose workdir another
live process holds (its lock, see transformer/workdir_lock.py: the same sweep run twice, or a
SLURM job on it) is skipped with a line naming the holder. A failing point does not stop the
rest. SIGINT / SIGTERM to the runner is passed on once to every running child (each saves a
checkpoint and exits) and the runner waits for them; a second one is passed on too (children
then stop at once). Children die with the runner (PR_SET_PDEATHSIG), so none is orphaned.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

from transformer import paths, workdir_lock
from transformer.train.writers import format_duration

STOP_GRACE_S = 300  # after a stop request, children get this long to save before a SIGKILL


@dataclasses.dataclass
class Job:
  """One point to run: its name, workdir and command."""
  name: str
  workdir: str
  command: list[str]
  finished: Callable[[], bool]
  process: Optional[subprocess.Popen] = None
  started: float = 0.0
  log_path: str = ""
  returncode: Optional[int] = None


def visible_gpus(env: Optional[dict] = None) -> list[str]:
  """GPU ids this machine offers: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`'s count.
  (The runner must not import JAX: that would take the accelerator from its children.)"""
  env = os.environ if env is None else env
  if env.get("CUDA_VISIBLE_DEVICES", "").strip():
    return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
  if shutil.which("nvidia-smi") is None:
    return []
  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return []
  return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def cpu_thread_env(env: dict, parallel: int, cpus: Optional[int] = None) -> dict:
  """On a CPU-only host running `parallel` points at once, each child gets its share of the
  cores (XLA's intra-op thread pool), unless XLA_FLAGS already sets it, so N points do not
  oversubscribe the machine. Measured on 2 shared cores, 6-layer d_model=64 LM, 16 x 128
  tokens: alone, 190 ms/step with 2 threads and 197 with 1; two points at once with 1 thread
  each, about 360 ms/step each (5% more steps per second in all than one point at a time)."""
  flags = env.get("XLA_FLAGS", "")
  if parallel <= 1 or "intra_op_parallelism_threads" in flags:
    return env
  threads = max(1, (cpus or os.cpu_count() or 1) // parallel)
  extra = f"intra_op_parallelism_threads={threads}"
  if threads == 1:
    extra = "--xla_cpu_multi_thread_eigen=false " + extra
  return {**env, "XLA_FLAGS": f"{flags} {extra}".strip()}


def _die_with_parent() -> None:
  """In the child, before exec: get SIGTERM (save and exit) if the runner dies."""
  try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except OSError:
    pass


class _Stop:
  """Counts SIGINT / SIGTERM received by the runner while it runs."""

  def __init__(self):
    self.count = 0
    self.new = False

  def __enter__(self):
    self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
    return self

  def _handle(self, signum, frame):
    self.count += 1
    self.new = True
    print(f"\n[sweep] {signal.Signals(signum).name}: stopping every running point (each saves "
          "a checkpoint); run the same command again to resume.", flush=True)

  def __exit__(self, *exc):
    for s, h in self._previous.items():
      signal.signal(s, h)


def run_jobs(jobs: Sequence[Job], parallel: int, gpus: Sequence[str] = (),
             poll_s: float = 0.5, progress_every_s: float = 30.0,
             print_fn=print) -> dict[str, list[Job]]:
  """Runs the unfinished `jobs`, `parallel` at a time; returns them by outcome:
  `finished` (this time or before), `failed` (non-zero exit, or exit 0 without the final
  eval), `stopped` (interrupted by a signal), `not_started`, and `in_use` (skipped: another
  live process holds the point's workdir)."""
  if parallel < 1:
    raise ValueError(f"--parallel={parallel} must be >= 1.")
  outcome = {"finished": [], "failed": [], "stopped": [], "not_started": [], "in_use": []}
  todo = _skip_finished(jobs, outcome["finished"], print_fn)
  if gpus and parallel > len(gpus):
    print_fn(f"[sweep] {parallel} points at a time on {len(gpus)} GPU(s): points share GPUs.")
  pool = _Pool(todo, outcome, parallel, gpus, progress_every_s, print_fn)
  with _Stop() as stop:
    while pool.todo or pool.running:
      pool.step(stop)
      time.sleep(poll_s)
  return outcome


def _skip_finished(jobs: Sequence[Job], finished: list[Job], print_fn) -> list[Job]:
  """Appends the jobs finished before to `finished`; returns the others, in order."""
  todo = []
  for job in jobs:
    (finished if job.finished() else todo).append(job)
  if finished:
    print_fn(f"[sweep] {len(finished)} of {len(jobs)} points already finished; skipping them.")
  return todo


class _Pool:
  """The jobs of one `run_jobs` call while it runs: waiting (`todo`), `running` (each in one
  of `parallel` slots; slot i gets GPU i mod len(gpus)), and done (`outcome`)."""

  def __init__(self, todo: list[Job], outcome: dict[str, list[Job]], parallel: int,
               gpus: Sequence[str], progress_every_s: float, print_fn):
    self.todo = todo
    self.outcome = outcome
    self.parallel = parallel
    self.gpus = gpus
    self.progress_every_s = progress_every_s
    self.print_fn = print_fn
    self.running: list[Job] = []
    self.free_slots = list(range(parallel))
    self.slot_of: dict[str, int] = {}
    self.durations: list[float] = []
    self.last_progress = 0.0
    self.stop_deadline: Optional[float] = None

  def step(self, stop: _Stop) -> None:
    """One poll: pass on a new stop request, start what fits, collect what ended."""
    if stop.new:
      self._pass_on(stop)
    while self.todo and self.free_slots and not stop.count:
      self._start_next()
    for job in list(self.running):
      rc = job.process.poll()
      if rc is not None:
        self._collect(job, rc, stop)
    self._kill_overdue()
    self.progress()

  def _pass_on(self, stop: _Stop) -> None:
    """Passes each signal on once to every running child; starts nothing more."""
    stop.new = False
    sig = signal.SIGINT if stop.count == 1 else signal.SIGTERM
    for j in self.running:
      _signal(j, sig)
    self.stop_deadline = time.time() + STOP_GRACE_S
    self.outcome["not_started"] += self.todo
    self.todo = []

  def _start_next(self) -> None:
    """Starts the next job in a free slot, unless another process holds its workdir."""
    job = self.todo.pop(0)
    if os.path.islink(job.workdir):  # a link to another run (--reuse_runs_from) not finished
      self.outcome["failed"].append(job)
      self.print_fn(f"[sweep] FAILED {job.name}: its workdir links to "
                    f"{os.readlink(job.workdir)}, which holds no finished run from here; "
                    f"restore that run, or delete the link ({job.workdir}) to run the point.")
      return
    holder = workdir_lock.live_holder(job.workdir)
    if holder is not None:  # checked just before starting: nothing is written to its workdir
      self.outcome["in_use"].append(job)
      self.print_fn(f"[sweep] skipping {job.name}: in use by {holder.describe()}")
      return
    slot = self.free_slots.pop(0)
    env = self._child_env(slot)
    _start(job, env)
    self.slot_of[job.name] = slot
    self.running.append(job)
    gpu = f" (GPU {env['CUDA_VISIBLE_DEVICES']})" if self.gpus else ""
    self.print_fn(f"[sweep] start {job.name}{gpu}; log: {job.log_path}")
    self.progress(force=True)

  def _child_env(self, slot: int) -> dict:
    env = dict(os.environ)
    if not self.gpus:
      return cpu_thread_env(env, self.parallel)
    env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
    if self.parallel > len(self.gpus):
      env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env

  def _collect(self, job: Job, rc: int, stop: _Stop) -> None:
    """Files an ended job under finished, stopped or failed, and frees its slot."""
    job.returncode = rc
    self.running.remove(job)
    self.free_slots.append(self.slot_of.pop(job.name))
    if job.finished():
      self.outcome["finished"].append(job)
      self.durations.append(time.time() - job.started)
      self.print_fn(f"[sweep] finished {job.name} in "
                    f"{format_duration(time.time() - job.started)}")
    elif stop.count:
      self.outcome["stopped"].append(job)
      self.print_fn(f"[sweep] stopped {job.name} (exit {rc}); it resumes on the next run")
    else:
      self.outcome["failed"].append(job)
      self.print_fn(f"[sweep] FAILED {job.name} (exit {rc}); log: {job.log_path}")
    self.progress(force=True)

  def _kill_overdue(self) -> None:
    """After a stop request, kills the children still running when the grace time is up."""
    if self.stop_deadline is None or not self.running or time.time() <= self.stop_deadline:
      return
    for j in self.running:
      self.print_fn(f"[sweep] {j.name} did not stop within {STOP_GRACE_S}s; killing it.")
      j.process.kill()
    self.stop_deadline = time.time() + 60

  def progress(self, force: bool = False) -> None:
    """Prints the counts (and an ETA), at most every `progress_every_s` unless `force`."""
    now = time.time()
    if not force and now - self.last_progress < self.progress_every_s:
      return
    self.last_progress = now
    left = len(self.todo) + len(self.outcome["not_started"])
    print_fn, outcome = self.print_fn, self.outcome
    print_fn(f"[sweep] done {len(outcome['finished'])} | running {len(self.running)} | failed "
             f"{len(outcome['failed'])} | left {left}{self._eta(now)}")

  def _eta(self, now: float) -> str:
    """` | ETA 1m05s` from the mean duration of the finished points; '' once stopping."""
    if not self.durations or not (self.todo or self.running) or self.stop_deadline is not None:
      return ""
    mean = sum(self.durations) / len(self.durations)
    remaining = (sum(max(mean - (now - j.started), 0) for j in self.running)
                 + len(self.todo) * mean)
    width = min(self.parallel, len(self.todo) + len(self.running))
    return f" | ETA {format_duration(remaining / width)}"


def _start(job: Job, env: dict) -> None:
  log_dir = paths.local_mirror(job.workdir)  # the child's stdout: a local file
  os.makedirs(log_dir, exist_ok=True)
  job.log_path = os.path.join(log_dir, "log.txt")
  log = open(job.log_path, "a")
  log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(job.command)}\n")
  log.flush()
  # A session of its own: a Ctrl-C in the terminal reaches only the runner, which passes it on
  # exactly once (a second SIGINT would make the child stop without saving).
  job.process = subprocess.Popen(job.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True,
                                 preexec_fn=_die_with_parent if sys.platform == "linux" else None)
  log.close()  # the child holds its own descriptor
  job.started = time.time()


def _signal(job: Job, sig) -> None:
  try:
    job.process.send_signal(sig)
  except ProcessLookupError:
    pass
