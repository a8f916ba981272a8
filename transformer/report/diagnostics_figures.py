"""The report's per-layer diagnostics figures: the key quantities' layer profiles at the first
and last diagnostics step, the same over training, and a prefix's last layer against a swept
field; lossless WebP files (`transformer.figure_file.save_figure`)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from transformer.report.figures import (is_number, key_diagnostic, layer_profiles, load_pyplot,
                                        lr_field, save_figure, split_runs)
from transformer.report.runs import LAYER_NAME, NOT_METRICS, Run, group_label, groups, swept_fields
from transformer.report.stats import mean_ci, mean_clipped_loss_per_lr, seeds_every_lr_ran


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
  save_figure(plt, fig, path, dpi=110)
  return True


LEGEND_ROW_INCHES = 0.14  # one row of a fontsize-6 legend, with its spacing


def _panel_grid(plt, n: int):
  """A figure with `n` panels, three to a row (`_legend_below` adds room for the legend);
  `axes` is `[rows, cols]`."""
  cols = min(3, n)
  rows = math.ceil(n / cols)
  return plt.subplots(rows, cols, figsize=(4.4 * cols, 3.1 * rows), squeeze=False)


def _legend_below(fig, legend: Sequence, most: int) -> float:
  """Puts the legend (`(handle, label)` pairs) under the panels, where a long one is neither
  cut off nor drawn over a curve: in at most `most` columns, at most 8 rows where the width
  allows, and fewer columns when its labels would run past the figure's right edge (wider
  when even one column would). Grows the figure by its height, which it returns (inches)."""
  renderer = fig.canvas.get_renderer()
  for cols in range(max(1, min(most, math.ceil(len(legend) / 8))), 0, -1):
    box = fig.legend([h for h, _ in legend], [l for _, l in legend], loc="lower left",
                     fontsize=6, ncol=cols, frameon=False, bbox_to_anchor=(0.01, 0.0))
    if cols == 1 or box.get_window_extent(renderer).x1 <= fig.bbox.x1:
      break
    box.remove()
  wide = box.get_window_extent(renderer).x1 / fig.dpi + 0.1
  if wide > fig.get_figwidth():  # a label too long for one panel's width: widen the figure
    fig.set_figwidth(wide)
  below = LEGEND_ROW_INCHES * math.ceil(len(legend) / cols) + 0.2
  fig.set_figheight(fig.get_figheight() + below)
  return below


def group_styles(plt, keys: Sequence) -> dict:
  """`{key: (colour, variant)}`, a pair no other key has: colours from tab10 (tab20 past 10
  keys), then the variant index (0, 1, ...) once those run out, which a figure draws as a
  marker or a dash pattern. (tab10 alone gave warmup_placement's 24 groups 10 colours.)"""
  colors = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20").colors
  return {k: (colors[i % len(colors)], i // len(colors)) for i, k in enumerate(keys)}


MARKERS = ("o", "s", "^", "D", "v", "P")
DASHES = ("-", (0, (6, 1.5)), (0, (2, 1)), (0, (6, 1.5, 1, 1.5)))


def _save_panels(plt, fig, axes, n: int, path: str, legend: Sequence) -> None:
  """Hides the unused panels, puts the legend below the panels (`_legend_below`), writes
  `path`."""
  for ax in axes.ravel()[n:]:
    ax.axis("off")
  below = _legend_below(fig, legend, axes.shape[1])
  fig.tight_layout(rect=(0, below / fig.get_figheight(), 1, 1))
  save_figure(plt, fig, path, dpi=90)


def _key_panels(by_metric: dict, xlabel: str, draw: Callable, legend: Callable,
                path: str) -> bool:
  """Writes `path`: one panel per key diagnostic among `by_metric` (`{metric: data}`;
  `key_diagnostic`), in name order, drawn by `draw(plt, ax, data)`, x labelled `xlabel`, with
  the legend `legend(plt)` returns (`(handle, label)` pairs). False (nothing written) when
  there is none."""
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
  _save_panels(plt, fig, axes, len(names), path, legend(plt))
  return True


def _group_legend(plt, styles: dict, swept, style: Callable) -> list:
  """One legend entry per group of `styles` (`group_styles`'), drawn as `style(colour,
  variant)` (Line2D keywords) and labelled by its swept fields."""
  from matplotlib.lines import Line2D
  return [(Line2D([], [], **style(color, variant)), group_label(group, swept))
          for group, (color, variant) in styles.items()]


def at_best_lr(runs: Sequence[Run]) -> list[Run]:
  """The runs the per-layer diagnostics figures draw: when a learning rate is swept, the runs of
  each setting of the other swept fields at that setting's best LR (lowest mean clipped final
  loss over the seeds every LR ran, `seeds_every_lr_ran`, as the studies compare placements);
  otherwise all of them. (Every LR of every placement, 30 lines in one colour cycle, could not
  be told apart.)"""
  swept = swept_fields(runs)
  lr = lr_field(swept)
  if lr is None:
    return list(runs)
  out = []
  for members in split_runs(runs, [f for f in swept if f != lr]).values():
    means = mean_clipped_loss_per_lr(seeds_every_lr_ran(members, lr)[0], lr)
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

  styles = group_styles(load_pyplot(), _drawn(runs, {g for by in series.values() for g in by}))

  def style(color, variant):
    return {"color": color, "ls": DASHES[variant % len(DASHES)]}

  def draw(plt, ax, by_group):
    for group, by_step in by_group.items():
      steps = sorted(by_step)
      ax.plot(steps, [np.mean(by_step[t]) for t in steps], **style(*styles[group]))

  return _key_panels(series, "step", draw,
                     lambda plt: _group_legend(plt, styles, swept, style), path)


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
  styles = group_styles(load_pyplot(), _drawn(runs, {k[0] for by in profiles.values() for k in by}))

  def style(color, variant):
    return {"color": color, "marker": MARKERS[variant % len(MARKERS)], "ms": 3}

  def draw(plt, ax, by_group):
    for (group, which, _), profs in by_group.items():
      layers = sorted(set.intersection(*(set(p) for p in profs)))
      mean = [np.mean([p[l] for p in profs]) for l in layers]
      ax.plot(layers, mean, ls="-" if which == "last" else "--", **style(*styles[group]))

  def legend(plt):
    from matplotlib.lines import Line2D
    steps = {which: sorted({k[2] for by in profiles.values() for k in by if k[1] == which})
             for which in ("first", "last")}
    return _group_legend(plt, styles, swept, style) + [
        (Line2D([], [], color="0.3", ls=ls), f"{text} diagnostics step ({_steps(steps[which])})")
        for which, ls, text in (("first", "--", "dashed: first"), ("last", "-", "solid: last"))
        if steps[which]]

  return _key_panels(profiles, "layer", draw, legend, path)


def _drawn(runs: Sequence[Run], drawn: set) -> list:
  """The groups of `runs` that have a line in the figure (`drawn`), in the runs' group order:
  the order `group_styles` hands out colours in, the same in both figures."""
  return [g for g in groups(runs) if g in drawn]


def _steps(steps: Sequence[int]) -> str:
  """`step 450`, or `steps 300, 450` when the runs' rows differ."""
  return f"step{'s' if len(steps) > 1 else ''} {', '.join(str(t) for t in steps)}"
