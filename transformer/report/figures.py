"""The report's figures: learning curves and the final metric against each swept field;
lossless WebP files whose bytes depend only on the figure. The per-layer diagnostics figures
are in `diagnostics_figures`; what they share with the studies stays here: `KEY_DIAGNOSTICS`
(which report.md's caption names) and `layer_profiles`."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from transformer.figure_file import save_figure  # studies draw with report_figures.save_figure
from transformer.report.runs import LAYER_NAME, NOT_METRICS, Run, group_label, groups, swept_fields
from transformer.report.stats import initial_loss, mean_ci


def load_pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


# The per-layer diagnostics the report's generic figures draw: the quantities the
# norm-placement papers argue from (gradient norm and update size per layer, Xiong et al. 2020
# Fig. 3; residual stream growth, their Lemma 2; attention logit growth and entropy collapse,
# Wortsman et al. 2023, Zhai et al. 2023; the output softmax's log Z, Wortsman et al.'s z-loss).
# Every metric stays in the runs' metrics; a study plots others with `report_diagnostics`.
# (All ~28 of them, one panel each, made figures of 4,000 px no reader could use.)
KEY_DIAGNOSTICS = ("*/grad_norm", "*/update_ratio", "*/residual_rms", "attn_max_logit",
                   "attn_entropy", "log_z")


def key_diagnostic(name: str) -> bool:
  """A metric name (layer index as `*`, e.g. `decoder/*/self_attention/attn_max_logit`) that
  the generic diagnostics figures draw."""
  return name.endswith(KEY_DIAGNOSTICS)


def _mean_curve(runs: Sequence[Run], split: str, key: str):
  """Steps every run logged, and the mean / min / max of `key` there."""
  series = [{row["step"]: row[key] for row in r.metrics.get(split, []) if key in row}
            for r in runs]
  series = [s for s in series if s]
  if not series:
    return None
  steps = sorted(set.intersection(*(set(s) for s in series)))
  if not steps:
    return None
  y = np.array([[s[t] for t in steps] for s in series])
  return np.array(steps), y.mean(0), y.min(0), y.max(0)


# How the plots draw a run that did not finish healthily: collapsed runs as hollow circles at
# their final value, diverged ones as an x on the panel's top edge (they have no final value).
MARKS = {"finished": dict(marker="o", ms=4),
         "collapsed": dict(marker="o", ms=6, mfc="none", mew=1.2),
         "diverged": dict(marker="x", ms=7, mew=1.6),
         "off_scale": dict(marker="^", ms=6),
         "final_eval": dict(marker="*", ms=10)}
# The last eval of a run sees the whole eval split, the periodic ones its first
# `data.eval_batches` batches (transformer/train/loop.py), so the two may differ by more than
# training explains: the plots draw the last one with its own mark.
FINAL_EVAL_LABEL = "last eval, whole split\n(others: its first batches)"


def _split_final_eval(curve, runs: Sequence[Run]):
  """A `_mean_curve` of evals as (periodic (steps, mean), final (steps, mean)): the final
  eval is at a run's last step."""
  steps, mean = curve[0], curve[1]
  whole = steps >= max(r.num_steps for r in runs)
  return (steps[~whole], mean[~whole]), (steps[whole], mean[whole])


def lr_field(fields: Sequence[str]) -> Optional[str]:
  """The learning-rate field among `fields` (a path ending in `learning_rate`), or None."""
  return next((f for f in fields if f.rsplit(".", 1)[-1] == "learning_rate"), None)


def _lr_colors(plt, values: Sequence[float]) -> dict:
  """A sequential colour per learning rate (dark = small, bright = large)."""
  cmap = plt.get_cmap("viridis")
  values = sorted(values)
  n = max(len(values) - 1, 1)
  return {v: cmap(0.9 * i / n) for i, v in enumerate(values)}


