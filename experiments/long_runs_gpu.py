"""`long_runs` on one GPU: the same 33 points, their calls and their report, trained inside GPU
leases instead of 9 hours of 2 CPU cores.

  python3 scripts/accelerator_report.py run --out=$OUT --parts=replication \
      --study=experiments/long_runs_gpu.py:cpu --parallel=8 --budget_s=530

(on the GPU host, with `JAX_DEFAULT_MATMUL_PRECISION=highest` so that float32 matmuls are
float32, not TF32; the install step is the accelerator report's, README.) The report's
replication part writes the host's Python standard library as a token file
(`transformer/data/local_tokens.py`, the same byte-level corpus the CPU studies read through
TFDS, but of that host's Python: 3.12.3 on the leased H200s) and runs these points on it,
8 at a time sharing the one GPU. Because the corpus, its order and the platform differ, these
runs are never mixed with the CPU studies' runs: every point is trained here, the 600- and
2,400-step ones that `long_runs:cpu` links too.

Measured on the first lease (H200, 2026-11-27, the runs' logs): with 8 points at a time each
took 405-431 s for 9,600 steps; the next 8 were still compiling when that call was cut off.
The second lease (2026-11-28, `--parallel=8 --budget_s=570`, timeout_s 600) trained the next 8
long points: started together at 19:23:46, their first metric (step 0) came 206-214 s later,
then 9,600 steps took 148-160 s each (about 16 ms a step, 8 sharing the GPU). The call itself
was killed at its 600 s limit (the install and the probe come before the budget), so only the
60 s snapshot came back: 16 of 33 points are in `experiments/in_progress/long_runs_gpu/`. Give
`--budget_s` at least 60 s less than the call's timeout. What the 3.5 minutes before step 0 are
spent on is not known: from then on the report returns each run's log head
(`replication_logs.txt`). The third lease (2026-12-04, `--parallel=8 --budget_s=530`, the
points longest first) trained the 5 long points left and 5 of 2,400 steps: their step-0
diagnostics rows came 3 min 45 s to 3 min 55 s after the start, then 9,600 steps took 2.5
minutes. The 7 points left are six of 600 steps and one of 2,400.
The calls and the margin are `long_runs`'s, fixed before its runs.
"""

import dataclasses

from experiments import long_runs

CLAIM = long_runs.CLAIM
ATLAS = long_runs.ATLAS + " (one GPU, the host's stdlib as a token file)"
TOKEN_FILE = {"data.name": "token_file"}  # data.source_dir: the host's, given by the report


# long_runs' points when this twin began; those it has added since (5e-3 for post and pre,
# issue 69; seeds 3 and 4 of its DyT half, issue 68) come after them and are the CPU study's.
TWIN_POINTS = 33


def get_sweep(size: str = "cpu"):
  """`long_runs`' first `TWIN_POINTS` points, each reading the token file, the longest first
  (stable within a length): a lease's call is cut at its budget, and a 9,600-step point must
  start in its first wave to finish (about 3.5 minutes to step 0 and 2.5 of steps, 8 sharing
  the GPU), while a 600-step point left over costs the next lease little. Run names do not
  depend on the order."""
  twin = [{**point, **TOKEN_FILE} for point in long_runs.get_sweep(size)[:TWIN_POINTS]]
  return sorted(twin, key=lambda point: -point["train.num_steps"])


analyze = long_runs.analyze
figures = long_runs.figures
summarize = long_runs.summarize
# The robustness table moves `long_runs`' margin, the one its analysis reads.
THRESHOLDS = tuple(dataclasses.replace(t, module="experiments.long_runs")
                   if t.module is None else t for t in long_runs.THRESHOLDS)
THRESHOLDS_NOT_READ = long_runs.THRESHOLDS_NOT_READ
