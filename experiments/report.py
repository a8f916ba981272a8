"""Reports over finished runs: read each workdir's metrics.jsonl, write a table and plots.

`write_report(runs, out_dir, title)` takes `{label: [workdir, ...]}` (several workdirs per
label are seeds) and writes `report.md` (final eval figures, mean and spread over seeds),
`results.csv` (one row per run) and `curves.png` (train loss and eval bits per byte against
step, one colour per label).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from typing import Mapping, Sequence


def read_metrics(workdir: str) -> dict[str, list[dict]]:
  """`{"train": [rows], "eval": [rows]}` from `<workdir>/metrics.jsonl`, in step order.

  A resumed run may log a step twice; the last line for a step wins.
  """
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} does not exist: has the run in {workdir} started?")
  by_split: dict[str, dict[int, dict]] = {}
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      by_split.setdefault(row["split"], {})[row["step"]] = row
  return {split: [rows[s] for s in sorted(rows)] for split, rows in by_split.items()}


def final_row(workdir: str) -> dict:
  """The last eval of a run plus its wall time (first to last metric line)."""
  metrics = read_metrics(workdir)
  if not metrics.get("eval"):
    raise ValueError(f"The run in {workdir} has no eval yet.")
  last = metrics["eval"][-1]
  times = [r["time"] for rows in metrics.values() for r in rows]
  diverged = any(r["loss"] != r["loss"] for r in metrics.get("train", []))  # NaN check
  return {"workdir": workdir, "step": last["step"], "eval_loss": last["loss"],
          "bits_per_byte": last.get("bits_per_byte", float("nan")),
          "wall_s": max(times) - min(times), "diverged": diverged}


def _spread(values: Sequence[float]) -> str:
  if len(values) == 1:
    return f"{values[0]:.4f}"
  return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def write_report(runs: Mapping[str, Sequence[str]], out_dir: str, title: str,
                 notes: str = "") -> str:
  """Writes report.md, results.csv and curves.png into `out_dir`; returns report.md's path."""
  os.makedirs(out_dir, exist_ok=True)
  rows = [dict(final_row(w), label=label) for label, dirs in runs.items() for w in dirs]

  with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=["label", "workdir", "step", "eval_loss",
                                           "bits_per_byte", "wall_s", "diverged"])
    writer.writeheader()
    writer.writerows(rows)

  lines = [f"# {title}", "", notes, "",
           "| variant | runs | final step | eval loss (nats/token) | bits/byte | diverged |",
           "|---|---|---|---|---|---|"]
  for label in runs:
    mine = [r for r in rows if r["label"] == label]
    lines.append(
        f"| {label} | {len(mine)} | {mine[0]['step']} | {_spread([r['eval_loss'] for r in mine])} "
        f"| {_spread([r['bits_per_byte'] for r in mine])} | "
        f"{sum(r['diverged'] for r in mine)} of {len(mine)} |")
  lines += ["", "Mean ± sample standard deviation over seeds where there are several.", "",
            "![train loss and eval bits per byte](curves.png)", "",
            "Raw figures: `results.csv`; every run's full metrics: its `metrics.jsonl`."]
  _plot(runs, os.path.join(out_dir, "curves.png"))
  path = os.path.join(out_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path


def _plot(runs: Mapping[str, Sequence[str]], path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (ax_train, ax_eval) = plt.subplots(1, 2, figsize=(11, 4))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for i, (label, dirs) in enumerate(runs.items()):
    for j, w in enumerate(dirs):
      m = read_metrics(w)
      kw = {"color": colors[i % len(colors)], "alpha": 0.9,
            "label": label if j == 0 else None}
      if m.get("train"):
        ax_train.plot([r["step"] for r in m["train"]], [r["loss"] for r in m["train"]], **kw)
      if m.get("eval"):
        ax_eval.plot([r["step"] for r in m["eval"]],
                     [r.get("bits_per_byte", r["loss"]) for r in m["eval"]], marker="o", **kw)
  ax_train.set(xlabel="step", ylabel="train loss (nats/token)", title="Training loss")
  ax_eval.set(xlabel="step", ylabel="eval bits per byte", title="Held-out bits per byte")
  for ax in (ax_train, ax_eval):
    ax.grid(alpha=0.3)
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