def split_runs(runs: Sequence[Run], keys: Sequence[str]) -> dict[tuple, list[Run]]:
  """`runs` by their values of `keys`: `{((key, value), ...): [run]}`, in first-seen order."""
  out: dict[tuple, list[Run]] = {}
  for r in runs:
    out.setdefault(tuple((k, r.overrides.get(k)) for k in keys), []).append(r)
  return out


def _mark_legend(ax, handles: list, plt, final_eval: bool = False) -> None:
  """The legend outside the axes on the right, with the run marks explained (and the last
  eval's, when `final_eval`)."""
  from matplotlib.lines import Line2D
  handles = list(handles) + [
      Line2D([], [], color="gray", ls="", **MARKS["final_eval"], label=FINAL_EVAL_LABEL)
      ] * final_eval + [
      Line2D([], [], color="gray", ls="", **MARKS["finished"], label="healthy (seed or mean)"),
      Line2D([], [], color="gray", ls="", **MARKS["collapsed"], label="collapsed run"),
      Line2D([], [], color="gray", ls="", **MARKS["diverged"], label="diverged (top edge)"),
      Line2D([], [], color="gray", ls="", **MARKS["off_scale"],
             label="off scale (above the top edge)")]
  ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7,
            borderaxespad=0.0)


def _run_marks(ax, xs_runs: Sequence[tuple], color) -> None:
  """Every run as a mark at (x, its final value); diverged runs at the top edge (drawn after
  the limits are set: see `_top_edge`)."""
  for status in ("finished", "collapsed"):
    pts = [(x, v) for x, r, v in xs_runs if r.status == status and v is not None]
    if pts:
      ax.plot(*zip(*pts), ls="", color=color, alpha=0.8, gid=status, **MARKS[status])


def _top_edge(ax, xs_runs: Sequence[tuple], color, cap: Optional[float] = None) -> None:
  """Diverged runs as an x on the panel's top edge; with a `cap` (`_outlier_cap`), runs whose
  final value lies above it as a triangle there ("off scale")."""
  pts = [x for x, r, _ in xs_runs if r.status == "diverged"]
  high = [x for x, r, v in xs_runs
          if cap is not None and r.status != "diverged" and v is not None and v > cap]
  if pts or high:
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, top)  # fixed: the marks sit on the edge, not above a new margin
  if pts:
    ax.plot(pts, [top] * len(pts), ls="", color=color, clip_on=False, gid="diverged",
            **MARKS["diverged"])
  if high:
    ax.plot(high, [top] * len(high), ls="", color=color, clip_on=False, gid="off_scale",
            **MARKS["off_scale"])


def _outlier_cap(values: Sequence[float]) -> Optional[float]:
  """A top for a y-axis that a few far-off values would stretch: 2x the median when some value
  lies above that (e.g. a pre-norm model without any norm ending at 100+ nats while the rest
  end near 2.5), else None (the axis as matplotlib scales it)."""
  values = [v for v in values if v > 0]
  if len(values) < 4:
    return None
  cap = 2 * float(np.median(values))
  return cap if max(values) > cap else None


