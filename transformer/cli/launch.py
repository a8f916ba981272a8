"""Command-line entry point behind `launch.py`: parse flags, validate the config, run a mode.
A mode is an entry of `modes.py`'s table (what it reads, writes, runs); its runner is here."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import sys
import threading
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from transformer.cli import sweep_and_report as sweep_cli  # defines the sweep / report flags
from transformer import paths
from transformer.cli import modes
from transformer.cli.args import DEFAULT_CONFIG, config_arg, parse_flags
from transformer.config import ConfigError, from_config_dict
from transformer.errors import CommandLineError, RunError, exit_with
from transformer.sampling import FLAGS as SAMPLING_FLAGS, Sampling
from transformer.train import runtime, topologies

_CONFIG = config_flags.DEFINE_config_file(
    "config", DEFAULT_CONFIG,
    "Config file, optionally with a variant: configs/default.py[:variant]. Override fields "
    "with --config.section.field=value.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory. Default: runs/<config name>[:variant][+overrides].")
_MODE = flags.DEFINE_enum("mode", modes.DEFAULT, modes.NAMES, modes.flag_help())
_PREPARE_DIR = flags.DEFINE_string("prepare_dir", None, "prepare: the folder to write the token "
                                   "file into (train.bin, <eval split>.bin, meta.json).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "prepare: replace the token file that "
                               "--prepare_dir already holds; export: replace the earlier "
                               "export in --export_dir.")
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "compile: the TPU slice to compile for, by its Cloud name: "
    + topologies.names_help() + " (v4 and v5p count cores, two per chip).")
_NUM_SLICES = flags.DEFINE_integer("num_slices", 1, "compile: slices of --topology joined by "
                                   "the data-center network (set parallel.dcn_data to match).")
_COMPILE_SWEEP = flags.DEFINE_bool(
    "compile_sweep", False, "compile: instead of the config's batch, find the largest batch per "
    "device that fits for each remat (none, minimal, full) and layout (data, fsdp); one table.")
_COMPILE_EVAL = flags.DEFINE_bool("compile_eval", False, "compile: compile the eval step too.")
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "export: the folder to write "
                                  "model.safetensors and config.json into.")
_PROMPT = flags.DEFINE_string("prompt", "", "sample: the text to continue.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 200, "sample: tokens to generate.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "sample: softmax temperature; 0 = greedy.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "sample: keep the k most likely tokens; 0 = all.")
_TOP_P = flags.DEFINE_float("top_p", 0.95, "sample: nucleus probability mass; 1 = all.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "sample: continuations to draw.")
_SAMPLE_SEED = flags.DEFINE_integer("sample_seed", 0, "sample: random seed.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "Multi-host: host:port of process 0's coordinator. Not "
    "needed under SLURM, Open MPI or on TPU pods, where JAX detects the cluster.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Multi-host: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Multi-host: this process's index.")
_DISTRIBUTED = flags.DEFINE_enum(
    "distributed", "auto", ["auto", "on", "off"], "Multi-host: auto starts jax.distributed when "
    "the coordinator flags are given or JAX's cluster detectors find a SLURM job step, Open "
    "MPI job or Cloud TPU slice of more than one process; on: always (an error if nothing "
    "says how); off: never, one process.")
_JOIN_TIMEOUT = flags.DEFINE_integer(
    "distributed_timeout", 120, "Multi-host: seconds to wait for every process to join before "
    "giving up with a message naming the coordinator.")
_HEARTBEAT_TIMEOUT = flags.DEFINE_integer(
    "heartbeat_timeout", 45, "Multi-host: seconds without a heartbeat after which a process "
    "counts as dead and every other process stops.")
_BENCH_STEPS = flags.DEFINE_integer("bench_steps", 10, "bench, data_bench: timed steps after "
                                     "warm-up.")
_BENCH_BATCH_SIZES = flags.DEFINE_list(
    "bench_batch_sizes", [], "bench: global batch sizes to time in turn, e.g. 16,32,64 (a row "
    "each and the fastest); default: the config's train.batch_size.")
_DATA_BENCH_BATCHES = flags.DEFINE_integer("data_bench_batches", 200,
                                           "data_bench: pipeline batches to time.")
_DATA_BENCH_SKIP_MODEL = flags.DEFINE_bool("data_bench_skip_model", False,
                                           "data_bench: time the pipeline only.")
# --mode=eval and the encoder-decoder side of --mode=sample.
_EVAL_SPLIT = flags.DEFINE_string("eval_split", "", "eval: TFDS split to score; default: the "
                                  "run's data.eval_split.")
_STEP = flags.DEFINE_integer("step", None, "eval, export: checkpoint step; default: the "
                             "latest.")
_SOURCE = flags.DEFINE_string("source", "", "sample (encoder-decoder): the source to decode.")
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 1, "sample (encoder-decoder): beams; 1 = greedy "
                                  "(--temperature 0) or sampling.")


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None, *, distributed: str = "auto",
                           join_timeout: int = 120, heartbeat_timeout: int = 45) -> bool:
  """Starts JAX's distributed runtime when asked; must run before anything touches a device.
  Returns whether it did.

  `distributed`: "auto" starts it when the three coordinator flags are given, or when JAX's
  own cluster detectors (`transformer/cli/cluster.py`: a SLURM job step, Open MPI, a Cloud TPU
  VM or GKE TPU slice) find an environment of more than one process; "on" always starts it
  (an error in one line when neither flags nor a cluster say how); "off" never does.

  Joining is bounded: if not every process has joined within `join_timeout` seconds, this
  process prints what to check (naming the coordinator address) and exits with status 3.
  Once running, a process that dies (killed, or failed: see `exit_at_once_on_failure`) is noticed
  by the others within `heartbeat_timeout` seconds, and they stop too instead of waiting in a
  collective. On CPU the cross-process collectives go through gloo.
  """
  given = [v is not None for v in (coordinator_address, num_processes, process_id)]
  if any(given) and not all(given):
    raise ConfigError("--coordinator_address, --num_processes and --process_id go together; "
                      "give all three (or none, inside SLURM / Open MPI / a TPU pod).")
  if distributed not in ("auto", "on", "off"):
    raise ConfigError(f"--distributed={distributed!r}: choose auto, on or off.")
  if distributed == "off":
    if all(given):
      raise ConfigError("--distributed=off runs one process: drop --coordinator_address, "
                        "--num_processes and --process_id, or use --distributed=auto.")
    return False
  import jax  # after flag parsing, before any device is used
  cluster = None
  if not all(given):
    from transformer.cli import cluster as cluster_lib  # imports jax
    cluster = cluster_lib.detect()
    if cluster is None and distributed == "on":
      raise ConfigError("--distributed=on, but JAX's cluster detectors find no SLURM job step, "
                        "Open MPI job or Cloud TPU slice here; give --coordinator_address, "
                        "--num_processes and --process_id, or use --distributed=auto.")
    if cluster is cluster_lib.JAX_DETECTS:
      return _initialize_by_jax_detection(distributed, join_timeout, heartbeat_timeout)
    if cluster is None or (distributed == "auto" and cluster.num_processes < 2):
      return False
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  timeouts = dict(heartbeat_timeout_seconds=heartbeat_timeout,
                  # JAX aborts the process (a C++ stack trace) at its own timeout: let ours,
                  # with a message, come first.
                  initialization_timeout=join_timeout + 60)
  if all(given):
    if not 0 <= process_id < num_processes:
      raise ConfigError(f"--process_id={process_id} must be in [0, --num_processes="
                        f"{num_processes}).")
    with _join_deadline(coordinator_address, process_id, num_processes, join_timeout):
      jax.distributed.initialize(coordinator_address=coordinator_address,
                                 num_processes=num_processes, process_id=process_id, **timeouts)
  else:
    where = os.environ.get("JAX_COORDINATOR_ADDRESS", f"(detected by JAX's {cluster.kind})")
    with _join_deadline(where, None, cluster.num_processes, join_timeout):
      jax.distributed.initialize(cluster_detection_method=cluster.name, **timeouts)
  return True


def _initialize_by_jax_detection(distributed: str, join_timeout: int,
                                 heartbeat_timeout: int) -> bool:
  """The fallback when `jax._src.clusters` has moved: `jax.distributed.initialize()` detects
  the cluster itself. Its ValueError (no coordinator found) means a plain machine: one process
  under auto, an error under on."""
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    with _join_deadline("(detected by jax.distributed.initialize)", None, "?", join_timeout):
      jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout,
                                 initialization_timeout=join_timeout + 60)
  except ValueError as e:
    if distributed == "on":
      raise ConfigError(f"--distributed=on, but jax.distributed.initialize() finds no cluster "
                        f"here ({e}); give --coordinator_address, --num_processes and "
                        "--process_id, or use --distributed=auto.") from None
    return False
  return True


@contextlib.contextmanager
def _join_deadline(address: str, process_id, num_processes, seconds: int):
  """Exits the process with a message if the block has not finished within `seconds`."""
  def give_up():
    who = (f"process {process_id} of {num_processes}" if process_id is not None
           else "this process")
    reachable = _tcp_reachable(address)
    check = ("the coordinator answers, so some process has not started or cannot reach it: "
             "check that all --num_processes processes were launched, with the same "
             "--coordinator_address and distinct --process_id values"
             if reachable else
             "nothing answers at that address: check that process 0 runs on that host and "
             "port, that the port is open between the hosts, and that the address is right")
    print(f"Error: {who} could not join the distributed run at --coordinator_address="
          f"{address} within {seconds}s (--distributed_timeout): {check}.",
          file=sys.stderr, flush=True)
    os._exit(3)  # the main thread is blocked inside JAX's C++ client
  timer = threading.Timer(seconds, give_up)
  timer.daemon = True
  timer.start()
  try:
    yield
  finally:
    timer.cancel()


def _tcp_reachable(address: str) -> bool:
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
      return True
  except (OSError, ValueError):
    return False


@contextlib.contextmanager
def exit_at_once_on_failure():
  """In a multi-process run, turns an exception into an immediate exit (status 1).

  A Python exit would wait in JAX's distributed shutdown for the other processes, which are
  themselves waiting for this one in the next collective: both would hang. Exiting at once
  stops this process's heartbeats, so the others stop within the heartbeat timeout.
  """
  try:
    yield
  except BaseException as e:
    # Only a run that joined a distributed one has peers to stop. Asking JAX otherwise would
    # import it and start a backend just to exit (libtpu, where installed, then prints its
    # search for a TPU under a flag error's one line).
    jax = sys.modules.get("jax")
    if (jax is None or not jax.distributed.is_initialized() or jax.process_count() == 1
        or (isinstance(e, SystemExit) and not e.code)):
      raise
    if not isinstance(e, SystemExit):
      traceback.print_exc()
    text = str(e).lower()
    lost_peer = any(m in text for m in ("closed by peer", "gloo", "unavailable", "heartbeat"))
    why = (" A collective lost contact with another process: that process is gone (its own "
           "log says why)." if lost_peer else "")
    print(f"Process {jax.process_index()} of {jax.process_count()} failed; exiting now so "
          f"that the other processes stop too.{why}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def default_workdir(config_arg: str, argv: list[str]) -> str:
  """`runs/<config stem>[:variant][+<override>...]`, so different configs never share a run."""
  path, _, variant = config_arg.partition(":")
  name = os.path.splitext(os.path.basename(path))[0] + (f"-{variant}" if variant else "")
  overrides = [a[len("--config."):] for a in argv if a.startswith("--config.")]
  if overrides:
    suffix = "+".join(re.sub(r"[^A-Za-z0-9._=,-]", "_", o) for o in overrides)
    if len(suffix) > 80:
      suffix = suffix[:60] + "-" + hashlib.sha1(suffix.encode()).hexdigest()[:10]
    name += "+" + suffix
  return os.path.join("runs", name)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax and TFDS log every file they touch at INFO
  workdir = paths.local_path(_WORKDIR.value or  # file:///abs/path is /abs/path
                             default_workdir(config_arg(sys.argv[1:], "configs/default.py"),
                                             sys.argv))
  _check_flags(workdir)
  _check_writes(workdir)
  try:
    config = from_config_dict(_CONFIG.value)
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  mode = modes.BY_NAME[_MODE.value]
  if mode.device:  # the other modes run before anything touches a device
    _start_devices(config)
  # Heavy imports (JAX, TensorFlow) after validation, for the chosen mode only.
  modes.runner(mode)(config, workdir)


def _start_devices(config) -> None:
  """The accelerator settings (issue 11: XLA flags before JAX starts a backend, then the
  compilation cache), the distributed runtime, and a check that the mesh fits the devices."""
  added = runtime.add_gpu_xla_flags(config.train.xla_gpu_flags)
  if added:
    logging.warning("GPU: added XLA flags %s (train.xla_gpu_flags=False to skip)", added)
  runtime.skip_absent_tpu()
  if config.train.compilation_cache_dir:
    runtime.enable_compilation_cache(config.train.compilation_cache_dir)
  try:
    initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                           distributed=_DISTRIBUTED.value, join_timeout=_JOIN_TIMEOUT.value,
                           heartbeat_timeout=_HEARTBEAT_TIMEOUT.value)
    import jax  # after the distributed initialization
    from transformer.train.parallel import make_mesh  # as jax
    if config.parallel.strategy == "jit":  # the mesh must fit the devices: say so before data
      make_mesh(config.parallel, jax.devices())
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  except RunError as e:
    _exit_with(e)


def _writes(workdir: str) -> list[tuple[str, str, str]]:
  """`(folder, flag, what)` for the folder `--mode` writes into: the first of its `writes`
  (transformer/cli/modes.py) whose flag has a value; none for bench (it writes only with a
  profile, which `train.profile_steps` asks for), compile and data_bench."""
  for flag, what in modes.BY_NAME[_MODE.value].writes:
    value = flags.FLAGS[flag].value
    folder = workdir if flag == "workdir" else value and paths.local_path(value)  # file:///x
    if folder:
      return [(folder, f"--{flag}", what)]
  return []


def _check_writes(workdir: str) -> None:
  """Every folder this mode writes into takes a write, before any data is read or anything
  compiled: a read-only place is one line, not a traceback after the work."""
  from transformer.cli.preflight import check_writable
  for folder, flag, what in _writes(workdir):
    try:
      check_writable(folder, flag, _MODE.value, what)
    except RunError as e:
      exit_with(e)


def _check_flags(workdir: str) -> None:
  """Every flag of this mode (transformer/cli/flag_checks.py); exit status 2 on a wrong one."""
  from transformer.cli.flag_checks import check_flags
  names = [n for n in flags.FLAGS if n != "config" and not n.startswith("config.")]
  try:
    check_flags(_MODE.value, {n: flags.FLAGS[n].value for n in names},
                {n for n in names if flags.FLAGS[n].present}, workdir)
  except CommandLineError as e:
    exit_with(e)


def _exit_with(e: Exception) -> None:
  """One paragraph on stderr, exit status 2 for a command-line mistake, else 1; no traceback."""
  exit_with(e)


@contextlib.contextmanager
def _one_line(*also: type[Exception]):
  """A ConfigError or RunError (or one of `also`) in the block: `_exit_with` it."""
  try:
    yield
  except (ConfigError, RunError, *also) as e:
    _exit_with(e)


def _check_before_run(config, workdir: str | None):
  """Files and devices (and the workdir, given one) checked before data or compiling; returns
  the workdir's lock (transformer/workdir_lock.py), None without a workdir."""
  from transformer.cli.preflight import check_before_run  # as jax
  with _one_line():
    return check_before_run(config, workdir)


