"""The SLURM path against a real cluster: `pytest -m slurm` (see the README, Clusters).

Start one on this machine first (root; Debian's slurm-wlm and munge, single node):
`bash scripts/slurm_local.sh up`. Without a cluster these tests skip, saying so; with
TRANSFORMER_REQUIRE_SLURM=1 (CI) a missing cluster fails them instead.

  - a sweep submitted as a real `sbatch` array (CPU only: --slurm_gpus_per_task=0) runs every
    point, and `--mode=report` reads the workdirs;
  - `srun --ntasks=2` starts two JAX processes that find each other through JAX's own
    SlurmCluster detector (no coordinator flags) and end with one process's parameters;
  - `scontrol requeue` of a running point: the run saves on SLURM's SIGTERM, SLURM starts the
    task again (--requeue), it resumes, and it ends equal to an uninterrupted run;
  - the time-limit warning (SIGUSR1 to the batch shell): the shell has the run save and
    requeues the task, which resumes; sent while the run still imports, it requeues too.

Every job is waited for with a bound, and cancelled when its test ends.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests import test_multihost as multihost
from tests.test_train import _final_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Waits are generous and bounded: a loaded 2-core machine builds the dataset, compiles and saves
# several times slower than an idle one (the time-limit test passed idle in 62 s and failed
# under load with waits of 120-300 s), and a wait ends as soon as its condition holds.
STARTS_WITHIN_S = 900  # submission to "step 3" in the log: a queue, the dataset, a compile
REQUEUES_WITHIN_S = 600  # a signal to the requeued task pending: a save under load, scontrol
ENDS_WITHIN_S = 900  # a started task to its end
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(3 * 900)]

_LIVE = ("idle", "mixed", "allocated", "completing")
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
          "BOOT_FAIL", "DEADLINE", "PREEMPTED")
NUM_STEPS = 60
# The requeued run must still be training when its SIGTERM comes, a poll after step 3: with the
# session's compilation cache warm, a 60-step run once ended first.
REQUEUE_STEPS = 1000
ENDLESS = 1_000_000  # a run that cannot end before a test stops it


def _cluster_problem() -> str:
  """Why no job could run here ("" when a node takes jobs)."""
  if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
    return "sinfo / sbatch are not on PATH"
  try:
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
  except subprocess.TimeoutExpired:
    return "sinfo did not answer within 20s"
  if r.returncode:
    return f"sinfo failed: {r.stderr.strip()}"
  states = [s.rstrip("*~#!%$@^-") for s in r.stdout.split()]
  return "" if any(s in _LIVE for s in states) else f"no node takes jobs (sinfo: {states})"


@pytest.fixture(scope="module")
def slurm():
  problem = _cluster_problem()
  if problem:
    message = (f"no SLURM cluster: {problem}. Start one on this machine: "
               "bash scripts/slurm_local.sh up (as root)")
    if os.environ.get("TRANSFORMER_REQUIRE_SLURM") == "1":
      pytest.fail(message + " [TRANSFORMER_REQUIRE_SLURM=1]", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def jobs(slurm):
  """Job ids a test submits; whatever still runs at its end is cancelled."""
  ids = []
  yield ids
  for job in ids:
    subprocess.run(["scancel", str(job)], capture_output=True, timeout=30)


def _job_states(job: str) -> list[str]:
  """JobState of every task of `job` (an array id or `id_task`), from slurmctld."""
  r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                     timeout=30)
  assert r.returncode == 0, f"scontrol show job {job}: {r.stderr}"
  return re.findall(r"\bJobState=(\S+)", r.stdout)


def _tails(logs) -> str:
  return "".join(f"\n--- {p}:\n{_read(p)[-3000:]}" for p in logs)


def _wait_for(what: str, check, timeout: float, logs=(), every: float = 2.0):
  """Polls `check()` every `every` seconds until it returns something true; fails naming
  `what` (and the logs' tails) after `timeout` seconds."""
  deadline = time.monotonic() + timeout
  while True:
    value = check()
    if value:
      return value
    if time.monotonic() > deadline:
      pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{_tails(logs)}")
    time.sleep(every)


def _wait_for_step(log, step: int):
  """Waits for the run to log a train step >= `step` (polled often: the tiny run is fast)."""
  _wait_for(f"the point to train past step {step - 1}",
            lambda: [int(s) for s in re.findall(r"^step\s+(\d+)/", _read(log), re.M)
                     if int(s) >= step], STARTS_WITHIN_S, [log], every=0.2)


def _wait_until_requeued(task: str, log, what: str) -> None:
  """Waits for `task` to be pending again (or started again); fails at once if it ended."""
  def requeued():
    states = _job_states(task)
    if states and all(x in _ENDED for x in states):
      pytest.fail(f"{task} ended {states} instead of {what}{_tails([log])}")
    return states == ["PENDING"] or "start 2 on" in _read(log)
  _wait_for(what, requeued, REQUEUES_WITHIN_S, [log])


def _start_now(task: str) -> None:
  """Starts a requeued task now: SLURM holds one back for two minutes (its EligibleTime)."""
  # slurmd revokes the old run's credential when it ends, and refuses a credential made in the
  # same second ("Killing non-startable batch JobId=..: Job credential revoked", the task then
  # FAILED): SLURM's own two-minute hold avoids that; a forced start must wait a second too.
  time.sleep(2)
  subprocess.run(["scontrol", "update", f"jobid={task}", "StartTime=now"], capture_output=True,
                 timeout=30)


def _restart_and_finish(task: str, log, what: str) -> str:
  """Waits for the requeued `task` to be pending, starts it now, waits for it to complete;
  returns its log."""
  _wait_until_requeued(task, log, what)
  _start_now(task)
  states = _wait_until_ended(task, ENDS_WITHIN_S, [log])
  text = _read(log)
  assert states == ["COMPLETED"], (states, text[-4000:])
  return text


def _wait_until_ended(job: str, timeout: float, logs=()) -> list[str]:
  return _wait_for(f"job {job} to end",
                   lambda: (s := _job_states(job)) and all(x in _ENDED for x in s) and s,
                   timeout, logs)


def _read(path) -> str:
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return ""


# Lines that say why a process aborted: glog's fatal and error lines, a failed CHECK, a C++
# exception; the stack trace after them fills a log's tail and hides them.
_FATAL = re.compile(r"^[FE]\d{4} |Check failed|terminate called|what\(\):|Error|error:")


def _tail_with_cause(text: str, tail: int = 2000) -> str:
  """The log's lines matching `_FATAL` (the last 20), then its last `tail` characters."""
  cause = [line[:500] for line in text.splitlines() if _FATAL.search(line)][-20:]
  return "\n".join(cause) + "\n...\n" + text[-tail:]


def _overrides(corpus, num_steps: int) -> list[str]:
  """A tiny LM on the tiny corpus; the only checkpoints are the final one and a signal's."""
  values = {"data.source_dir": corpus["source_dir"], "data.data_dir": corpus["data_dir"],
            "data.validation_percent": 20, "data.seq_len": 32, "data.shuffle_buffer": 64,
            "data.eval_batches": 2, "model.d_model": 32, "model.num_heads": 4,
            "model.num_layers": 2, "model.d_ff": 64, "model.dropout_rate": 0.1,
            "train.batch_size": 8, "train.num_steps": num_steps, "train.log_every": 1,
            "train.eval_every": min(max(20, num_steps // 4), 1000),
            "checkpoint.every_steps": 1000, "checkpoint.keep": 5}
  return [f"--config.{k}={v}" for k, v in values.items()]


def _sweep_file(tmp_path, seeds) -> str:
  path = tmp_path / "seeds.py"
  path.write_text("def get_sweep():\n"
                  f"  return [{{'seed': s}} for s in {list(seeds)}]\n")
  return str(path)


def _env():
  # sbatch passes the submitting environment on; the runs are CPU-only, output unbuffered.
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  env.pop("XLA_FLAGS", None)  # one CPU device per point, as a plain `launch.py` has
  return env


def _launch(args, timeout=600) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=_env())


def _submit_sweep(sweep, sweep_dir, corpus, num_steps, jobs) -> str:
  r = _launch(["--mode=sweep", f"--sweep={sweep}", "--config=configs/default.py:smoke",
               f"--sweep_dir={sweep_dir}", *_overrides(corpus, num_steps), "--launcher=slurm",
               "--slurm_gpus_per_task=0", "--slurm_cpus_per_task=1",
               "--slurm_time=00:15:00"], timeout=240)
  assert r.returncode == 0, r.stdout + r.stderr
  job = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
  jobs.append(job)
  return job


def _prepare_dataset(corpus) -> None:
  """Builds the TFDS dataset once, so that points starting together do not race to."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.data.pipeline import get_builder
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir, c.data.data_dir = corpus["source_dir"], corpus["data_dir"]
    c.data.validation_percent = 20
  get_builder(from_config_dict(c).data)


def _rows(workdir) -> list[dict]:
  """metrics.jsonl without wall-clock fields (time, tokens/s, step time, MFU)."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items()
           if k not in ("time", "tokens_per_sec", "step_time", "mfu")} for r in rows]