def curves_figure(runs: Sequence[Run], metric: str):
  """The learning-curves figure (or None): with a learning-rate field, one panel per value of
  the other swept fields, train loss (mean over healthy seeds, line) and eval loss (marks)
  coloured by LR, every unhealthy run drawn alone (dotted) and marked at its end; without one,
  train and eval panels with one colour per group. Legends outside the axes."""
  swept = swept_fields(runs)
  lr = lr_field(swept)
  plt = load_pyplot()
  if lr is None:
    return _curves_by_group(runs, metric, swept, plt)
  others = [f for f in swept if f != lr]
  panels = split_runs(runs, others)
  colors = _lr_colors(plt, {r.overrides[lr] for r in runs})
  cols = min(3, len(panels))
  rows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols + 1.4, 3.2 * rows), squeeze=False,
                           sharey=True)
  drawn = False
  for ax, (key, members) in zip(axes.ravel(), panels.items()):
    drawn = _lr_curves_panel(ax, members, lr, colors) or drawn
    shown = _shown(key, runs, swept)
    ax.set_title(_title(group_label(key, shown) if shown else "all"), fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  if not drawn:
    plt.close(fig)
    return None
  _cap_train_loss(axes.ravel()[0], runs)
  for ax, members in zip(axes.ravel(), panels.values()):
    for r in members:
      if r.status == "diverged":
        steps = [row["step"] for row in r.metrics.get("train", [])]
        _top_edge(ax, [(max(steps) if steps else 0, r, None)], colors[r.overrides[lr]])
  for ax in axes.ravel()[len(panels):]:
    ax.axis("off")
  for ax in axes[:, 0]:
    ax.set_ylabel("train loss (line) / eval loss (marks)")
  from matplotlib.lines import Line2D
  handles = [Line2D([], [], color=c, lw=2, label=f"LR {v:g}") for v, c in colors.items()]
  _mark_legend(axes[0, -1] if len(panels) >= cols else axes.ravel()[len(panels) - 1],
               handles, plt, final_eval=True)
  fig.tight_layout()
  return fig


def _lr_curves_panel(ax, members: Sequence[Run], lr: str, colors: dict) -> bool:
  """One panel of `curves_figure`: per LR of `members`, the healthy runs' mean train loss
  (line, min..max shaded) and eval loss (marks), every other run dotted, a collapsed one
  marked at its end. Whether it drew a line."""
  drawn = False
  for value, lr_runs in sorted(split_runs(members, [lr]).items(), key=lambda kv: kv[0][0][1]):
    color = colors[value[0][1]]
    ok = [r for r in lr_runs if r.healthy]
    curve = _mean_curve(ok, "train", "loss")
    if curve is not None:
      steps, mean, lo, hi = curve
      ax.plot(steps, mean, color=color, lw=1.4)
      ax.fill_between(steps, lo, hi, color=color, alpha=0.15)
      drawn = True
    ev = _mean_curve(ok, "eval", "loss")
    if ev is not None:
      (ps, pm), (fs, fm) = _split_final_eval(ev, ok)
      ax.plot(ps, pm, ls="", color=color, **MARKS["finished"])
      ax.plot(fs, fm, ls="", color=color, **MARKS["final_eval"])
    for r in lr_runs:
      if r.healthy or not r.metrics.get("train"):
        continue
      rows_ = [row for row in r.metrics["train"] if math.isfinite(row.get("loss", math.nan))]
      ax.plot([row["step"] for row in rows_], [row["loss"] for row in rows_], color=color,
              ls=":", lw=1)
      drawn = True
      if r.status == "collapsed" and r.final:
        ax.plot([r.final["step"]], [r.final["loss"]], ls="", color=color, gid="collapsed",
                **MARKS["collapsed"])
  return drawn


def _cap_train_loss(ax, runs: Sequence[Run]) -> None:
  """Stops the shared y of `curves_figure` (through its first panel, `ax`) below a far-off
  run's train loss: a model without any norm starts near 100 nats and would flatten the rest.
  The cap is twice the median final loss or 1.2x the loss at init, ln V."""
  finals = [r.final["loss"] for r in runs if r.healthy and "loss" in r.final]
  highest = max((row["loss"] for r in runs for row in r.metrics.get("train", [])
                 if math.isfinite(row.get("loss", math.nan))), default=None)
  if finals and highest is not None:
    cap = max(2 * float(np.median(finals)),
              1.2 * float(np.median([initial_loss(r) for r in runs])))
    if highest > cap:
      low = min(row["loss"] for r in runs for row in r.metrics.get("train", [])
                if math.isfinite(row.get("loss", math.nan)))
      ax.set_ylim(low - 0.05 * (cap - low), cap)


def _curves_by_group(runs, metric, swept, plt):
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  drawn = False
  handles = []
  for i, (group, members) in enumerate(groups(runs).items()):
    color = colors[i % len(colors)]
    ok = [r for r in members if r.healthy]
    for ax, split, key in ((axes[0], "train", "loss"), (axes[1], "eval", metric)):
      curve = _mean_curve(ok, split, key)
      if curve is not None:
        steps, mean, lo, hi = curve
        if split == "eval":  # the last eval (whole split) as its own mark, not on the line
          (ps, pm), (fs, fm) = _split_final_eval(curve, ok)
          ax.plot(ps, pm, color=color, marker="o", ms=3)
          ax.plot(fs, fm, ls="", color=color, **MARKS["final_eval"])
          steps, lo, hi = steps[:len(ps)], lo[:len(ps)], hi[:len(ps)]
        else:
          handles.append(ax.plot(steps, mean, color=color,
                                 label=f"{group_label(group, swept)} (n={len(ok)})")[0])
        ax.fill_between(steps, lo, hi, color=color, alpha=0.2)
        drawn = True
      for r in members:  # marked runs are drawn thin, each alone, so they are seen
        if not r.healthy and r.metrics.get(split):
          rows = [row for row in r.metrics[split] if key in row]
          ax.plot([row["step"] for row in rows], [row[key] for row in rows], color=color,
                  ls=":", lw=1)
          drawn = True  # a sweep whose runs all collapsed still shows how they went
  if not drawn:
    plt.close(fig)
    return None
  axes[0].set(xlabel="step", ylabel="train loss", title="Training loss")
  axes[1].set(xlabel="step", ylabel=f"eval {metric}", title=f"Eval {metric}")
  for ax in axes:
    ax.grid(alpha=0.3)
  _mark_legend(axes[1], handles, plt, final_eval=True)
  fig.tight_layout()
  return fig


def plot_curves(runs: Sequence[Run], metric: str, path: str) -> bool:
  fig = curves_figure(runs, metric)
  if fig is None:
    return False
  save_figure(load_pyplot(), fig, path, dpi=90)
  return True


TITLE_CHARS = 40  # a panel title's line: longer ones ran into the next panel's (long_training)
MAX_PANELS = 12  # more, and the curves are split into one figure per value of a field


def _shown(key: tuple, runs: Sequence[Run], fields: Sequence[str]) -> list[str]:
  """The `fields` worth naming in a label of group `key`: not one the group leaves unset where
  another field of the key has a value whose runs all leave it unset (norms: DyT's alpha_0
  beside norm=layernorm, where `dyt_alpha_init=config` would be noise; depth's scan_layers
  beside num_layers=6)."""
  moot = {f for f, v in key if v is None and any(
      w is not None and g != f and all(f not in r.overrides for r in runs
                                       if r.overrides.get(g) == w)
      for g, w in key)}
  named = {f for f, _ in key} - moot
  return [f for f in fields if f in named]


def _title(text: str) -> str:
  """`text` (`a=1, b=2, ...`) broken after its commas into lines of at most TITLE_CHARS (a
  longer part keeps its own line)."""
  lines, line = [], ""
  for part in text.split(", "):
    joined = f"{line}, {part}" if line else part
    if line and len(joined) > TITLE_CHARS:
      lines.append(line + ",")
      line = part
    else:
      line = joined
  return "\n".join(lines + [line])


def curve_figures(runs: Sequence[Run]) -> list[tuple[str, list]]:
  """How the learning curves are drawn: `[(suffix, runs)]`, one figure of all the runs, or,
  when it would have more than MAX_PANELS panels (one per value of the swept fields other than
  the LR), one figure per value of the first such field (suffix `_<field>_<value>`)."""
  swept = swept_fields(runs)
  lr = lr_field(swept)
  others = [f for f in swept if f != lr]
  if lr is None or len(split_runs(runs, others)) <= MAX_PANELS:
    return [("", list(runs))]
  first = others[0]
  out = []
  for (_, value), members in ((k[0], v) for k, v in split_runs(runs, [first]).items()):
    out.append((f"_{first.rsplit('.', 1)[-1]}_{value}", members))
  return out


def is_number(v: Any) -> bool:
  """An int or float, not a bool."""
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def final_vs_figure(runs: Sequence[Run], field: str, fields: Sequence[str], metric: str):
  """Final `metric` against `field` (or None): one panel per value of the first other swept
  field when there are two or more others (e.g. per placement), one line per value of the
  rest, coloured by learning rate (sequential) when that is one of them. The line is the mean
  over healthy seeds; every run is a mark: filled when healthy, hollow when collapsed, an x on
  the top edge when diverged (collapsed runs are the LR studies' main evidence, so they are
  drawn, not dropped). Legend outside the axes."""
  values, numeric = _x_values(runs, field)
  if not values:
    return None
  others = [f for f in fields if f != field]
  lr = lr_field(others)
  panel_keys = _panel_keys(field, fields, others, lr)
  line_keys = [f for f in others if f not in panel_keys]
  plt = load_pyplot()
  # A panel whose runs never set `field` (norms: LayerNorm has no DyT alpha) would be empty.
  panels = {k: m for k, m in split_runs(runs, panel_keys).items()
            if any(field in r.overrides for r in m)}
  cols = min(3, len(panels))
  nrows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols + 1.8, 3.2 * nrows),
                           squeeze=False, sharey=True)
  cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  lr_colors = _lr_colors(plt, {r.overrides.get(lr) for r in runs}) if lr in line_keys else {}
  line_index: dict[tuple, int] = {}

  def color_of(lkey: tuple):
    i = line_index.setdefault(lkey, len(line_index))
    return lr_colors[dict(lkey)[lr]] if lr_colors else cycle[i % len(cycle)]

  handles: dict[str, Any] = {}
  marks: list[tuple[list, Any, Any]] = []  # (points, colour, ax) of every line
  for ax, (pkey, members) in zip(axes.ravel(), panels.items()):
    for lkey, line_runs in split_runs(members, line_keys).items():
      color = color_of(lkey)
      shown = _shown(pkey + lkey, runs, line_keys)
      label = group_label(lkey, shown) if shown else "mean over healthy seeds"
      points = _final_vs_line(ax, line_runs, values, numeric, field, metric, color, label,
                              handles)
      marks.append((points, color, ax))
    shown = _shown(pkey, runs, panel_keys)
    _final_vs_axes(plt, ax, values, numeric, field,
                   _title(group_label(pkey, shown) if shown else f"{metric} vs {field}"))
  if not any(points for points, _, _ in marks):
    plt.close(fig)
    return None
  _cap_finals(axes, marks)
  for ax in axes.ravel()[len(panels):]:
    ax.axis("off")
  for ax in axes[:, 0]:
    ax.set_ylabel(f"final eval {metric}")
  if lr_colors:
    from matplotlib.lines import Line2D
    hs = [Line2D([], [], color=c, lw=2, label=f"LR {v:g}") for v, c in sorted(lr_colors.items())]
  else:
    hs = list(handles.values())
  _mark_legend(axes[0, -1], hs, plt)
  fig.tight_layout()
  return fig


