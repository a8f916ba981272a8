"""Every flag of every `launch.py` mode, checked before any work starts.

`check_flags(mode, values, given, workdir)` raises a CommandLineError (exit status 2) for the
first flag that is wrong: one a mode does not read, a count below its minimum, a path of the
wrong kind, a checkpoint step that does not exist, a SLURM option sbatch would refuse. It only
looks at the flags and the file system: no JAX, no TensorFlow, nothing written.
"""

from __future__ import annotations

import os
import re
from typing import Any, Collection, Mapping, Optional, Sequence

from transformer import paths
from transformer.cli import modes
from transformer.errors import CommandLineError
from transformer.sampling import Sampling
from transformer.sweep.points import manifest_path
from transformer.sweep.slurm import SlurmResources

MODES = modes.NAMES
# Modes whose --workdir is a trained run, and the modes that read each flag (a flag not listed
# is read by every mode): both from the table of modes, transformer/cli/modes.py.
_READS_A_RUN = tuple(mode.name for mode in modes.MODES if mode.reads_a_run)
READ_BY: dict[str, tuple[str, ...]] = modes.read_by()

# Integer flags and their least value (None, where allowed, means "not given").
# The sampling flags are checked by the `Sampling` they build (`transformer.sampling`).
MINIMUM = {"num_samples": 1, "step": 0,
           "bench_steps": 1, "data_bench_batches": 1, "parallel": 1, "num_processes": 1,
           "process_id": 0, "distributed_timeout": 1, "heartbeat_timeout": 1,
           "slurm_gpus_per_task": 0, "slurm_cpus_per_task": 0, "num_slices": 1}

_HELP = "`python launch.py --help` lists the modes and flags."
_NOT_READ_HINT = {("workdir", "sweep"): "each point runs in <--sweep_dir>/<point name>",
                  ("workdir", "report"): "give the sweep's directory as --sweep_dir",
                  ("step", "train"): "a run resumes from its latest checkpoint"}


def check_flags(mode: str, values: Mapping[str, Any], given: Collection[str],
                workdir: str) -> None:
  """Raises CommandLineError for the first wrong flag of `--mode=mode`.

  Args:
    values: every flag's value by name (defaults included).
    given: the names of the flags on the command line.
    workdir: `--workdir`, or the default one when it is not given.
  """
  check_read_by_mode(mode, given)
  check_numbers(values)
  if mode == "sample":
    check_sample_text(values.get("prompt", ""), values.get("source", ""))
  check_multihost(values)
  if mode in READ_BY["workdir"]:
    check_workdir(mode, workdir, "workdir" in given)
  if mode in READ_BY["step"] and values.get("step") is not None:
    check_step(values["step"], workdir)
  if mode == "sweep":
    check_sweep(values)
  if mode == "report":
    check_report(values.get("sweep_dir"), values.get("runs") or [], values.get("report_dir"))
  if mode == "prepare":
    check_prepare_dir(values.get("prepare_dir"), values.get("overwrite", False))
  if mode == "compile":
    check_compile(values)
  if mode == "export":
    check_export_dir(values.get("export_dir"), values.get("step"), workdir,
                     values.get("overwrite", False))


def check_read_by_mode(mode: str, given: Collection[str]) -> None:
  """A flag the mode does not read would be silently ignored: refuse it."""
  for name in sorted(given):
    modes = READ_BY.get(name)
    if modes is not None and mode not in modes:
      hint = _NOT_READ_HINT.get((name, mode), "drop it, or give the mode that reads it")
      raise CommandLineError(f"--{name} is not read by --mode={mode} (only by "
                             f"{', '.join(modes)}): {hint}. {_HELP}")


def check_numbers(values: Mapping[str, Any]) -> None:
  """Counts, seconds and indices at or above their least value; sampling settings in range
  (the `Sampling` they build validates them)."""
  for name, least in MINIMUM.items():
    value = values.get(name)
    if value is not None and value < least:
      raise CommandLineError(f"--{name}={value}: must be at least {least}.")
  Sampling.from_flags(values)
  check_batch_sizes(values.get("bench_batch_sizes") or [])


# Digits 0-9 only: str.isdigit() and a regex's \d also pass '²' or '٣', which int() refuses.
_ASCII_INT = re.compile(r"^[0-9]+$")


def check_batch_sizes(sizes: list[str]) -> None:
  """`--bench_batch_sizes`: positive ints, each once."""
  for size in sizes:
    if not _ASCII_INT.match(size.strip()) or int(size) < 1:
      raise CommandLineError(f"--bench_batch_sizes={','.join(sizes)}: {size!r} is not a "
                             "positive int (e.g. --bench_batch_sizes=16,32,64).")
  if len({int(s) for s in sizes}) != len(sizes):
    raise CommandLineError(f"--bench_batch_sizes={','.join(sizes)}: a batch size is repeated.")


