"""One run per workdir: an exclusive lock file, `<workdir>/.lock`, taken before anything is
written there and removed when the run ends.

Two training processes on one workdir (a rerun while the first still runs, a requeued SLURM job
beside its old self) would both train and then clash at their first checkpoint save, losing
the first run's work. So `launch.py --mode=train` takes this lock (on process 0 of a
multi-process run; see `transformer/cli/preflight.py`) and a second run stops at once with one
line naming the holder, having changed nothing in the workdir.

Which modes lock: `train` (which also resumes). `eval`, `sample` and `diagnose` only read the
run's checkpoints and write files of their own (`eval/*.json`, appended `samples.txt`,
`diagnose.json`), so they run beside a training run without the lock; `bench` and
`data_bench` write nothing there but a profile trace, and `prepare` writes `--prepare_dir`,
not a workdir. `sweep` checks each point's lock before starting it (`live_holder`), and every
point's own `launch.py` takes it.

The lock file holds JSON: host, pid, since (ISO time), the command line, and what identifies
the process beyond its pid (the boot id and the process's start time from /proc, the SLURM job
id and restart count). While held, a daemon thread touches the file every `HEARTBEAT_S`
seconds. A lock is stale, and the next run takes it over with a line on stderr, when:
- its holder ran on this host and that pid no longer runs, or now belongs to another process
  (a different start time), or the host has rebooted since (another boot id);
- its holder was an earlier run of this SLURM job (same job id, a lower SLURM_RESTART_COUNT):
  SLURM requeues a job only once its previous run has ended;
- otherwise (another host), its file has not been touched for `STALE_AFTER_S` seconds. A
  clock skew between hosts shortens or lengthens that; minutes of skew are within the margin.

Creating the lock is atomic on POSIX file systems and NFS v3+: the JSON is written to a file
of a unique name, then hard-linked to `.lock`, which fails if `.lock` exists (`link` is the
classic NFS-safe exclusive create, and readers never see a half-written lock). Where hard links
are not supported, `open(O_CREAT | O_EXCL)` is used instead.

Taking over a stale lock is guarded so that two takers cannot both win: a taker must first
create `.lock.takeover` exclusively (the same way); holding it, it re-reads the lock, checks it
is still the same stale one, removes it and creates its own. A second taker finds the guard,
waits for it to go, and then sees the first taker's live lock. A plain starter (no stale lock
seen) only ever creates `.lock` exclusively, so at most one of it and a taker wins. A guard
older than `GUARD_STALE_S` was left by a taker that died in those few milliseconds; it is
removed. The one window left: a holder that was frozen past `STALE_AFTER_S` (so its lock was
taken over) notices at its next heartbeat and says so on stderr, but its run goes on; it never
removes a lock that is no longer its own.

Remote workdirs (a path with a scheme, `gs://...`) get no lock: object stores have no
exclusive create that `etils.epath` exposes (GCS's generation preconditions would do, but not
portably), so there one run per workdir is the scheduler's job (the SLURM launcher starts each
point once). `acquire` says so in one line and returns a lock that holds nothing.

This module imports no JAX: the sweep runner uses it.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Callable, Optional

from transformer.errors import RunError

LOCK_NAME = ".lock"
GUARD_SUFFIX = ".takeover"
HEARTBEAT_S = 60.0  # how often the holder touches its lock file
STALE_AFTER_S = 600.0  # another host's lock not touched for this long is abandoned
GUARD_STALE_S = 60.0  # a takeover guard this old was left by a taker that died
GUARD_WAIT_S = 10.0  # how long to wait for another process's takeover to finish

Log = Callable[[str], None]


class WorkdirInUse(RunError):
  """Another live process holds the workdir's lock; the message names it."""