def _x_values(runs: Sequence[Run], field: str) -> tuple[list, bool]:
  """The values of `field` among `runs` and whether they are all numbers: sorted when they
  are, else in first-seen order, with None first when some run leaves `field` unset (at
  `config`, e.g. activation: GELU)."""
  values = []
  for r in runs:
    if field in r.overrides and r.overrides[field] not in values:
      values.append(r.overrides[field])
  if not values:
    return values, False
  numeric = all(is_number(v) for v in values)
  if numeric:
    values = sorted(values)
  elif any(field not in r.overrides for r in runs):
    values.insert(0, None)
  return values, numeric


def _panel_keys(field: str, fields: Sequence[str], others: Sequence[str],
                lr: Optional[str]) -> list[str]:
  """The field `final_vs_figure` draws one panel per value of: the first non-LR one of
  `others` (the swept `fields` but `field`) when there are two or more, the other one when
  `field` is the LR; none otherwise."""
  if len(others) >= 2:
    return [next(f for f in others if f != lr)]
  if len(others) == 1 and field == lr_field(fields):
    return list(others)
  return []


def _final_vs_line(ax, line_runs: Sequence[Run], values: list, numeric: bool, field: str,
                   metric: str, color, label: str, handles: dict) -> list[tuple]:
  """One line of `final_vs_figure`: the mean final `metric` of the healthy runs at each value
  of `field` with its 95% CI (recorded in `handles` under `label`), and every run as a mark.
  Returns the marks, `[(x, run, final value or None)]`."""
  xs, ys, errs, points = [], [], [], []
  for v in values:
    x = v if numeric else values.index(v)
    at = [r for r in line_runs if r.overrides.get(field) == v]
    ok = [r.final[metric] for r in at if r.healthy and metric in r.final]
    if ok:
      mean, half = mean_ci(ok)
      xs.append(x)
      ys.append(mean)
      errs.append(0.0 if math.isnan(half) else half)
    points += [(x, r, r.final.get(metric)) for r in at]
  if xs:
    line = ax.errorbar(xs, ys, yerr=errs, color=color, capsize=2, lw=1.3, label=label)
    handles.setdefault(label, line)
  _run_marks(ax, points, color)
  return points


