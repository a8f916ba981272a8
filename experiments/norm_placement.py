"""Study: where the norm sits in the block, everything else equal.

Trains one config once per (placement, seed) and writes a report comparing them:

  python experiments/norm_placement.py --placements=pre,post --seeds=0,1 \
      --out=runs/study_norm_placement [--config=configs/default.py] [--config.x.y=...]

Each run has its own workdir under `--out` and resumes if interrupted, so rerunning the same
command finishes the study and rewrites the report from every run's metrics.
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from experiments.report import write_report  # noqa: E402
from transformer.config import NORM_PLACEMENTS, ConfigError, from_config_dict  # noqa: E402


def run_study(base, placements: list[str], seeds: list[int], out: str) -> str:
  """Trains every (placement, seed) of `base` (an ExperimentConfig) and writes the report."""
  from transformer.train.loop import train_and_evaluate  # heavy imports after validation
  unknown = [p for p in placements if p not in NORM_PLACEMENTS]
  if unknown:
    raise ConfigError(f"--placements has unknown value(s) {unknown}; known: {list(NORM_PLACEMENTS)}.")
  runs: dict[str, list[str]] = {}
  for placement in placements:
    for seed in seeds:
      cfg = dataclasses.replace(
          base, seed=seed, model=dataclasses.replace(base.model, norm_placement=placement))
      workdir = os.path.join(out, f"{placement}-seed{seed}")
      train_and_evaluate(cfg, workdir)
      runs.setdefault(placement, []).append(workdir)
  m = base.model
  notes = (f"Config: {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads, "
           f"{m.norm}, {base.train.num_steps} steps of {base.train.batch_size} x "
           f"{base.data.seq_len} tokens, peak lr {base.optim.learning_rate}, "
           f"warm-up {base.optim.warmup_steps}; seeds {seeds}. Only the norm placement varies.")
  return write_report(runs, out, "Norm placement study", notes)


def main():
  # Flags are defined here, not at import, so tests can import run_study next to launch.py's.
  config = config_flags.DEFINE_config_file(
      "config", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "configs", "default.py"), "Base config.", lock_config=True)
  placements = flags.DEFINE_list("placements", ["pre", "post"], "Norm placements to compare.")
  seeds = flags.DEFINE_list("seeds", ["0"], "Seeds (each placement is run once per seed).")
  out = flags.DEFINE_string("out", "runs/study_norm_placement", "Study directory.")

  def run(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    try:
      base = from_config_dict(config.value)
      path = run_study(base, placements.value, [int(s) for s in seeds.value], out.value)
    except ConfigError as e:
      sys.exit(f"Config error: {e}")
    print(f"Report: {path}")

  app.run(run)


if __name__ == "__main__":
  main()