def _stderr(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def is_remote(workdir: str) -> bool:
  """A workdir with a scheme (`gs://bucket/run`): not locked, see the module docstring."""
  return "://" in workdir


def lock_path(workdir: str) -> str:
  return os.path.join(workdir, LOCK_NAME)


# --- who holds it -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Holder:
  """What a lock file says about its holder, and how long ago it was last touched."""
  host: str
  pid: int
  since: str
  command: str
  token: str
  boot_id: str = ""
  start_ticks: Optional[int] = None
  slurm_job: str = ""
  slurm_restart: int = 0
  heartbeat_age: float = 0.0  # seconds since the file's mtime
  raw: str = ""  # the file's text, to tell whether it changed

  def describe(self) -> str:
    return f"pid {self.pid} on host {self.host} since {self.since}"


def _boot_id() -> str:
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      return f.read().strip()
  except OSError:
    return ""


def _start_ticks(pid: int) -> Optional[int]:
  """When `pid` started (clock ticks since boot, /proc/<pid>/stat field 22); None if unknown."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return int(f.read().rpartition(")")[2].split()[19])
  except (OSError, ValueError, IndexError):
    return None


def _slurm() -> tuple[str, int]:
  env = os.environ
  try:
    restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
  except ValueError:
    restart = 0
  return env.get("SLURM_JOB_ID", ""), restart


def _my_record() -> dict:
  job, restart = _slurm()
  return {"host": socket.gethostname(), "pid": os.getpid(),
          "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
          "command": " ".join(sys.argv), "token": uuid.uuid4().hex, "boot_id": _boot_id(),
          "start_ticks": _start_ticks(os.getpid()), "slurm_job": job, "slurm_restart": restart}


def read_holder(workdir: str, now: Optional[float] = None) -> Optional[Holder]:
  """The holder named by `<workdir>/.lock`, or None when there is no lock. A file that is not
  a lock record (emptied, or written by hand) reads as an unknown holder on an unknown host,
  stale once its mtime is `STALE_AFTER_S` old."""
  path = lock_path(workdir)
  try:
    with open(path, "rb") as f:  # bytes that are not UTF-8 make a record that does not parse
      raw = f.read().decode("utf-8", errors="replace")
    mtime = os.stat(path).st_mtime
  except FileNotFoundError:
    return None
  age = max(0.0, (time.time() if now is None else now) - mtime)
  try:
    d = json.loads(raw)
    return Holder(host=str(d["host"]), pid=int(d["pid"]), since=str(d["since"]),
                  command=str(d.get("command", "")), token=str(d.get("token", "")),
                  boot_id=str(d.get("boot_id", "")),
                  start_ticks=None if d.get("start_ticks") is None else int(d["start_ticks"]),
                  slurm_job=str(d.get("slurm_job", "")),
                  slurm_restart=int(d.get("slurm_restart", 0)), heartbeat_age=age, raw=raw)
  except (ValueError, KeyError, TypeError):
    since = datetime.datetime.fromtimestamp(mtime).astimezone().isoformat(timespec="seconds")
    return Holder(host="(unknown: the lock file is not a lock record)", pid=0, since=since,
                  command="", token="", heartbeat_age=age, raw=raw)


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  return True


def stale_reason(holder: Holder, stale_after: float = STALE_AFTER_S) -> Optional[str]:
  """Why `holder`'s lock may be taken over, or None while its holder may still run."""
  job, restart = _slurm()
  if job and holder.slurm_job == job and holder.slurm_restart < restart:
    return (f"it was taken by run {holder.slurm_restart} of SLURM job {job}, which SLURM "
            f"requeued (this is run {restart})")
  if holder.host == socket.gethostname() and holder.pid > 0:
    if holder.boot_id and holder.boot_id != _boot_id():
      return "this host has rebooted since"
    if not _pid_alive(holder.pid):
      return f"pid {holder.pid} no longer runs on this host"
    ticks = _start_ticks(holder.pid)
    if holder.start_ticks is not None and ticks is not None and ticks != holder.start_ticks:
      return f"pid {holder.pid} now belongs to another process"
    return None
  if holder.heartbeat_age > stale_after:
    return (f"its holder has not refreshed it for {holder.heartbeat_age / 60:.0f} min "
            f"(abandoned after {stale_after / 60:.0f} min)")
  return None


def live_holder(workdir: str, stale_after: float = STALE_AFTER_S) -> Optional[Holder]:
  """The holder of `workdir`'s lock if it may still be running; None when the workdir is free
  (no lock, a stale one, or a remote workdir)."""
  if is_remote(workdir):
    return None
  holder = read_holder(workdir)
  if holder is None or stale_reason(holder, stale_after) is not None:
    return None
  return holder


def in_use_message(workdir: str, holder: Holder, stale_after: float = STALE_AFTER_S) -> str:
  """The one line a refused run prints (after "Error: ")."""
  return (f"workdir {workdir} is in use by {holder.describe()} (lock {lock_path(workdir)}, "
          f"touched {holder.heartbeat_age:.0f}s ago); wait for it to finish, or if that process "
          "is gone on another host, delete the lock file (it counts as abandoned "
          f"{stale_after / 60:.0f} min after its last touch).")


# --- taking it --------------------------------------------------------------------------------

def _create(path: str, text: str) -> bool:
  """Creates `path` holding `text` if it does not exist, atomically; False if it exists."""
  tmp = f"{path}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
  with open(tmp, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  try:
    os.link(tmp, path)
    return True
  except FileExistsError:
    return False
  except OSError as e:  # no hard links on this file system
    if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
      raise
    return _create_excl(path, text)
  finally:
    os.remove(tmp)


def _create_excl(path: str, text: str) -> bool:
  try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
  except FileExistsError:
    return False
  with os.fdopen(fd, "w") as f:
    f.write(text)
  return True


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


def _take_over(workdir: str, stale: Holder, text: str, reason: str, log: Log) -> bool:
  """Replaces the stale lock of `stale` by ours (`text`) under the takeover guard; False when
  another process got in first (the caller looks again)."""
  path = lock_path(workdir)
  guard = path + GUARD_SUFFIX
  if not _create(guard, text):
    _wait_for_guard(guard)
    return False
  try:
    current = read_holder(workdir)
    if current is None or current.raw != stale.raw:  # released or replaced meanwhile
      return False
    _remove(path)
    log(f"Taking over the lock of workdir {workdir} from {stale.describe()}: {reason}.")
    return _create(path, text)
  finally:
    _remove(guard)


def _wait_for_guard(guard: str) -> None:
  """Waits until another taker's guard is gone (removing it if its taker died)."""
  deadline = time.time() + GUARD_WAIT_S
  while time.time() < deadline:
    try:
      if time.time() - os.stat(guard).st_mtime > GUARD_STALE_S:
        _remove(guard)
        return
    except FileNotFoundError:
      return
    time.sleep(0.05)


def acquire(workdir: str, *, log: Log = _stderr, stale_after: float = STALE_AFTER_S,
            heartbeat_s: float = HEARTBEAT_S) -> "WorkdirLock":
  """Takes `<workdir>/.lock` (the directory must exist), taking over a stale one; raises
  `WorkdirInUse` naming the holder when a live process has it, having written nothing.

  Use the result as a context manager, or call `release()`.
  """
  if is_remote(workdir):
    log(f"Note: remote workdir {workdir} is not locked (an object store has no exclusive "
        "create); make sure no other run uses it.")
    return WorkdirLock(None, "", heartbeat_s, log)
  record = _my_record()
  text = json.dumps(record, indent=1) + "\n"
  path = lock_path(workdir)
  for _ in range(5):  # each round lost to another process looks again
    holder = read_holder(workdir)
    if holder is None:
      if _create(path, text):
        return WorkdirLock(path, record["token"], heartbeat_s, log)
      continue
    reason = stale_reason(holder, stale_after)
    if reason is None:
      raise WorkdirInUse(in_use_message(workdir, holder, stale_after))
    if _take_over(workdir, holder, text, reason, log):
      return WorkdirLock(path, record["token"], heartbeat_s, log)
  raise WorkdirInUse(_contended_message(workdir, stale_after))


def _contended_message(workdir: str, stale_after: float) -> str:
  """Why `acquire` gave up after losing every round to other processes."""
  path = lock_path(workdir)
  holder = read_holder(workdir)
  if holder is None:
    return (f"workdir {workdir}: other processes keep taking and releasing its lock ({path}); "
            "start this run again once only one is left.")
  if stale_reason(holder, stale_after) is None:
    return in_use_message(workdir, holder, stale_after)
  return (f"workdir {workdir}: its lock ({path}, left by {holder.describe()}) is stale, but "
          f"another process is taking it over ({path}{GUARD_SUFFIX}); if none is, delete "
          f"{path}{GUARD_SUFFIX}.")


class WorkdirLock:
  """A held workdir lock: touched every `heartbeat_s` seconds by a daemon thread, removed by
  `release()` (or leaving the `with` block) unless another process has taken it over."""

  def __init__(self, path: Optional[str], token: str, heartbeat_s: float, log: Log):
    self.path, self.token, self._log = path, token, log
    self._stop = threading.Event()
    self._thread = None
    if path is not None:
      self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True,
                                      name="workdir-lock-heartbeat")
      self._thread.start()

  def _ours(self) -> bool:
    holder = read_holder(os.path.dirname(self.path))
    return holder is not None and holder.token == self.token

  def _beat(self, every: float) -> None:
    while not self._stop.wait(every):
      try:
        if not self._ours():
          holder = read_holder(os.path.dirname(self.path))
          who = holder.describe() if holder else "nobody (it was deleted)"
          self._log(f"WARNING: the lock {self.path} is now held by {who}, not by this run: two "
                    "runs may be writing this workdir. Stop one of them.")
          return
        os.utime(self.path)
      except OSError:  # a file-system hiccup: try again at the next beat
        pass

  def release(self) -> None:
    """Stops the heartbeat and removes the lock if it is still ours. Idempotent."""
    self._stop.set()
    if self.path is None:
      return
    if self._thread is not None:
      self._thread.join(timeout=5)
    try:
      if self._ours():
        os.remove(self.path)
    except OSError:
      pass
    self.path = None

  def __enter__(self) -> "WorkdirLock":
    return self

  def __exit__(self, *exc) -> bool:
    self.release()
    return False
