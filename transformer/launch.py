"""Command-line entry point behind `launch.py`: parse flags, validate the config, run a mode."""

from __future__ import annotations

import hashlib
import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from transformer.config import ConfigError, from_config_dict

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "configs", "default.py")

_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG,
    "Config file, optionally with a variant: configs/default.py[:variant]. Override fields "
    "with --config.section.field=value.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory. Default: runs/<config name>[:variant][+overrides].")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "sample", "bench", "diagnose"],
                          "train: train and evaluate (resuming); sample: continue --prompt "
                          "with the LM in --workdir; bench: time train steps; diagnose: "
                          "per-layer statistics on one batch, at init or from --workdir's "
                          "latest checkpoint.")
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
_BENCH_STEPS = flags.DEFINE_integer("bench_steps", 10, "bench: timed steps after warm-up.")


def _in_cluster() -> bool:
  """True under a multi-process SLURM / Open MPI job or on a multi-host TPU slice."""
  env = os.environ
  return (int(env.get("SLURM_NTASKS", "1") or 1) > 1
          or int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1
          or "," in env.get("TPU_WORKER_HOSTNAMES", ""))


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> bool:
  """Starts JAX's distributed runtime when flags or the environment ask for more than one
  process; must run before anything touches a device. Returns whether it did.

  On CPU the cross-process collectives go through gloo.
  """
  import jax  # noqa: PLC0415 -- after flag parsing, before any device is used
  given = [v is not None for v in (coordinator_address, num_processes, process_id)]
  if any(given) and not all(given):
    raise ConfigError("--coordinator_address, --num_processes and --process_id go together; "
                      "give all three (or none, inside SLURM / Open MPI / a TPU pod).")
  if not all(given) and not _in_cluster():
    return False
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if all(given):
    if not 0 <= process_id < num_processes:
      raise ConfigError(f"--process_id={process_id} must be in [0, --num_processes="
                        f"{num_processes}).")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  else:
    jax.distributed.initialize()
  return True


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


def _config_arg(argv: list[str]) -> str:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return "configs/default.py"


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax and TFDS log every file they touch at INFO
  try:
    config = from_config_dict(_CONFIG.value)
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  workdir = _WORKDIR.value or default_workdir(_config_arg(sys.argv), sys.argv)
  try:
    initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    import jax  # noqa: PLC0415
    from transformer.train.parallel import mesh_shape  # noqa: PLC0415
    if config.parallel.strategy == "jit":  # the mesh must fit the devices: say so before data
      mesh_shape(config.parallel, jax.device_count())
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  if _MODE.value == "sample":
    _sample(workdir)
    return
  if _MODE.value == "bench":
    from transformer.train.bench import run_benchmark  # noqa: PLC0415
    try:
      run_benchmark(config, steps=_BENCH_STEPS.value)
    except ConfigError as e:
      sys.exit(f"Config error: {e}")
    return
  if _MODE.value == "diagnose":
    from transformer.diagnostics import run_diagnose  # noqa: PLC0415
    try:
      run_diagnose(config, workdir)
    except ConfigError as e:
      sys.exit(f"Config error: {e}")
    return
  if _MODE.value == "train":
    from transformer.train.loop import train_and_evaluate  # heavy imports after validation
    try:
      train_and_evaluate(config, workdir)
    except ConfigError as e:
      sys.exit(f"Config error: {e}")


def _sample(workdir: str) -> None:
  from transformer.sample import sample_from_workdir
  try:
    texts = sample_from_workdir(
        workdir, _PROMPT.value, max_new_tokens=_MAX_NEW.value, temperature=_TEMPERATURE.value,
        top_k=_TOP_K.value, top_p=_TOP_P.value, num_samples=_NUM_SAMPLES.value,
        seed=_SAMPLE_SEED.value)
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  for i, text in enumerate(texts):
    print(f"--- sample {i} (temperature {_TEMPERATURE.value}, top_k {_TOP_K.value}, "
          f"top_p {_TOP_P.value}) ---\n{_PROMPT.value}{text}")
  print(f"(appended to {workdir}/samples.txt)")


def run() -> None:
  app.run(main)