# What each mode runs (the `runs` of transformer/cli/modes.py's MODES), called as
# `mode_x(config, workdir)` once the flags, the config and (for a mode with `device`) the
# devices have passed their checks.


def mode_train(config, workdir: str) -> None:
  """The workdir's lock held until the run ends: released on success, errors and a SIGTERM
  save."""
  with _check_before_run(config, workdir) or contextlib.nullcontext(), _one_line():
    from transformer.train.loop import train_and_evaluate
    train_and_evaluate(config, workdir)


def mode_bench(config, workdir: str) -> None:
  _check_before_run(config, None)  # it writes no workdir (a profile aside): no lock
  with _one_line():
    from transformer.train.bench import run_benchmarks
    run_benchmarks(config, [int(b) for b in _BENCH_BATCH_SIZES.value],
                   steps=_BENCH_STEPS.value, workdir=workdir)


def mode_data_bench(config, workdir: str) -> None:
  with _one_line():
    from transformer.train.data_bench import run_data_benchmark
    run_data_benchmark(config, _DATA_BENCH_BATCHES.value, _BENCH_STEPS.value,
                       _DATA_BENCH_SKIP_MODEL.value)


def mode_diagnose(config, workdir: str) -> None:
  """It compares the saved config.json as train does, then diagnoses."""
  from transformer.cli.preflight import check_saved_config
  try:
    check_saved_config(workdir)
  except RunError as e:
    _exit_with(e)
  with _one_line():
    from transformer.train.diagnostics import run_diagnose
    run_diagnose(config, workdir)


