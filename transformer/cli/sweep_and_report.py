"""`launch.py --mode=sweep` and `--mode=report`: their flags and what they do.

  python launch.py --mode=sweep --sweep=experiments/norm_placement.py \
      [--config=configs/default.py:smoke] [--config.x.y=...] [--sweep_dir=DIR] [--parallel=N]
      [--launcher=slurm [--dry_run] [--slurm_time=04:00:00] [--slurm_partition=gpu] ...]
  python launch.py --mode=report --sweep_dir=DIR [--report_metric=loss]
  python launch.py --mode=report --runs=W1,W2,... --report_dir=DIR   (runs launched by hand)

Nothing here imports JAX: the runner must leave the accelerators to its children.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Sequence

from absl import flags

from transformer import REPO_ROOT, paths
from transformer.sweep import points as sweep_lib
from transformer.config import ConfigError
from transformer.errors import CommandLineError, RunError, error_line, exit_status

_SWEEP = flags.DEFINE_string("sweep", None, "sweep: a Python file whose get_sweep() returns "
                             "the points (dicts of config field path -> value).")
_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None, "sweep / report: the sweep's directory "
                                 "(one workdir per point). Default: runs/sweeps/<sweep file>.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "sweep: points run at once (local launcher); "
                                 "with several GPUs each point gets its own.")
_LAUNCHER = flags.DEFINE_enum("launcher", "local", ["local", "slurm"],
                              "sweep: local processes, or one SLURM sbatch array job.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "sweep: write and print the sbatch script "
                             "without submitting it (--launcher=slurm), or list the points.")
_REPORT_METRIC = flags.DEFINE_string("report_metric", "", "report: the eval metric of the "
                                     "plots; default loss (nats/token, the unit of the verdicts).")
_RUNS = flags.DEFINE_list("runs", [], "report: workdirs of runs launched by hand (not one "
                          "sweep) to compare, e.g. --runs=runs/a,runs/b; the report goes to "
                          "--report_dir (transformer/report/compare.py).")
_REPORT_DIR = flags.DEFINE_string("report_dir", None, "report --runs: the directory the "
                                  "comparison is written to (created; links to the runs).")
_REUSE = flags.DEFINE_list("reuse_runs_from", [], "sweep: other sweep dirs whose finished runs "
                           "with the same config (checkpoint settings aside) are linked into "
                           "this sweep instead of run again.")
_POINTS = flags.DEFINE_string("points", "", "sweep: run only the points whose name, or whose "
                              "fields written out in full (model.norm=dyt,...,seed=3), match "
                              "this regular expression (re.search, e.g. 'seed=[34]$'); the "
                              "manifest and the report keep every point.")
_SLURM_GPUS = flags.DEFINE_integer("slurm_gpus_per_task", 1, "slurm: GPUs per point (0: none).")
_SLURM_CPUS = flags.DEFINE_integer("slurm_cpus_per_task", 0, "slurm: CPUs per point (0: default).")
_SLURM_MEM = flags.DEFINE_string("slurm_mem", "", "slurm: memory per point, e.g. 32G.")
_SLURM_TIME = flags.DEFINE_string("slurm_time", "", "slurm: time limit per point, e.g. 04:00:00.")
_SLURM_PARTITION = flags.DEFINE_string("slurm_partition", "", "slurm: partition.")
_SLURM_ACCOUNT = flags.DEFINE_string("slurm_account", "", "slurm: account.")
_SLURM_EXTRA = flags.DEFINE_list("slurm_extra", [], "slurm: more sbatch options, e.g. qos=high.")

_LAUNCH_PY = os.path.join(REPO_ROOT, "launch.py")


def default_sweep_dir(sweep_file: str) -> str:
  """`runs/sweeps/<file stem>[-<preset>]`."""
  path, _, arg = sweep_file.partition(".py:")
  stem = os.path.splitext(os.path.basename(path))[0]
  return os.path.join("runs", "sweeps", stem + (f"-{arg}" if arg else ""))


def main(mode: str, config_dict, config_arg: str, argv: Sequence[str]) -> int:
  """Runs `mode` ("sweep" or "report"); returns the process exit code (2 for a mistake on the
  command line, 1 for a bad sweep file or point)."""
  try:
    if mode == "report" and _RUNS.value:
      from transformer.report.compare import write_runs_report
      path = write_runs_report(_RUNS.value, _REPORT_DIR.value, _REPORT_METRIC.value)
      print(f"Report: {path}")
      return 0
    if mode == "report":
      if not _SWEEP_DIR.value:
        raise CommandLineError("--mode=report needs --sweep_dir=DIR (a directory made by "
                               "--mode=sweep), or --runs=W1,W2 --report_dir=DIR.")
      from transformer.report import write as report
      from transformer.report import summary as report_summary
      from transformer.sweep import points as sweep_points
      if sweep_points.holds_studies(_SWEEP_DIR.value):
        path, verdicts = report_summary.write_summary(_SWEEP_DIR.value)
        print("\n".join(verdicts))
        print(f"Summary: {path}")
      else:
        path = report.write_report(_SWEEP_DIR.value, _REPORT_METRIC.value)
        print("\n".join(report_summary.verdict_lines(path)))
        print(f"Report: {path}")
      return 0
    return _sweep(config_dict, config_arg, argv)
  except (CommandLineError, ConfigError, RunError) as e:
    print(error_line(e), file=sys.stderr)
    return exit_status(e)


def _sweep(config_dict, config_arg: str, argv: Sequence[str]) -> int:
  """Writes the sweep's manifest, links reusable runs, then runs the points (locally, then
  the report) or submits them (SLURM); the exit code."""
  if not _SWEEP.value:
    raise CommandLineError("--mode=sweep needs --sweep=FILE, a Python file with get_sweep() "
                           "(see experiments/).")
  points = sweep_lib.load_sweep(_SWEEP.value)
  configs = sweep_lib.validate_points(config_dict, points)
  given_dir = _SWEEP_DIR.value or default_sweep_dir(_SWEEP.value)
  sweep_dir = paths.absolute(given_dir)
  if paths.has_scheme(sweep_dir):  # reach the bucket once, bounded, before writing anything
    paths.probe_write(sweep_dir, flag="--sweep_dir")
  given_config = config_arg
  path, colon, variant = config_arg.partition(":")  # children may run in another directory
  config_arg = os.path.abspath(path) + colon + variant
  overrides = sweep_lib.user_overrides(argv)
  names = sweep_lib.point_names(points)
  chosen = _chosen(names, points)  # before anything is written: matching nothing stops here
  commands = [sweep_lib.point_command(_LAUNCH_PY, config_arg, overrides, p,
                                      os.path.join(sweep_dir, n), sys.executable)
              for p, n in zip(points, names)]
  sweep_lib.write_manifest(sweep_dir, _SWEEP.value, given_config, overrides, points, configs,
                           given_dir=given_dir)
  print(f"[sweep] {len(points)} points from {_SWEEP.value} in {sweep_dir}")
  if _REUSE.value:
    _link_reused(sweep_dir, names, configs)
  if len(chosen) < len(points):
    print(f"[sweep] --points={_POINTS.value}: {len(chosen)} of {len(points)} points run here; "
          "the others are left as they are.")
    points, configs, names, commands = ([xs[i] for i in chosen]
                                        for xs in (points, configs, names, commands))

  if _LAUNCHER.value == "slurm":
    return _slurm(sweep_dir, points, configs, names, commands)
  if _DRY_RUN.value:
    for n, c in zip(names, commands):
      print(f"{n}: {' '.join(c)}")
    return 0
  return _run_local(sweep_dir, names, commands, configs)


def _chosen(names: Sequence[str], points: Sequence[dict]) -> list[int]:
  """The indices of the points --points selects, by name or by every field (`point_text`: a
  long name is cut and hashed); every point without it."""
  if not _POINTS.value:
    return list(range(len(names)))
  pattern = re.compile(_POINTS.value)  # checked by flag_checks.check_sweep
  chosen = [i for i, (n, p) in enumerate(zip(names, points))
            if pattern.search(n) or pattern.search(sweep_lib.point_text(p))]
  if not chosen:
    raise CommandLineError(f"--points={_POINTS.value} matches none of the sweep's "
                           f"{len(names)} points (e.g. {', '.join(names[:2])}); give a "
                           "regular expression that some point names match.")
  return chosen


def _link_reused(sweep_dir: str, names: Sequence[str], configs) -> None:
  """Links the finished runs of --reuse_runs_from with a point's config into `sweep_dir`;
  prints which were linked and which were refused, and why."""
  linked, refused = sweep_lib.link_reusable_runs(sweep_dir, names, configs, _REUSE.value)
  print(f"[sweep] {len(linked)} point(s) linked to finished runs with the same config and "
        f"data in {', '.join(_REUSE.value)}" + "".join(f"\n  {n} -> {s}" for n, s in linked))
  if refused:
    print(f"[sweep] {len(refused)} finished run(s) with a point's config not linked (the "
          "point runs instead):" + "".join(f"\n  {s}: {why}" for _, s, why in refused))


def _run_local(sweep_dir: str, names: Sequence[str], commands: Sequence[list],
               configs) -> int:
  """Runs the unfinished points as local processes, --parallel at once, then writes the
  report; 130 when interrupted, 1 when a point or the report failed, else 0."""
  from transformer.sweep.local import Job, run_jobs, visible_gpus
  jobs = [Job(n, os.path.join(sweep_dir, n), c,
              finished=lambda w=os.path.join(sweep_dir, n), s=cfg.train.num_steps:  # noqa: B008
              sweep_lib.is_finished(w, s))
          for n, c, cfg in zip(names, commands, configs)]
  outcome = run_jobs(jobs, _PARALLEL.value, gpus=visible_gpus())
  stopped = outcome["stopped"] or outcome["not_started"]
  print(f"[sweep] finished {len(outcome['finished'])} of {len(jobs)}; failed "
        f"{len(outcome['failed'])}; stopped {len(outcome['stopped'])}; not started "
        f"{len(outcome['not_started'])}"
        + (f"; in use by another process {len(outcome['in_use'])} (run the sweep again once "
           "they finish)" if outcome["in_use"] else "") + ".")
  for job in outcome["failed"]:
    print(f"[sweep] FAILED {job.name} (exit {job.returncode}): {job.log_path}")
  if stopped:
    print("[sweep] Interrupted: run the same command again to resume.")
    return 130
  try:
    from transformer.report.write import write_report
    print(f"[sweep] Report: {write_report(sweep_dir, _REPORT_METRIC.value)}")
  except Exception as e:  # noqa: BLE001 -- the runs are safe; say why the report is missing
    print(f"[sweep] The report failed ({type(e).__name__}: {e}); rerun it with "
          f"python launch.py --mode=report --sweep_dir={sweep_dir}")
    return 1
  return 1 if outcome["failed"] or outcome["in_use"] else 0


def _slurm(sweep_dir, points, configs, names, commands) -> int:
  from transformer.sweep.slurm import SlurmResources, array_script, submit, write_script
  todo = [i for i, (n, c) in enumerate(zip(names, configs))
          if not sweep_lib.is_finished(os.path.join(sweep_dir, n), c.train.num_steps)]
  if not todo:
    print("[sweep] Every point has finished; nothing to submit. Report: python launch.py "
          f"--mode=report --sweep_dir={sweep_dir}")
    return 0
  res = SlurmResources(gpus_per_task=_SLURM_GPUS.value, cpus_per_task=_SLURM_CPUS.value,
                       mem=_SLURM_MEM.value, time=_SLURM_TIME.value,
                       partition=_SLURM_PARTITION.value, account=_SLURM_ACCOUNT.value,
                       max_parallel=_PARALLEL.value if _PARALLEL.value > 1 else 0,
                       extra=tuple(_SLURM_EXTRA.value))
  text = array_script([names[i] for i in todo], [commands[i] for i in todo], sweep_dir,
                      REPO_ROOT, res, job_name="sweep-" + os.path.basename(sweep_dir))
  path = write_script(text, sweep_dir)
  print(f"[sweep] {len(todo)} of {len(points)} points to run; sbatch script: {path}")
  if _DRY_RUN.value:
    print(text)
    return 0
  try:
    print(f"[sweep] {submit(path)}")
  except RuntimeError as e:
    print(f"[sweep] {e}", file=sys.stderr)
    return 1
  print(f"[sweep] When the tasks end: python launch.py --mode=report --sweep_dir={sweep_dir}")
  return 0
