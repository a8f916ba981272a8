"""Run a sweep on a SLURM cluster: one `sbatch` array job, one array task per unfinished point.

The script runs from the repository root with the Python that wrote it, so the cluster must
see the same paths (a shared filesystem). Each task trains its point in its own workdir and
resumes it if it was there before; its output goes to `<sweep_dir>/slurm/<job>_<task>.out`,
appended to across restarts.

Preemption. SLURM stops a task (`scontrol requeue`, preemption by another job, `scancel`, the
time limit) by sending SIGTERM to every process of the task, the run included, and SIGKILL
`KillWait` seconds later: the run finishes its step, saves and exits 0 (a second SIGTERM would
make it stop without saving, so the batch shell does not pass that one on). With `--requeue`
SLURM then starts a requeued task again, and the run resumes from its checkpoint. Reaching the
time limit is not a requeue, so with `time` set the script asks for `--signal=B:USR1@<lead>`:
SIGUSR1 to the batch shell alone (`B:`), `lead` seconds before the limit (SLURM may send it up
to a minute early). The shell passes it on to the run as SIGTERM and, once the run has saved (or
died of that SIGTERM before it could catch it), requeues its own task (`scontrol requeue
$SLURM_JOB_ID`), which starts again with a fresh limit.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from typing import Sequence

from transformer import paths


@dataclasses.dataclass(frozen=True)
class SlurmResources:
  """`#SBATCH` settings of every array task; empty / 0 leaves the cluster's default."""
  gpus_per_task: int = 1  # 0: no GPU line at all (CPU partitions)
  cpus_per_task: int = 0
  mem: str = ""
  time: str = ""
  partition: str = ""
  account: str = ""
  max_parallel: int = 0  # at most this many tasks at once (`--array=...%N`); 0 = no limit
  extra: tuple[str, ...] = ()  # more sbatch options, e.g. "--qos=high"
  signal_lead_s: int = 120  # with `time`: SIGUSR1 this long before the limit (save, requeue)


# After the case statement has put the point's command in `point`: run it as a child of this
# shell (so the shell can still hear SIGUSR1), wait for it however many signals arrive, and
# requeue the task when the time limit was near.
_RUN_POINT = """echo "[sweep] $(date -u +%FT%TZ) array task $SLURM_ARRAY_TASK_ID, \
job ${SLURM_JOB_ID:-?}, start $((${SLURM_RESTART_COUNT:-0} + 1)) on $(hostname -s): ${point[*]}"
near_limit=0 run=
# SLURM signals every process of the task, the run too: it saves and exits 0. Nothing to pass on.
trap 'echo "[sweep] SIGTERM: the run saves a checkpoint and exits"' TERM
# --signal=B:USR1@N: this shell alone hears it, N seconds before the time limit.
trap 'near_limit=1; echo "[sweep] time limit near: the run saves, then this task is requeued"
      [[ -z $run ]] || kill -TERM "$run" 2>/dev/null' USR1
"${point[@]}" &
run=$!
((near_limit)) && kill -TERM "$run" 2>/dev/null  # the warning came before $run was set
while :; do
  wait "$run"
  status=$?
  kill -0 "$run" 2>/dev/null && continue  # a trap cut the wait short: the run still works
  # A trap cut the wait short (128 + its signal) as the run ended: this shell has reaped the
  # run meanwhile and keeps its status for one more wait (127: the first wait already had it).
  if ((status > 128)); then
    wait "$run" 2>/dev/null
    again=$?
    ((again == 127)) || status=$again
  fi
  break
done
# Requeued after the run saved (0), or after it died of this shell's SIGTERM (143: the signal
# came before the run could catch it, while it imported or built its data).
if ((near_limit && (status == 0 || status == 143))); then
  scontrol requeue "$SLURM_JOB_ID" || echo "[sweep] scontrol requeue failed: resubmit" >&2
fi
exit "$status"
"""


def array_script(names: Sequence[str], commands: Sequence[Sequence[str]], sweep_dir: str,
                 repo_root: str, res: SlurmResources, job_name: str) -> str:
  """The text of the sbatch array script: task i runs `commands[i]` (point `names[i]`)."""
  if not commands:
    raise ValueError("No point to run.")
  log_dir = os.path.join(os.path.abspath(sweep_dir), "slurm")
  array = f"0-{len(commands) - 1}" + (f"%{res.max_parallel}" if res.max_parallel else "")
  opts = [f"--job-name={job_name}", f"--array={array}", "--ntasks=1",
          f"--output={log_dir}/%A_%a.out", "--open-mode=append", "--requeue"]
  if res.gpus_per_task:
    opts.append(f"--gpus-per-task={res.gpus_per_task}")
  if res.cpus_per_task:
    opts.append(f"--cpus-per-task={res.cpus_per_task}")
  for flag, value in (("mem", res.mem), ("time", res.time), ("partition", res.partition),
                      ("account", res.account)):
    if value:
      opts.append(f"--{flag}={value}")
  if res.time:  # before the limit: save, then requeue (see the module docstring)
    opts.append(f"--signal=B:USR1@{res.signal_lead_s}")
  opts += [e if e.startswith("-") else f"--{e}" for e in res.extra]
  lines = ["#!/bin/bash", f"# Sweep {os.path.abspath(sweep_dir)}: {len(commands)} points, "
           "one array task each. Written by launch.py --mode=sweep --launcher=slurm.",
           "# A stopped task saves and, requeued, resumes (transformer/sweep/slurm.py)."]
  lines += [f"#SBATCH {o}" for o in opts]
  lines += ["set -uo pipefail", f"cd {shlex.quote(repo_root)}",
            "export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}",
            'case "${SLURM_ARRAY_TASK_ID:?not set: submit this with sbatch}" in']
  for i, (name, cmd) in enumerate(zip(names, commands)):
    lines.append(f"  {i})  # {name}")
    lines.append(f"    point=({' '.join(shlex.quote(c) for c in cmd)}) ;;")
  lines += ['  *) echo "no sweep point for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
            "esac", _RUN_POINT]
  return "\n".join(lines)


def write_script(text: str, sweep_dir: str) -> str:
  os.makedirs(os.path.join(sweep_dir, "slurm"), exist_ok=True)
  path = os.path.join(sweep_dir, "sweep.sbatch")
  paths.write_text(path, text, mode=0o755)
  return path


def submit(path: str) -> str:
  """Runs `sbatch path`; returns its output (`Submitted batch job N`)."""
  try:
    out = subprocess.run(["sbatch", path], capture_output=True, text=True, check=False)
  except FileNotFoundError:
    raise RuntimeError("sbatch is not on PATH: is this a SLURM login node? Use --dry_run "
                       f"to only write {path}.") from None
  if out.returncode != 0:
    raise RuntimeError(f"sbatch {path} failed (exit {out.returncode}): {out.stderr.strip()}")
  return out.stdout.strip()