def mode_sweep_or_report(config, workdir: str) -> None:
  """transformer/cli/sweep_and_report.py's `main`; exits with its status."""
  sys.exit(sweep_cli.main(_MODE.value, _CONFIG.value,
                          config_arg(sys.argv[1:], "configs/default.py"), sys.argv))


def mode_export(config, workdir: str) -> None:
  """One process: the run's checkpoint to Hugging Face files."""
  from transformer.cli.export import export
  export(workdir, paths.local_path(_EXPORT_DIR.value))  # file:///abs/path is /abs/path


def mode_prepare(config, workdir: str) -> None:
  """One process, no devices: TFDS and the tokenizer only. The files the config names are
  checked first, so a missing tokenizer file is not found after the dataset is prepared."""
  from transformer.cli.preflight import check_files
  with _one_line():
    check_files(config)
    from transformer.data.prepare import prepare  # TensorFlow
    prepare(config.data, _PREPARE_DIR.value)


def mode_compile(config, workdir: str) -> None:
  import jax  # before any backend starts: the compile needs none of this host's
  jax.config.update("jax_platforms", "cpu")
  from transformer.train.compile_for_topology import run_compile
  with _one_line():
    run_compile(config, _TOPOLOGY.value, _NUM_SLICES.value, eval_step=_COMPILE_EVAL.value,
                sweep=_COMPILE_SWEEP.value)