def test_a_sweep_runs_as_a_real_sbatch_array_and_reports(jobs, tiny_corpus, tmp_path):
  start = time.monotonic()
  _prepare_dataset(tiny_corpus)
  sweep, out = _sweep_file(tmp_path, [0, 1]), tmp_path / "sweep"
  job = _submit_sweep(sweep, out, tiny_corpus, 6, jobs)
  script = (out / "sweep.sbatch").read_text()
  assert "--gpus-per-task" not in script and "#SBATCH --requeue" in script
  logs = [out / "slurm" / f"{job}_{i}.out" for i in (0, 1)]
  states = _wait_until_ended(job, ENDS_WITHIN_S, logs)
  assert states == ["COMPLETED", "COMPLETED"], (states, [_read(p)[-3000:] for p in logs])
  for i, log in enumerate(logs):
    text = _read(log)
    assert f"array task {i}, job" in text and "start 1 on" in text, text[-3000:]

  r = _launch(["--mode=report", f"--sweep_dir={out}"], timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr
  report = (out / "report.md").read_text()
  assert "2 points: " in report
  assert not any(s in report for s in ("incomplete", "missing", "diverged")), report
  # Submitting again finds both finished: nothing to submit.
  r = _launch(["--mode=sweep", f"--sweep={sweep}", "--config=configs/default.py:smoke",
               f"--sweep_dir={out}", *_overrides(tiny_corpus, 6), "--launcher=slurm",
               "--slurm_gpus_per_task=0"], timeout=240)
  assert r.returncode == 0 and "nothing to submit" in r.stdout, r.stdout + r.stderr
  print(f"\n[slurm] sweep of 2 points through sbatch + report: {time.monotonic() - start:.0f}s")


def test_srun_two_tasks_find_each_other_and_match_one_process(slurm, tmp_path):
  """Two JAX processes of 2 CPU devices each under `srun --ntasks=2`, jax.distributed set up
  from SLURM's environment alone, end with the parameters of one process with 4 devices."""
  start = time.monotonic()
  multi, single = str(tmp_path / "multi"), str(tmp_path / "single")
  r = subprocess.run(
      ["srun", "--ntasks=2", "--cpus-per-task=1", "--kill-on-bad-exit=1", "--time=10",
       f"--output={multi}.%t.log", sys.executable,
       os.path.join(ROOT, "tests", "multihost_worker.py"), f"--workdir={multi}"],
      cwd=ROOT, env=multihost._env(2), capture_output=True, text=True, timeout=600)
  outs = [_read(f"{multi}.{t}.log") for t in (0, 1)]
  assert r.returncode == 0, (r.stderr, *[_tail_with_cause(o) for o in outs])
  assert "process 0 of 2: 2 local / 4 devices" in outs[0]
  assert "process 1 of 2: 2 local / 4 devices" in outs[1]
  assert os.path.isdir(os.path.join(multi, "checkpoints", "8"))
  multihost._run(single, processes=1, devices=4)

  a, b = multihost._final_params(multi, 8), multihost._final_params(single, 8)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7, err_msg=jax.tree_util.keystr(path))
  # Train losses too (the worker's eval split is uneven across processes on purpose).
  losses = [[r["loss"] for r in _rows(w) if r["split"] == "train"] for w in (multi, single)]
  assert len(losses[0]) == 4 and np.allclose(losses[0], losses[1], rtol=1e-5), losses
  print(f"\n[slurm] srun --ntasks=2 and the 1-process run: {time.monotonic() - start:.0f}s")


