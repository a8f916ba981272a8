"""Sweep: where the norm sits in the block, everything else equal (every placement x 3 seeds).

  python launch.py --mode=sweep --sweep=experiments/norm_placement.py \
      --sweep_dir=runs/sweeps/norm_placement [--config=configs/default.py] [--parallel=2]

`--sweep=experiments/norm_placement.py:pre,post` sweeps only the placements named; by default
every published one (not `hybrid_v0`, this project's earlier reading of HybridNorm). Each point
trains in its own workdir under --sweep_dir; rerun the command to resume, and the report
(`report.md`, `results.csv`, plots) is written at the end.
"""

from transformer.config import NORM_PLACEMENTS
from transformer.sweep import product

SEEDS = (0, 1, 2)


def get_sweep(placements: str = ""):
  chosen = (placements.split(",") if placements
            else [p for p in NORM_PLACEMENTS if p != "hybrid_v0"])
  return product({"model.norm_placement": chosen}, {"seed": list(SEEDS)})