def check_sample_text(prompt: str, source: str) -> None:
  if prompt and source:
    raise CommandLineError("--prompt and --source were both given: --prompt is the text a "
                           "decoder LM continues, --source the text an encoder-decoder "
                           "decodes; give the one for the run in --workdir.")
  if not prompt and not source:
    raise CommandLineError("--mode=sample needs the text to start from: --prompt=TEXT (a "
                           "decoder LM continues it) or --source=TEXT (an encoder-decoder "
                           "decodes it).")


def check_multihost(values: Mapping[str, Any]) -> None:
  names = ("coordinator_address", "num_processes", "process_id")
  given = [values.get(n) is not None for n in names]
  if any(given) and not all(given):
    raise CommandLineError("--coordinator_address, --num_processes and --process_id go "
                           "together; give all three (or none, inside SLURM / Open MPI / a "
                           "TPU pod).")
  if not all(given):
    return
  if values.get("distributed") == "off":
    raise CommandLineError("--distributed=off runs one process: drop --coordinator_address, "
                           "--num_processes and --process_id, or use --distributed=auto.")
  if values["process_id"] >= values["num_processes"]:
    raise CommandLineError(f"--process_id={values['process_id']} must be in [0, "
                           f"--num_processes={values['num_processes']}).")
  address = values["coordinator_address"]
  host, colon, port = address.rpartition(":")
  if not colon or not host or not _ASCII_INT.match(port) or not 0 < int(port) < 65536:
    raise CommandLineError(f"--coordinator_address={address}: expected HOST:PORT, e.g. "
                           "10.0.0.1:12345 (process 0's host and a free port).")


def _workdir_flag(workdir: str, given: bool) -> str:
  return f"--workdir={workdir}" if given else f"--workdir (default {workdir})"


def check_workdir(mode: str, workdir: str, given: bool) -> None:
  """eval and sample read a trained run's workdir; the other modes create one if needed. A
  URL (`gs://...`) is checked for a usable backend only; eval and sample then read it."""
  flag = _workdir_flag(workdir, given)
  if paths.has_scheme(workdir):
    paths.check_backend(workdir)
    if mode in _READS_A_RUN:
      _check_remote_run(flag, mode, workdir)
    return
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise CommandLineError(f"{flag} is a file, not a directory. Give a run's directory"
                           + (" (it is created if missing)." if mode not in _READS_A_RUN
                              else "."))
  if mode not in _READS_A_RUN:
    return
  if not os.path.isdir(workdir):
    raise CommandLineError(f"{flag} does not exist; --mode={mode} reads a trained run: point "
                           "--workdir at the directory --mode=train wrote.")
  if not os.path.isfile(os.path.join(workdir, "config.json")):
    raise CommandLineError(f"{flag} holds no config.json, so no run; point it at the directory "
                           "--mode=train wrote.")


def _check_remote_run(flag: str, mode: str, workdir: str) -> None:
  """eval and sample on a URL: the run's config.json is there (read within a bounded time)."""
  found = paths.bounded(f"{flag} cannot be read",
                        lambda: paths.isfile(paths.join(workdir, "config.json")),
                        error=CommandLineError)
  if not found:
    raise CommandLineError(f"{flag} holds no config.json, so no run; --mode={mode} reads a "
                           "trained run: point --workdir at the URL --mode=train wrote.")


def checkpoint_steps(workdir: str) -> list[int]:
  """The steps with a checkpoint folder in `<workdir>/checkpoints` (without importing orbax)."""
  folder = paths.join(workdir, "checkpoints")
  if not paths.isdir(folder):
    return []
  return sorted(int(d) for d in paths.listdir(folder) if d.isdigit())


def check_step(step: int, workdir: str) -> None:
  """`--step` names a checkpoint of the run (a run without any is reported later, as such)."""
  steps = checkpoint_steps(workdir)
  if steps and step not in steps:
    shown = ", ".join(map(str, steps))
    raise CommandLineError(f"--step={step}: {workdir}/checkpoints has no checkpoint of that "
                           f"step; it has steps {shown}. Leave --step out for the latest.")