def mode_sample(config, workdir: str) -> None:
  from transformer.evaluation.sample import sample_from_workdir  # JAX
  text_in = _SOURCE.value or _PROMPT.value
  sampling = Sampling.from_flags({flag: flags.FLAGS[flag].value
                                  for flag in SAMPLING_FLAGS.values()})
  with _one_line(CommandLineError):
    texts = sample_from_workdir(
        workdir, text_in, sampling, num_samples=_NUM_SAMPLES.value, seed=_SAMPLE_SEED.value,
        step=_STEP.value, log=lambda line: print(line, file=sys.stderr, flush=True))
  how = (f"beam {sampling.beams}" if sampling.beams > 1 else f"temperature "
         f"{sampling.temperature}, top_k {sampling.top_k}, top_p {sampling.top_p}")
  for i, text in enumerate(texts):
    shown = f"{text_in} -> {text}" if _SOURCE.value else f"{text_in}{text}"
    print(f"--- sample {i} ({how}) ---\n{shown}")
  print(f"(appended to {workdir}/samples.txt)")


def mode_eval(config, workdir: str) -> None:
  """Scores a checkpoint of `workdir` in the layout of this command's `--config.parallel.*`
  (the run's own layout when none is given)."""
  # JAX and TensorFlow: only once the flags are parsed and the devices set up.
  from transformer.evaluation.evaluate import evaluate_workdir
  from transformer.train.eval_loop import format_eval
  layout_given = any(a.startswith("--config.parallel") for a in sys.argv)
  with _one_line(CommandLineError):
    metrics = evaluate_workdir(workdir, split=_EVAL_SPLIT.value, step=_STEP.value,
                               parallel=config.parallel if layout_given else None)
  print(f"eval of step {metrics['step']} on '{metrics['split']}': {format_eval(metrics)}")


def run() -> None:
  app.run(_main_guarded, flags_parser=parse_flags)


def _main_guarded(argv: list[str]) -> None:
  with exit_at_once_on_failure():
    main(argv)
