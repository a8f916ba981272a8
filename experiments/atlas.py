"""The placement atlas's figure (issue 49): a heat map of a statistic over two knobs, the cells
where some seed did not train marked, so a reader takes in an interaction table at a glance."""

from __future__ import annotations

import math
import os
from typing import Callable, Optional, Sequence

from experiments import analysis as a
from transformer.report.runs import Run

NOT_TRAINED = ("collapsed", "diverged")  # a run's status that marks its cell


def loss_cells(runs: Sequence[Run], row_of: Callable[[Run], object], rows: Sequence,
               cols: Sequence) -> tuple[list[list[float]], list[list[bool]]]:
  """`(means, marked)`, each `[len(rows)][len(cols)]`: per cell (a row key, an LR) the mean
  clipped final eval loss over its runs (nan when none ended) and whether any of them
  collapsed or diverged."""
  means, marked = [], []
  for row in rows:
    at = [r for r in runs if row_of(r) == row]
    m_row, k_row = [], []
    for lr in cols:
      cell = [r for r in at if r.overrides[a.LR] == lr]
      vals = [v for v in (a.clipped_final_loss(r) for r in cell) if v is not None]
      m_row.append(sum(vals) / len(vals) if vals else math.nan)
      k_row.append(any(r.status in NOT_TRAINED for r in cell))
    means.append(m_row)
    marked.append(k_row)
  return means, marked


def heatmap(plt, values: Sequence[Sequence[float]], marked: Sequence[Sequence[bool]],
            row_labels: Sequence[str], col_labels: Sequence[str], xlabel: str, title: str,
            colour_label: str, symmetric: bool = False):
  """A figure: `values[i][j]` as colour (lower is better: the reversed viridis map; with
  `symmetric`, a signed difference: blue below 0, red above, on a scale centred at 0) with its
  number written in the cell; a marked cell hatched and labelled 'x' after its number; nan
  cells blank. Returns the figure."""
  import numpy as np
  data = np.array(values, dtype=float)
  fig, ax = plt.subplots(figsize=(1.1 * len(col_labels) + 2.6, 0.55 * len(row_labels) + 1.4))
  bound = float(np.nanmax(np.abs(data))) if symmetric and np.isfinite(data).any() else None
  image = ax.imshow(np.ma.masked_invalid(data), aspect="auto",
                    **({"cmap": "coolwarm", "vmin": -bound, "vmax": bound} if bound
                       else {"cmap": "viridis_r"}))
  median = np.nanmedian(data) if np.isfinite(data).any() else 0.0
  dark = (lambda v: abs(v) > 0.6 * bound) if bound else (lambda v: v > median)  # white text
  for i in range(data.shape[0]):
    for j in range(data.shape[1]):
      if marked[i][j]:
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                   edgecolor="0.3", lw=0))
      if not math.isnan(data[i, j]):
        ax.text(j, i, f"{data[i, j]:.2f}" + (" x" if marked[i][j] else ""), ha="center",
                va="center", fontsize=8, color="white" if dark(data[i, j]) else "black")
  ax.set_xticks(range(len(col_labels)), col_labels)
  ax.set_yticks(range(len(row_labels)), row_labels)
  ax.set_xlabel(xlabel)
  ax.set_title(title, fontsize=9)
  fig.colorbar(image, ax=ax, label=colour_label)
  fig.tight_layout()
  return fig


def loss_heatmap_figure(runs: Sequence[Run], sweep_dir: str, name: str,
                        row_of: Callable[[Run], object], rows: Sequence,
                        row_labels: Optional[Sequence[str]] = None) -> list[tuple[str, str]]:
  """Writes `name`: the mean clipped final loss per (row, LR), the cells where a seed
  collapsed or diverged hatched. Returns the report's `(caption, file)` list ([] without
  runs)."""
  from transformer.report import figures as report_figures
  if not runs:
    return []
  lrs = sorted({r.overrides[a.LR] for r in runs})
  means, marked = loss_cells(runs, row_of, rows, lrs)
  plt = report_figures.load_pyplot()
  fig = heatmap(plt, means, marked, row_labels or [str(r) for r in rows],
                [f"{lr:g}" for lr in lrs], "learning rate", "mean clipped final eval loss",
                "nats/token")
  report_figures.save_figure(plt, fig, os.path.join(sweep_dir, name), dpi=90)
  return [("Mean clipped final eval loss over seeds at each setting and LR (hatched, x: some "
           "seed collapsed or diverged)", name)]