def _final_vs_axes(plt, ax, values: list, numeric: bool, field: str, title: str) -> None:
  """The axes of a `final_vs_figure` panel once its lines are drawn: x on a log scale for
  numbers spanning 10x or more (labelled at the values below 100x), at the values' names for
  others; title, label, grid, limits."""
  if numeric and min(values) > 0 and max(values) / min(values) >= 10:
    ax.set_xscale("log")
    if max(values) / min(values) < 100:  # matplotlib labels the minor ticks: they overlap
      ax.set_xticks(values, [f"{v:g}" for v in values])
      ax.xaxis.set_minor_formatter(plt.NullFormatter())
  if not numeric:
    ax.set_xticks(range(len(values)), ["config" if v is None else str(v) for v in values],
                  rotation=30, fontsize=8)
  ax.set_title(title, fontsize=9)
  ax.set_xlabel(field)
  ax.grid(alpha=0.3)
  ax.autoscale_view()


def _cap_finals(axes, marks: Sequence[tuple]) -> None:
  """Caps the shared y of `final_vs_figure` at `_outlier_cap` of its finite marks (one far-off
  group would flatten every other) and draws each line's diverged and off-scale runs on its
  panel's top edge; `marks` is `[(points, colour, ax)]`."""
  finite = [v for points, _, _ in marks for _, _, v in points
            if v is not None and math.isfinite(v)]
  cap = _outlier_cap(finite)
  if cap is not None:
    low = min(finite)
    axes.ravel()[0].set_ylim(low - 0.05 * (cap - low), cap)
  for points, color, ax in marks:
    _top_edge(ax, points, color, cap)


def plot_final_vs(runs: Sequence[Run], field: str, fields: Sequence[str], metric: str,
                   path: str) -> bool:
  fig = final_vs_figure(runs, field, fields, metric)
  if fig is None:
    return False
  save_figure(load_pyplot(), fig, path, dpi=90)
  return True


def layer_profiles(row: dict) -> dict[str, dict[int, float]]:
  """`{metric: {layer: value}}` from a diagnostics row's keys that carry a layer index."""
  out: dict[str, dict[int, float]] = {}
  for k, v in row.items():
    m = LAYER_NAME.match(k)
    if m and k not in NOT_METRICS and is_number(v):
      name = (m["pre"] + "*" + m["post"]).strip("/._")
      out.setdefault(name, {})[int(m["index"])] = float(v)
  return out
