"""One run per workdir (transformer/workdir_lock.py): a second `launch.py` on a held workdir
stops at once naming the holder and changes nothing; a killed run's lock is taken over; the
takeover is race-free; another host's lock goes stale only without heartbeats; the sweep
runner skips a held point; a two-process run refused on process 0 stops on both."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests.test_preemption import ROOT, _overrides
from tests.xla_flags import cpu_devices
from transformer import workdir_lock as wl
from transformer.sweep.local import Job, run_jobs

HOST = socket.gethostname()


# --- real launch.py processes -----------------------------------------------------------------

def _launch_args(workdir, corpus, num_steps=14):
  overrides = dict(_overrides(corpus), **{"train.num_steps": num_steps})
  return ([sys.executable, os.path.join(ROOT, "launch.py"), "--config=configs/default.py:smoke",
           f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in overrides.items()])


def _snapshot(workdir):
  """Every path under `workdir` (itself included) with its mtime and size."""
  out = {}
  for d, dirs, files in os.walk(workdir):
    for name in [""] + dirs + files:
      p = os.path.join(d, name)
      st = os.stat(p)
      out[os.path.relpath(p, workdir)] = (st.st_mtime_ns, st.st_size)
  return out


def _wait_for(predicate, proc, what, timeout=240):
  deadline = time.time() + timeout
  while not predicate():
    assert proc.poll() is None, f"the first run ended before {what}"
    assert time.time() < deadline, f"timed out waiting for {what}"
    time.sleep(0.2)


def _stop(proc, timeout=30):
  """SIGSTOP `proc` and wait until every one of its threads is stopped: the signal is delivered
  asynchronously, and a thread inside a write (orbax's async checkpoint) finishes it first."""
  proc.send_signal(signal.SIGSTOP)
  deadline = time.time() + timeout
  task_dir = f"/proc/{proc.pid}/task"
  while True:
    states = []
    for tid in os.listdir(task_dir):
      try:
        with open(os.path.join(task_dir, tid, "stat")) as f:
          states.append(f.read().rsplit(")", 1)[1].split()[0])
      except FileNotFoundError:  # a thread that ended meanwhile
        continue
    if all(state in "Tt" for state in states):
      return
    assert time.time() < deadline, f"pid {proc.pid} not stopped after {timeout}s: {states}"
    time.sleep(0.05)


def test_second_run_is_refused_at_once_then_a_killed_runs_lock_is_taken_over(tiny_corpus,
                                                                              tmp_path):
  workdir = str(tmp_path / "run")
  lock = os.path.join(workdir, ".lock")
  first = subprocess.Popen(_launch_args(workdir, tiny_corpus), cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
  try:
    # Held, training, with a finished checkpoint (step 3) and metrics on disk.
    _wait_for(lambda: os.path.isdir(os.path.join(workdir, "checkpoints", "3")), first,
              "its checkpoint of step 3")
    holder = json.load(open(lock))
    assert holder["pid"] == first.pid and holder["host"] == HOST
    _stop(first)  # frozen, so its files hold still while we compare
    before = _snapshot(workdir)
    t0 = time.time()
    second = subprocess.run(_launch_args(workdir, tiny_corpus), cwd=ROOT, capture_output=True,
                            text=True, timeout=180)
    took = time.time() - t0
    assert _snapshot(workdir) == before  # not one file written, touched or removed
    assert second.returncode == 1, second.stderr
    error = [line for line in second.stderr.splitlines() if line.startswith("Error:")]
    assert error == [
        f"Error: workdir {workdir} is in use by pid {first.pid} on host {HOST} since "
        f"{holder['since']} (lock {lock}, touched {error[0].split('touched ')[1].split('s ago')[0]}"
        "s ago); wait for it to finish, or if that process is gone on another host, delete the "
        "lock file (it counts as abandoned 10 min after its last touch)."], second.stderr
    assert "Model:" not in second.stdout and "First step" not in second.stdout
    assert took < 90, f"the refused run took {took:.0f}s"
    print(f"refused run ({took:.1f}s, exit {second.returncode}):\n{second.stderr}")

    first.send_signal(signal.SIGKILL)  # a kill -9 leaves its lock behind
    first.wait(timeout=60)
    assert json.load(open(lock))["pid"] == first.pid
  finally:
    first.kill()
    first.wait()

  third = subprocess.run(_launch_args(workdir, tiny_corpus), cwd=ROOT, capture_output=True,
                         text=True, timeout=400)
  assert third.returncode == 0, third.stdout + third.stderr
  assert (f"Taking over the lock of workdir {workdir} from pid {first.pid} on host {HOST} since "
          f"{holder['since']}: pid {first.pid} no longer runs on this host.") in third.stderr
  assert re.search(r"Resumed from .* at step \d+", third.stdout), third.stdout
  assert "step     14/14" in third.stdout
  assert not os.path.exists(lock)  # released after a normal end


def test_a_two_process_run_refused_on_process_0_stops_both(tiny_corpus, tmp_path):
  """Only process 0 takes the lock; process 1 learns of the refusal in a collective and stops
  with it, instead of waiting for process 0's heartbeats to stop."""
  workdir = tmp_path / "multi"
  workdir.mkdir()
  held = wl.acquire(str(workdir))  # this (pytest) process holds it
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, XLA_FLAGS=cpu_devices(1),
             JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen(
      _launch_args(str(workdir), tiny_corpus) + [
          f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}",
          "--heartbeat_timeout=60"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in range(2)]
  try:
    t0 = time.time()
    outs = [p.communicate(timeout=180)[0] for p in procs]
    took = time.time() - t0
  finally:
    for p in procs:
      p.kill()
      p.wait()
    held.release()
  assert [p.returncode for p in procs] == [1, 1], outs
  assert f"Error: workdir {workdir} is in use by pid {os.getpid()} on host {HOST}" in outs[0]
  assert f"Error: process 0 could not take the lock of workdir {workdir}" in outs[1]
  assert took < 60, f"took {took:.0f}s: process 1 waited for the heartbeat timeout"
  assert sorted(os.listdir(workdir)) == []  # the lock was released; nothing else written


# --- the lock itself --------------------------------------------------------------------------

def _write_lock(workdir, age=0.0, **fields):
  record = dict(host="elsewhere", pid=4242, since="2026-01-02T03:04:05+00:00", command="x",
                token="t", boot_id="", start_ticks=None, slurm_job="", slurm_restart=0)
  record.update(fields)
  path = os.path.join(workdir, ".lock")
  with open(path + ".tmp", "w") as f:  # whole at once, as a real lock appears (a link of a
    json.dump(record, f)                 # complete file): a running heartbeat never reads half
  os.replace(path + ".tmp", path)
  t = time.time() - age
  os.utime(path, (t, t))
  return record


def _take(workdir, **kw):
  logged = []
  lock = wl.acquire(str(workdir), log=logged.append, **kw)
  return lock, logged


def _dead_pid():
  p = subprocess.Popen([sys.executable, "-c", "pass"])
  p.wait(timeout=60)
  return p.pid


def test_a_fresh_lock_of_another_host_is_live_and_goes_stale_without_heartbeats(tmp_path):
  _write_lock(tmp_path, age=30)
  with pytest.raises(wl.WorkdirInUse, match=r"in use by pid 4242 on host elsewhere since "
                     r"2026-01-02T03:04:05\+00:00 \(lock .*/\.lock, touched 30s ago\)"):
    wl.acquire(str(tmp_path))
  assert wl.live_holder(str(tmp_path)).pid == 4242
  _write_lock(tmp_path, age=wl.STALE_AFTER_S - 5)
  assert wl.live_holder(str(tmp_path)) is not None
  _write_lock(tmp_path, age=wl.STALE_AFTER_S + 60)
  assert wl.live_holder(str(tmp_path)) is None
  lock, logged = _take(tmp_path)
  assert logged == [f"Taking over the lock of workdir {tmp_path} from pid 4242 on host elsewhere "
                    "since 2026-01-02T03:04:05+00:00: its holder has not refreshed it for 11 min "
                    "(abandoned after 10 min)."]
  assert json.load(open(lock.path))["pid"] == os.getpid()
  lock.release()
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", ["dead_pid", "reused_pid", "rebooted", "slurm_requeued"])
def test_locks_of_processes_that_are_gone_are_taken_over(tmp_path, monkeypatch, case):
  if case == "dead_pid":
    _write_lock(tmp_path, host=HOST, pid=_dead_pid())
    why = "no longer runs on this host"
  elif case == "reused_pid":  # a live pid (ours) that started at another time
    _write_lock(tmp_path, host=HOST, pid=os.getpid(), start_ticks=1)
    why = "now belongs to another process"
  elif case == "rebooted":
    _write_lock(tmp_path, host=HOST, pid=os.getpid(), boot_id="another-boot")
    why = "this host has rebooted since"
  else:  # a fresh lock on another host, by the run SLURM requeued as this one
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    _write_lock(tmp_path, slurm_job="77", slurm_restart=0)
    why = "run 0 of SLURM job 77, which SLURM requeued (this is run 1)"
  lock, logged = _take(tmp_path)
  with lock:
    assert json.load(open(lock.path))["pid"] == os.getpid()
  assert lock.path is None and not os.path.exists(tmp_path / ".lock")
  assert len(logged) == 1 and logged[0].startswith("Taking over the lock of workdir ")
  assert why in logged[0], logged


def test_live_locks_are_not_taken_over(tmp_path, monkeypatch):
  """Ourselves (same pid, same start time); the same SLURM job at the same restart count (two
  steps of one allocation); a fresh file that is not a lock record (being written by hand)."""
  with _take(tmp_path)[0]:
    with pytest.raises(wl.WorkdirInUse, match=f"pid {os.getpid()} on host {HOST}"):
      wl.acquire(str(tmp_path))
  monkeypatch.setenv("SLURM_JOB_ID", "77")
  _write_lock(tmp_path, slurm_job="77", slurm_restart=0)
  with pytest.raises(wl.WorkdirInUse):
    wl.acquire(str(tmp_path))
  (tmp_path / ".lock").write_text("")
  with pytest.raises(wl.WorkdirInUse, match="not a lock record"):
    wl.acquire(str(tmp_path))
  old = time.time() - wl.STALE_AFTER_S - 1
  os.utime(tmp_path / ".lock", (old, old))
  _take(tmp_path)[0].release()


_RACER = textwrap.dedent("""
    import sys, time
    from transformer import workdir_lock as wl
    workdir, start = sys.argv[1], float(sys.argv[2])
    remove = wl._remove
    def slow_remove(path):  # widen the window between checking a stale lock and removing it
      time.sleep(0.3)
      remove(path)
    wl._remove = slow_remove
    time.sleep(max(0.0, start - time.time()))
    try:
      lock = wl.acquire(workdir, log=lambda m: None)
    except wl.WorkdirInUse:
      print("LOST", flush=True)
    else:
      print("WON", flush=True)
      time.sleep(2.0)  # hold it while the others look
      lock.release()
""")


@pytest.mark.parametrize("stale", [False, True])
def test_of_many_simultaneous_takers_exactly_one_wins(tmp_path, stale):
  """Eight processes go for the same workdir at the same instant: free, or with a dead
  process's lock (all eight see it stale and take it over under the guard). Each taker pauses
  before removing a lock it found stale, so that without the guard several would win."""
  if stale:
    _write_lock(tmp_path, host=HOST, pid=_dead_pid())
  script = tmp_path / "racer.py"
  script.write_text(_RACER)
  workdir = tmp_path / "w"
  workdir.mkdir()
  if stale:
    os.rename(tmp_path / ".lock", workdir / ".lock")
  start = time.time() + 2.0
  env = dict(os.environ, PYTHONPATH=ROOT)
  procs = [subprocess.Popen([sys.executable, str(script), str(workdir), str(start)],
                            stdout=subprocess.PIPE, text=True, env=env) for _ in range(8)]
  try:
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
  finally:
    for p in procs:
      p.kill()
      p.wait()
  assert sorted(outs) == ["LOST"] * 7 + ["WON"], outs
  assert os.listdir(workdir) == []  # no lock, guard or temporary file left


def test_a_takeover_guard_left_by_a_dead_taker_is_cleared(tmp_path, monkeypatch):
  _write_lock(tmp_path, host=HOST, pid=_dead_pid())
  guard = tmp_path / ".lock.takeover"
  guard.write_text("{}")
  monkeypatch.setattr(wl, "GUARD_WAIT_S", 0.3)
  with pytest.raises(wl.WorkdirInUse, match="is taking it over"):  # a fresh guard: a live taker
    wl.acquire(str(tmp_path))
  old = time.time() - wl.GUARD_STALE_S - 1
  os.utime(guard, (old, old))
  _take(tmp_path)[0].release()
  assert os.listdir(tmp_path) == []


def test_the_holder_touches_its_lock_and_never_removes_anothers(tmp_path):
  lock, logged = _take(tmp_path, heartbeat_s=0.05)
  old = time.time() - 500
  os.utime(lock.path, (old, old))
  deadline = time.time() + 10
  while time.time() - os.stat(lock.path).st_mtime > 60:
    assert time.time() < deadline, "the heartbeat did not touch the lock"
    time.sleep(0.05)
  path = lock.path
  _write_lock(tmp_path, pid=99)  # taken over by another host while this run was frozen
  while not logged:
    assert time.time() < deadline, "the holder did not notice its lock was taken"
    time.sleep(0.05)
  assert logged[0].startswith(f"WARNING: the lock {path} is now held by pid 99 on host elsewhere")
  lock.release()
  assert json.load(open(path))["pid"] == 99  # still the other run's


def test_a_remote_workdir_is_not_locked():
  lock, logged = _take("gs://bucket/run")
  assert lock.path is None and "not locked" in logged[0]
  lock.release()
  assert wl.live_holder("gs://bucket/run") is None


# --- the sweep runner -------------------------------------------------------------------------

def test_the_sweep_runner_skips_a_point_held_by_a_live_run(tmp_path):
  held_dir, free_dir = tmp_path / "p0", tmp_path / "p1"
  held_dir.mkdir()
  jobs = [Job(p.name, str(p), [sys.executable, "-c",
                               f"open({str(p / 'done')!r}, 'w').close()"],
              finished=lambda p=p: (p / "done").exists()) for p in (held_dir, free_dir)]
  lines = []
  with wl.acquire(str(held_dir)):
    out = run_jobs(jobs, parallel=2, poll_s=0.05, print_fn=lines.append)
  assert [j.name for j in out["in_use"]] == ["p0"] and [j.name for j in out["finished"]] == ["p1"]
  assert f"[sweep] skipping p0: in use by pid {os.getpid()} on host {HOST} since " in "\n".join(
      lines)
  assert sorted(os.listdir(held_dir)) == []  # not started: no log.txt, nothing written


def test_a_lock_that_is_not_utf8_reads_as_an_unknown_holder(tmp_path):
  """Bytes that are not UTF-8 (a torn or garbled .lock) were a codec traceback (issue 31)."""
  (tmp_path / ".lock").write_bytes(b'{"host": "\xff\xfe", "pi')
  holder = wl.read_holder(str(tmp_path))
  assert holder.pid == 0 and "not a lock record" in holder.host
