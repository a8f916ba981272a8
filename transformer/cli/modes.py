"""The modes of `launch.py --mode`, each one `Mode` in `MODES`, from which everything else about
a mode is derived: the flag's choices, its help and the header of `--help` (launch.py's
docstring); which modes read each flag (`read_by`, refused by the others in
transformer/cli/flag_checks.py); which modes start the devices and read the multi-host flags
(`device`), and whose --workdir must be a trained run (`reads_a_run`); the folders checked
for a write before anything runs (`writes`); and what `main` in transformer/cli/launch.py
calls (`runs`).

Adding a mode is one `Mode` here and the function its `runs` names, `f(config, workdir)`
(kept in transformer/cli/launch.py next to the others, which read their flags there). A mode
with flags of its own also defines them (launch.py) and, where their values need more than
a least value (flag_checks.MINIMUM), checks them in flag_checks.check_flags.

Imports nothing heavy: `launch.py` reads it first, and `runs` is imported only when the mode
runs (`runner`).
"""

import dataclasses
import importlib

# The multi-host flags (transformer/cli/launch.py), read by every mode with `device`.
DEVICE_FLAGS = ("coordinator_address", "num_processes", "process_id", "distributed",
                "distributed_timeout", "heartbeat_timeout")
_SAMPLE_FLAGS = ("prompt", "source", "max_new_tokens", "temperature", "top_k", "top_p",
                 "num_samples", "sample_seed", "beam_size")
_SLURM_FLAGS = ("slurm_gpus_per_task", "slurm_cpus_per_task", "slurm_mem", "slurm_time",
                "slurm_partition", "slurm_account", "slurm_extra")


@dataclasses.dataclass(frozen=True)
class Mode:
  """One `--mode`.

  Attributes:
    name: the value of `--mode`.
    help: what it does, one sentence without its final period (`--help`, `--mode`'s help).
    runs: "module:function" of what it runs, called as `function(config, workdir)` once the
      flags, the config and (with `device`) the devices have passed their checks.
    reads: the flags it reads beyond those every mode reads; a flag named by no mode is read
      by every mode, one named by some is refused by the others.
    device: it starts JAX on this machine's devices (the accelerator settings, the
      distributed runtime, the mesh check), so it reads `DEVICE_FLAGS` too.
    reads_a_run: its --workdir is a trained run (a directory with config.json), checked
      before it runs.
    writes: `(flag, what)` alternatives: the first of these flags with a value is the folder
      it writes `what` into, checked for a write before anything runs ("workdir" is the
      resolved --workdir, its default included); none given, nothing is checked.
  """
  name: str
  help: str
  runs: str
  reads: tuple[str, ...] = ()
  device: bool = False
  reads_a_run: bool = False
  writes: tuple[tuple[str, str], ...] = ()

  def flags(self) -> tuple[str, ...]:
    """Every flag this mode reads beyond those every mode reads."""
    return self.reads + (DEVICE_FLAGS if self.device else ())