def check_prepare_dir(path: Optional[str], overwrite: bool = False) -> None:
  """--mode=prepare writes its token file into a folder (created if missing) that holds no
  token file yet, unless --overwrite."""
  if not path:
    raise CommandLineError("--mode=prepare needs --prepare_dir=DIR, the folder to write the "
                           "token file into (created if missing).")
  if os.path.exists(path) and not os.path.isdir(path):
    raise CommandLineError(f"--prepare_dir={path} is a file, not a directory; give the folder "
                           "to write the token file into (created if missing).")
  meta = os.path.join(path, "meta.json")
  if os.path.exists(meta) and not overwrite:
    raise CommandLineError(f"--prepare_dir={path} already holds a token file ({meta}); give "
                           "another folder, or --overwrite to replace it.")


def check_compile(values: Mapping[str, Any]) -> None:
  """`--topology` names a slice of `transformer.train.topologies`; sweep and eval not both."""
  from transformer.train import topologies  # no JAX
  name = values.get("topology")
  if not name:
    raise CommandLineError("--mode=compile needs --topology=NAME, the TPU slice to compile for: "
                           f"{topologies.names_help()}.")
  if name not in topologies.TOPOLOGIES:
    raise CommandLineError(f"--topology={name}: not a TPU slice this knows; choose one of "
                           f"{topologies.names_help()}.")
  if values.get("compile_sweep") and values.get("compile_eval"):
    raise CommandLineError("--compile_sweep compiles train steps only; drop --compile_eval.")


def check_export_dir(path: Optional[str], step: Optional[int], workdir: str,
                     overwrite: bool = False) -> None:
  """--mode=export writes into a local folder (created if missing; `file:///abs/path` is
  `/abs/path`), never into the run, that holds nothing but an earlier export, replaced only
  with --overwrite."""
  if not path:
    raise CommandLineError("--mode=export needs --export_dir=DIR, the folder to write "
                           "model.safetensors and config.json into (created if missing).")
  path = paths.local_path(path)
  if paths.scheme(path) == "file":  # another host's file URL
    paths.check_backend(path, "--export_dir")
  if paths.has_scheme(path):
    raise CommandLineError(f"--export_dir={path}: give a local folder (copy it to the bucket "
                           "afterwards).")
  if os.path.exists(path) and not os.path.isdir(path):
    raise CommandLineError(f"--export_dir={path} is a file, not a directory; give the folder "
                           "to write model.safetensors and config.json into.")
  if not paths.has_scheme(workdir) and os.path.abspath(path) == os.path.abspath(workdir):
    raise CommandLineError(f"--export_dir={path} is the run's --workdir, whose config.json it "
                           "would replace; give another folder.")
  from transformer.cli.export import check_export_folder
  check_export_folder(path, overwrite)


def _sweep_file(spec: str) -> str:
  return spec.split(".py:", 1)[0] + ".py" if ".py:" in spec else spec


def check_sweep(values: Mapping[str, Any]) -> None:
  spec = values.get("sweep")
  if not spec:
    raise CommandLineError("--mode=sweep needs --sweep=FILE, a Python file with get_sweep() "
                           "(see experiments/).")
  path = _sweep_file(spec)
  if not os.path.isfile(path):
    kind = "is a directory" if os.path.isdir(path) else "does not exist"
    raise CommandLineError(f"--sweep={spec}: {path} {kind}; give a Python file with "
                           "get_sweep() (see experiments/).")
  sweep_dir = values.get("sweep_dir")
  if sweep_dir and paths.has_scheme(sweep_dir):
    paths.check_backend(sweep_dir, "--sweep_dir")
    if values.get("launcher") == "slurm" or values.get("reuse_runs_from"):
      raise CommandLineError(f"--sweep_dir={sweep_dir}: --launcher=slurm (scripts and logs) "
                             "and --reuse_runs_from (symlinks) need a local --sweep_dir; "
                             "give a local or mounted folder.")
  elif sweep_dir and os.path.exists(sweep_dir) and not os.path.isdir(sweep_dir):
    raise CommandLineError(f"--sweep_dir={sweep_dir} is a file, not a directory. Give the "
                           "sweep's directory (created if missing; one workdir per point).")
  for other in values.get("reuse_runs_from") or ():
    _check_sweep_dir(other, "--reuse_runs_from")
  if values.get("points"):
    try:
      re.compile(values["points"])
    except re.error as e:
      raise CommandLineError(f"--points={values['points']}: not a regular expression ({e}); "
                             "give one that point names match, e.g. 'seed=[34]$'.") from None
  check_slurm(values)


