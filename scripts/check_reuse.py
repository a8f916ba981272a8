"""Retrains one committed run at the present code and compares its losses with the committed
ones: the check behind `--reuse_runs_from`, which links a run trained at an older commit into a
new study when its config and data match, on the premise that the code still computes the same.

  python scripts/check_reuse.py                       # lr_sensitivity's pre-norm, 3e-3, seed 0
  python scripts/check_reuse.py --study=experiments/results/norms \
      --point="norm=dyt,dyt_alpha_init=0.5,learning_rate=0.003,seed=0"

Prints each eval step's committed loss, the retrained one and their difference, and exits 1 when
the largest difference is above `--tolerance` (nats/token). Same machine, same versions: XLA's
CPU results are bitwise; another CPU (another instruction set) may round differently, which is
what the tolerance is for. One 600-step protocol point takes about 2 minutes on one core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from transformer.sweep.points import manifest_path, point_command, read_manifest  # noqa: E402
from transformer.workdir import read_metrics  # noqa: E402

DEFAULT_STUDY = os.path.join("experiments", "results", "lr_sensitivity")
DEFAULT_POINT = "norm_placement=pre,learning_rate=0.003,seed=0"


def eval_losses(workdir: str) -> dict:
  """`{step: eval loss}` of a run folder or packed run."""
  return {row["step"]: row["loss"] for row in read_metrics(workdir).get("eval", [])}


def retrain(study: str, point: str, workdir: str) -> dict:
  """Trains the point into `workdir` with the command its sweep ran (`point_command`: the
  study's config file, the sweep's shared overrides and the point's); returns its
  `{step: eval loss}`."""
  manifest = read_manifest(study)
  found = [p for p in manifest["points"] if p["name"] == point]
  if not found:
    raise SystemExit(f"check_reuse: {study} has no point {point!r}; its points are in "
                     f"{manifest_path(study)}")
  command = point_command(os.path.join(ROOT, "launch.py"),
                          manifest.get("config", "configs/default.py"),
                          manifest.get("overrides", []), found[0]["overrides"], workdir,
                          sys.executable)
  subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
  return eval_losses(workdir)


def compare(committed: dict, retrained: dict) -> float:
  """Prints the table and returns the largest |difference| (inf when a step is missing)."""
  print("| step | committed | retrained | difference |\n|---|---|---|---|")
  worst = 0.0
  for step in sorted(committed):
    if step not in retrained:
      print(f"| {step} | {committed[step]:.6f} | missing | - |")
      worst = float("inf")
      continue
    diff = retrained[step] - committed[step]
    worst = max(worst, abs(diff))
    print(f"| {step} | {committed[step]:.6f} | {retrained[step]:.6f} | {diff:+.2e} |")
  return worst


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--study", default=DEFAULT_STUDY, help="a committed study's folder")
  parser.add_argument("--point", default=DEFAULT_POINT, help="one point name of its sweep.json")
  parser.add_argument("--tolerance", type=float, default=1e-3, help="nats/token")
  args = parser.parse_args(argv)
  committed = eval_losses(os.path.join(args.study, args.point))
  if not committed:
    raise SystemExit(f"check_reuse: {args.point} of {args.study} has no eval rows to compare")
  with tempfile.TemporaryDirectory(prefix="check_reuse_") as tmp:
    worst = compare(committed, retrain(args.study, args.point, os.path.join(tmp, "run")))
  same = worst <= args.tolerance
  print(f"largest difference {worst:.2e} nats/token: "
        f"{'within' if same else 'ABOVE'} the tolerance {args.tolerance:g}")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