def test_a_requeued_point_saves_resumes_and_equals_an_uninterrupted_run(jobs, tiny_corpus,
                                                                        tmp_path):
  start = time.monotonic()
  straight = str(tmp_path / "straight")
  r = _launch(["--config=configs/default.py:smoke", f"--workdir={straight}", "--config.seed=0",
               *_overrides(tiny_corpus, REQUEUE_STEPS)])  # also builds the dataset
  assert r.returncode == 0, r.stdout + r.stderr

  out = tmp_path / "sweep"
  job = _submit_sweep(_sweep_file(tmp_path, [0]), out, tiny_corpus, REQUEUE_STEPS, jobs)
  task, log = f"{job}_0", out / "slurm" / f"{job}_0.out"
  _wait_for_step(log, 3)
  r = subprocess.run(["scontrol", "requeue", task], capture_output=True, text=True, timeout=30)
  assert r.returncode == 0, r.stderr
  text = _restart_and_finish(task, log, "the requeued task to be pending")
  stopped = int(re.search(r"Stopped at step (\d+) \(SIGTERM\)", text).group(1))
  assert 3 <= stopped < REQUEUE_STEPS, text[-4000:]
  assert "start 2 on" in text and f"at step {stopped}." in text, text[-4000:]  # resumed there
  point = str(out / "seed=0")
  # Row for row the uninterrupted run's (times and throughput aside), the first step after the
  # restart included: it compiles, so it is left out of tokens/s but not out of the losses.
  rows, expected = _rows(point), _rows(straight)
  assert rows == expected
  assert rows[-1] == expected[-1] and rows[-1]["split"] == "eval"  # the final eval, equal
  a, b = _final_params(point, REQUEUE_STEPS), _final_params(straight, REQUEUE_STEPS)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))
  print(f"\n[slurm] requeued point vs uninterrupted run: {time.monotonic() - start:.0f}s")