def check_report(sweep_dir: Optional[str], runs: Sequence[str] = (),
                 report_dir: Optional[str] = None) -> None:
  """`--sweep_dir` (a sweep's report) or `--runs` with `--report_dir` (runs launched by hand,
  transformer/report/compare.py), not both."""
  if runs:
    if sweep_dir:
      raise CommandLineError("--runs and --sweep_dir were both given: --runs compares "
                             "workdirs launched by hand and writes to --report_dir; "
                             "--sweep_dir reports one sweep. Give one of them.")
    if not report_dir:
      raise CommandLineError("--mode=report --runs needs --report_dir=DIR, the directory "
                             "the comparison is written to.")
    if os.path.exists(report_dir) and not os.path.isdir(report_dir):
      raise CommandLineError(f"--report_dir={report_dir} is a file; give a directory.")
    from transformer.report.compare import check_runs
    check_runs(runs)
    return
  if report_dir:
    raise CommandLineError("--report_dir is where --runs writes its comparison; a sweep's "
                           "report goes into its --sweep_dir. Drop --report_dir or give --runs.")
  if not sweep_dir:
    raise CommandLineError("--mode=report needs --sweep_dir=DIR (a directory made by "
                           "--mode=sweep), or --runs=W1,W2 --report_dir=DIR to compare runs "
                           "launched by hand.")
  from transformer.sweep.points import holds_studies
  if holds_studies(sweep_dir):
    return  # a folder of studies (experiments/results): the report writes their summary
  _check_sweep_dir(sweep_dir, "--sweep_dir")


def _check_sweep_dir(path: str, flag: str) -> None:
  if paths.has_scheme(path):
    paths.check_backend(path, flag)
    if not paths.bounded(f"{flag}={path} cannot be read",
                         lambda: bool(manifest_path(path)), error=CommandLineError):
      raise CommandLineError(f"{flag}={path} holds no sweep.json (nor sweep.json.xz), so no "
                             "sweep; give a directory made by --mode=sweep.")
    return
  if not os.path.isdir(path):
    kind = "is a file, not a directory" if os.path.exists(path) else "does not exist"
    raise CommandLineError(f"{flag}={path} {kind}; give a directory made by --mode=sweep.")
  if not manifest_path(path):
    raise CommandLineError(f"{flag}={path} holds no sweep.json (nor sweep.json.xz), so no "
                           "sweep; give a directory made by --mode=sweep.")


_SLURM_TIME = re.compile(r"^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2})$", re.ASCII)
_SLURM_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE | re.ASCII)


def slurm_seconds(time: str) -> int:
  """Seconds in a SLURM time limit (sbatch's forms: MINUTES, MINUTES:SECONDS, HH:MM:SS,
  DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS)."""
  days, _, rest = time.rpartition("-")
  parts = [int(p) for p in rest.split(":")]
  if days:  # DAYS-HOURS[:MINUTES[:SECONDS]]
    hours, minutes, seconds = (parts + [0, 0])[:3]
  elif len(parts) == 3:  # HH:MM:SS
    hours, minutes, seconds = parts
  else:  # MINUTES or MINUTES:SECONDS
    hours, (minutes, seconds) = 0, (parts + [0])[:2]
  return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
_SLURM_OPTION = re.compile(r"^-{0,2}[A-Za-z][\w-]*(=\S+)?$")


def check_slurm(values: Mapping[str, Any]) -> None:
  """Values that go into the sbatch script's `#SBATCH` lines, in forms sbatch accepts."""
  time = values.get("slurm_time") or ""
  if time and not _SLURM_TIME.match(time):
    raise CommandLineError(f"--slurm_time={time}: expected MINUTES, HH:MM:SS or D-HH:MM:SS "
                           "(e.g. 04:00:00).")
  lead = SlurmResources.signal_lead_s
  if time and slurm_seconds(time) <= lead:
    raise CommandLineError(f"--slurm_time={time}: must be longer than the {lead} s before the "
                           "limit at which each task is told to save and requeue "
                           f"(--signal=B:USR1@{lead}); give e.g. --slurm_time=00:30:00.")
  mem = values.get("slurm_mem") or ""
  if mem and not _SLURM_MEM.match(mem):
    raise CommandLineError(f"--slurm_mem={mem}: expected a size such as 32G or 16000M.")
  for option in values.get("slurm_extra") or ():
    if not _SLURM_OPTION.match(option):
      raise CommandLineError(f"--slurm_extra: {option!r} is not an sbatch option; give "
                             "NAME=VALUE items without spaces, e.g. --slurm_extra=qos=high.")
  for name in ("slurm_partition", "slurm_account"):
    value = values.get(name) or ""
    if re.search(r"\s", value):
      raise CommandLineError(f"--{name}={value!r}: a SLURM name has no spaces.")
