"""Run a sweep on a SLURM cluster: one `sbatch` array job, one array task per unfinished point.

The script runs from the repository root with the Python that wrote it, so the cluster must
see the same paths (a shared filesystem). Each task trains its point in its own workdir and
resumes it if it was there before; its output goes to `<sweep_dir>/slurm/<job>_<task>.out`.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class SlurmResources:
  """`#SBATCH` settings of every array task; empty / 0 leaves the cluster's default."""
  gpus_per_task: int = 1
  cpus_per_task: int = 0
  mem: str = ""
  time: str = ""
  partition: str = ""
  account: str = ""
  max_parallel: int = 0  # at most this many tasks at once (`--array=...%N`); 0 = no limit
  extra: tuple[str, ...] = ()  # more sbatch options, e.g. "--qos=high"


def array_script(names: Sequence[str], commands: Sequence[Sequence[str]], sweep_dir: str,
                 repo_root: str, res: SlurmResources, job_name: str) -> str:
  """The text of the sbatch array script: task i runs `commands[i]` (point `names[i]`)."""
  if not commands:
    raise ValueError("No point to run.")
  log_dir = os.path.join(os.path.abspath(sweep_dir), "slurm")
  array = f"0-{len(commands) - 1}" + (f"%{res.max_parallel}" if res.max_parallel else "")
  opts = [f"--job-name={job_name}", f"--array={array}", "--ntasks=1",
          f"--output={log_dir}/%A_%a.out"]
  if res.gpus_per_task:
    opts.append(f"--gpus-per-task={res.gpus_per_task}")
  if res.cpus_per_task:
    opts.append(f"--cpus-per-task={res.cpus_per_task}")
  for flag, value in (("mem", res.mem), ("time", res.time), ("partition", res.partition),
                      ("account", res.account)):
    if value:
      opts.append(f"--{flag}={value}")
  if res.time:  # SIGTERM two minutes before the limit: the run saves and the task can requeue
    opts.append("--signal=B:TERM@120")
  opts += [e if e.startswith("-") else f"--{e}" for e in res.extra]
  lines = ["#!/bin/bash", f"# Sweep {os.path.abspath(sweep_dir)}: {len(commands)} points, "
           "one array task each. Written by launch.py --mode=sweep --launcher=slurm."]
  lines += [f"#SBATCH {o}" for o in opts]
  lines += ["set -euo pipefail", f"cd {shlex.quote(repo_root)}",
            "export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}",
            'case "${SLURM_ARRAY_TASK_ID:?not set: submit this with sbatch}" in']
  for i, (name, cmd) in enumerate(zip(names, commands)):
    lines.append(f"  {i})  # {name}")
    lines.append(f"    exec {' '.join(shlex.quote(c) for c in cmd)} ;;")
  lines += ['  *) echo "no sweep point for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
            "esac", ""]
  return "\n".join(lines)


def write_script(text: str, sweep_dir: str) -> str:
  os.makedirs(os.path.join(sweep_dir, "slurm"), exist_ok=True)
  path = os.path.join(sweep_dir, "sweep.sbatch")
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, 0o755)
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