MODES = (  # the default first
    Mode("train", "train and evaluate, resuming from the workdir's latest checkpoint (the "
         "default)",
         runs="transformer.cli.launch:mode_train", reads=("workdir",), device=True,
         writes=(("workdir", "its checkpoints, metrics and config.json"),)),
    Mode("eval", "score a checkpoint of --workdir (--step, --eval_split)",
         runs="transformer.cli.launch:mode_eval", reads=("workdir", "step", "eval_split"),
         device=True, reads_a_run=True,
         writes=(("workdir", "the evaluation's metrics (<workdir>/eval/)"),)),
    Mode("sample", "continue --prompt (LM) or decode --source (encoder-decoder) with the run "
         "in --workdir",
         runs="transformer.cli.launch:mode_sample", reads=("workdir", *_SAMPLE_FLAGS, "step"),
         device=True, reads_a_run=True, writes=(("workdir", "samples.txt"),)),
    # Writes only with a profile (train.profile_steps), into its workdir: not checked before.
    Mode("bench", "compile and time train steps on random inputs; print tokens/s and MFU",
         runs="transformer.cli.launch:mode_bench",
         reads=("workdir", "bench_steps", "bench_batch_sizes"), device=True),
    Mode("diagnose", "per-layer statistics on one batch, at init or from --workdir's latest "
         "checkpoint",
         runs="transformer.cli.launch:mode_diagnose", reads=("workdir",), device=True,
         writes=(("workdir", "diagnose.json and diagnose.webp"),)),
    Mode("sweep", "run every point of --sweep=FILE as its own training run (locally or on "
         "SLURM)",
         runs="transformer.cli.launch:mode_sweep_or_report",
         reads=("sweep", "parallel", "launcher", "dry_run", "reuse_runs_from", "points",
                *_SLURM_FLAGS,
                "sweep_dir", "report_metric"),
         writes=(("sweep_dir", "one workdir per point, sweep.json and the report"),)),
    Mode("report", "the report (markdown, CSV, plots) of the runs in --sweep_dir, or of "
         "--runs into --report_dir",
         runs="transformer.cli.launch:mode_sweep_or_report",
         reads=("sweep_dir", "runs", "report_dir", "report_metric"),
         writes=(("report_dir", "the comparison"),
                 ("sweep_dir", "report.md, results.csv and the figures"))),
    Mode("data_bench", "the input pipeline's tokens/s against the train step's",
         runs="transformer.cli.launch:mode_data_bench",
         reads=("bench_steps", "data_bench_batches", "data_bench_skip_model"), device=True),
    Mode("prepare", "write the configured dataset, tokenized, as a token file in "
         "--prepare_dir (train on it without TensorFlow: --config.data.name=token_file "
         "--config.data.source_dir=DIR)",
         runs="transformer.cli.launch:mode_prepare", reads=("prepare_dir", "overwrite"),
         writes=(("prepare_dir", "the token files and meta.json"),)),
    # No device of this machine: it compiles for compile-only TPU devices on the CPU backend.
    Mode("compile", "compile the train step for --topology, a TPU slice that is not here, and "
         "print its memory and FLOPs per device (transformer/train/compile_for_topology.py; "
         "needs the [tpu] extra)",
         runs="transformer.cli.launch:mode_compile",
         reads=("topology", "num_slices", "compile_sweep", "compile_eval")),
    Mode("export", "--workdir's latest checkpoint (or --step) as Hugging Face GPT-2 weights in "
         "--export_dir (model.safetensors, config.json, the run's tokenizer)",
         runs="transformer.cli.launch:mode_export",
         reads=("workdir", "step", "export_dir", "overwrite"),
         reads_a_run=True, writes=(("export_dir", "model.safetensors and config.json"),)),
)
NAMES = tuple(mode.name for mode in MODES)
DEFAULT = NAMES[0]
BY_NAME = {mode.name: mode for mode in MODES}


def read_by() -> dict[str, tuple[str, ...]]:
  """The modes that read each flag some mode names (in `MODES`' order); a flag missing here
  is read by every mode."""
  names = dict.fromkeys(flag for mode in MODES for flag in mode.flags())
  return {flag: tuple(mode.name for mode in MODES if flag in mode.flags()) for flag in names}


def runner(mode: Mode):
  """The function `mode.runs` names, imported now (its module may import JAX)."""
  module, _, function = mode.runs.partition(":")
  return getattr(importlib.import_module(module), function)


def header_lines(indent: str = "  ", width: int = 96) -> str:
  """Each mode with what it does, names aligned, wrapped at `width`: the `Modes (--mode):`
  block of `--help`."""
  import textwrap
  column = len(indent) + max(map(len, NAMES)) + 2
  return "\n".join(textwrap.fill(f"{indent}{m.name:<{column - len(indent) - 2}}  {m.help}",
                                 width, subsequent_indent=" " * column) for m in MODES)


def flag_help() -> str:
  """The `--mode` flag's own help: every mode and what it does, in one paragraph."""
  return "; ".join(f"{m.name}: {m.help}" for m in MODES) + "."
