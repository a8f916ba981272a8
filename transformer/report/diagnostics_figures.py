"""The report's per-layer diagnostics figures: the key quantities' layer profiles at the first
and last diagnostics step, the same over training, and a prefix's last layer against a swept
field; palette PNGs (`transformer.png.save_png`)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from transformer.report.figures import (is_number, key_diagnostic, layer_profiles, load_pyplot,
                                        lr_field, save_png, split_runs)
from transformer.report.runs import LAYER_NAME, NOT_METRICS, Run, group_label, groups, swept_fields
from transformer.report.stats import mean_ci, mean_clipped_loss_per_lr


def plot_last_layer_vs(runs: Sequence[Run], prefix: str, field: str, fields: Sequence[str],
                        path: str) -> bool:
  """Per-layer metrics whose name (layer index replaced by `*`, e.g.
  `decoder/*/feed_forward/grad_norm`) contains `prefix`: the last layer's value at the first
  diagnostics step against `field` (numeric), one line per metric and value of the other
  swept fields."""
  if not all(is_number(r.overrides.get(field)) for r in runs):
    return False
  others = [f for f in fields if f != field]
  points: dict[tuple, dict[float, list[float]]] = {}
  for r in runs:
    rows = r.metrics.get("diagnostics", [])
    if not rows or r.status == "diverged":
      continue
    for name, prof in layer_profiles(rows[0]).items():
      if prefix in name:
        key = (name,) + tuple((f, r.overrides.get(f)) for f in others)
        points.setdefault(key, {}).setdefault(r.overrides[field], []).append(prof[max(prof)])
  if not points:
    return False
  plt = load_pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.8))
  for key, by_x in points.items():
    xs = sorted(by_x)
    stats = [mean_ci(by_x[x]) for x in xs]
    ax.errorbar(xs, [m for m, _ in stats], yerr=[0 if math.isnan(h) else h for _, h in stats],
                marker="o", capsize=3, label=f"{key[0]} {group_label(key[1:])}")
  values = [v for by_x in points.values() for x in by_x for v in by_x[x]]
  if min(values) > 0 and min(r.overrides[field] for r in runs) > 0:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
  ax.set(xlabel=field, ylabel="last layer", title=f"{prefix} (last layer) vs {field}")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=6)
  fig.tight_layout()
  save_png(plt, fig, path, dpi=110)
  return True


def _panel_grid(plt, n: int):
  """A figure with `n` panels and one more for the legend, three to a row; `axes` is
  `[rows, cols]`."""
  cols = min(3, n + 1)
  rows = math.ceil((n + 1) / cols)
  return plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)


def _save_panels(plt, fig, axes, n: int, path: str) -> None:
  """Puts the legend in the panel after the last drawn one (not over a curve), hides the
  unused ones, writes `path`."""
  handles, labels = axes.ravel()[0].get_legend_handles_labels()
  for ax in axes.ravel()[n:]:
    ax.axis("off")
  axes.ravel()[n].legend(handles, labels, loc="upper left", fontsize=6,
                         ncol=1 if len(labels) <= 18 else 2, frameon=False)
  fig.tight_layout()
  save_png(plt, fig, path, dpi=90)


def _key_panels(by_metric: dict, xlabel: str, draw: Callable, path: str) -> bool:
  """Writes `path`: one panel per key diagnostic among `by_metric` (`{metric: data}`;
  `key_diagnostic`), in name order, drawn by `draw(plt, ax, data)`, x labelled `xlabel`.
  False (nothing written) when there is none."""
  names = sorted(k for k in by_metric if key_diagnostic(k))
  if not names:
    return False
  plt = load_pyplot()
  fig, axes = _panel_grid(plt, len(names))
  for ax, name in zip(axes.ravel(), names):
    draw(plt, ax, by_metric[name])
    ax.set_xlabel(xlabel)
    ax.set_title(name, fontsize=8)
    ax.grid(alpha=0.3)
  _save_panels(plt, fig, axes, len(names), path)
  return True


def at_best_lr(runs: Sequence[Run]) -> list[Run]:
  """The runs the per-layer diagnostics figures draw: when a learning rate is swept, the runs of
  each setting of the other swept fields at that setting's best LR (lowest mean clipped final
  loss over seeds, as the studies compare placements); otherwise all of them. (Every LR of every
  placement, 30 lines in one colour cycle, could not be told apart.)"""
  swept = swept_fields(runs)
  lr = lr_field(swept)
  if lr is None:
    return list(runs)
  out = []
  for members in split_runs(runs, [f for f in swept if f != lr]).values():
    means = mean_clipped_loss_per_lr(members, lr)
    if means:
      best = min(means, key=means.get)
      out += [r for r in members if r.overrides.get(lr) == best]
  return out


def plot_diagnostics_over_steps(runs: Sequence[Run], path: str) -> bool:
  """The key diagnostics against step (`at_best_lr`'s runs with 2+ diagnostics rows): per
  metric one line per group, the mean over seeds; a per-layer metric as its largest layer's
  value."""
  swept = swept_fields(runs)
  runs = at_best_lr(runs)
  series: dict[str, dict[tuple, dict[int, list[float]]]] = {}  # metric -> group -> step -> [v]
  for r in runs:
    rows = r.metrics.get("diagnostics", [])
    if len(rows) < 2:
      continue
    for row in rows:
      values = {name: max(prof.values()) for name, prof in layer_profiles(row).items()}
      values.update({k: float(v) for k, v in row.items() if k not in NOT_METRICS
                     and is_number(v) and not LAYER_NAME.match(k)})
      for name, v in values.items():
        series.setdefault(name, {}).setdefault(r.group, {}).setdefault(row["step"], []).append(v)

  def draw(plt, ax, by_group):
    for group, by_step in by_group.items():
      steps = sorted(by_step)
      ax.plot(steps, [np.mean(by_step[t]) for t in steps], label=group_label(group, swept))

  return _key_panels(series, "step", draw, path)


def plot_diagnostics(runs: Sequence[Run], path: str) -> bool:
  """The key per-layer diagnostics against layer (`at_best_lr`'s runs, diverged ones left
  out): per metric one line per group at the first (dashed) and last (solid) diagnostics
  step, the mean over seeds."""
  swept = swept_fields(runs)
  runs = at_best_lr(runs)
  profiles: dict[str, dict[tuple, list]] = {}  # metric -> (group, first/last) -> [{layer: v}]
  for r in runs:
    rows = r.metrics.get("diagnostics", [])
    if not rows or r.status == "diverged":
      continue
    for which, row in (("first", rows[0]), ("last", rows[-1])):
      if which == "last" and len(rows) == 1:
        continue
      for name, prof in layer_profiles(row).items():
        profiles.setdefault(name, {}).setdefault((r.group, which, row["step"]), []).append(prof)
  group_index = {g: i for i, g in enumerate(groups(runs))}

  def draw(plt, ax, by_group):
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (group, which, step), profs in by_group.items():
      layers = sorted(set.intersection(*(set(p) for p in profs)))
      mean = [np.mean([p[l] for p in profs]) for l in layers]
      ax.plot(layers, mean, marker="o", ms=3, ls="-" if which == "last" else "--",
              color=colors[group_index[group] % len(colors)],
              label=f"{group_label(group, swept)} @ {step}")

  return _key_panels(profiles, "layer", draw, path)