def _time_limit_signal(task: str) -> None:
  """What `--signal=B:USR1@120` does before the time limit, sent now: SIGUSR1 to the batch
  shell alone (`scancel --batch`)."""
  r = subprocess.run(["scancel", "--batch", "--signal=USR1", task], capture_output=True,
                     text=True, timeout=30)
  assert r.returncode == 0, r.stderr


def test_the_time_limit_warning_saves_and_requeues_the_task(jobs, tiny_corpus, tmp_path):
  """The time-limit warning while the run trains: the shell asks the run to save, then
  requeues the task, which resumes there. The run is far too long to end before the signal
  (a 60-step run once did, its evals compiled ahead by the session's compilation cache); the
  resumed one is cancelled once it has trained on."""
  start = time.monotonic()
  _prepare_dataset(tiny_corpus)
  out = tmp_path / "sweep"
  job = _submit_sweep(_sweep_file(tmp_path, [0]), out, tiny_corpus, ENDLESS, jobs)
  task, log = f"{job}_0", out / "slurm" / f"{job}_0.out"
  _wait_for_step(log, 3)
  _time_limit_signal(task)
  _wait_until_requeued(task, log, "the task to requeue itself")
  text = _read(log)
  assert "time limit near" in text, text[-4000:]
  stopped = int(re.search(r"Stopped at step (\d+) \(SIGTERM\)", text).group(1))
  _start_now(task)
  resumed = f"at step {stopped}."
  _wait_for("the requeued task to resume and train on",
            lambda: "start 2 on" in (t := _read(log)) and resumed in t
            and re.search(rf"^step\s+{stopped + 1}/", t, re.M), STARTS_WITHIN_S, [log])
  assert _job_states(task) == ["RUNNING"]
  print(f"\n[slurm] time-limit warning, save and self-requeue: {time.monotonic() - start:.0f}s")


def test_the_time_limit_warning_before_the_run_can_save_requeues_it(jobs, tiny_corpus,
                                                                    tmp_path):
  """The warning while the run still imports (no handler yet): SIGTERM ends it (143) and the
  shell requeues the task all the same; the new start trains from the beginning to the end."""
  start = time.monotonic()
  _prepare_dataset(tiny_corpus)
  out = tmp_path / "sweep"
  job = _submit_sweep(_sweep_file(tmp_path, [0]), out, tiny_corpus, NUM_STEPS, jobs)
  task, log = f"{job}_0", out / "slurm" / f"{job}_0.out"
  _wait_for("the task to start", lambda: "start 1 on" in _read(log), STARTS_WITHIN_S, [log],
            every=0.1)
  _time_limit_signal(task)
  text = _restart_and_finish(task, log, "the task to requeue itself")
  assert "time limit near" in text and "SIGTERM received" not in text, text[-4000:]
  first, second = text.split("start 2 on")
  assert not re.search(r"^step\s+\d+/", first, re.M), first[-4000:]  # it never trained
  assert "Resumed" not in second and _rows(out / "seed=0")[-1]["step"] == NUM_STEPS
  print(f"\n[slurm] time-limit warning during imports, self-requeue: "
        f"{time.monotonic() - start:.0f}s")
