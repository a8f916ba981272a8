"""The modes of `launch.py --mode`, listed once: the flag's choices, its help and the header of
`--help` (launch.py's docstring) all come from `MODES`. Adding a mode is one line here (plus
what it runs, in `transformer.cli.launch`). Imports nothing: `launch.py` reads it first."""

MODES = (  # (name, what it does), the default first
    ("train", "train and evaluate, resuming from the workdir's latest checkpoint (the default)"),
    ("eval", "score a checkpoint of --workdir (--step, --eval_split)"),
    ("sample", "continue --prompt (LM) or decode --source (encoder-decoder) with the run in "
               "--workdir"),
    ("bench", "compile and time train steps on random inputs; print tokens/s and MFU"),
    ("diagnose", "per-layer statistics on one batch, at init or from --workdir's latest "
                 "checkpoint"),
    ("sweep", "run every point of --sweep=FILE as its own training run (locally or on SLURM)"),
    ("report", "the report (markdown, CSV, plots) of the runs in --sweep_dir, or of --runs "
               "into --report_dir"),
    ("data_bench", "the input pipeline's tokens/s against the train step's"),
    ("prepare", "write the configured dataset, tokenized, as a token file in --prepare_dir "
                "(train on it without TensorFlow: --config.data.name=token_file "
                "--config.data.source_dir=DIR)"),
    ("compile", "compile the train step for --topology, a TPU slice that is not here, and print "
                "its memory and FLOPs per device (transformer/train/compile_for_topology.py; needs the [tpu] "
                "extra)"),
    ("export", "--workdir's latest checkpoint (or --step) as Hugging Face GPT-2 weights in "
               "--export_dir (model.safetensors, config.json, the run's tokenizer)"),
)
NAMES = tuple(name for name, _ in MODES)
DEFAULT = NAMES[0]


def header_lines(indent: str = "  ", width: int = 96) -> str:
  """Each mode with what it does, names aligned, wrapped at `width`: the `Modes (--mode):`
  block of `--help`."""
  import textwrap  # noqa: PLC0415
  column = len(indent) + max(map(len, NAMES)) + 2
  return "\n".join(textwrap.fill(f"{indent}{name:<{column - len(indent) - 2}}  {text}", width,
                                 subsequent_indent=" " * column) for name, text in MODES)


def flag_help() -> str:
  """The `--mode` flag's own help: every mode and what it does, in one paragraph."""
  return "; ".join(f"{name}: {text}" for name, text in MODES) + "."
