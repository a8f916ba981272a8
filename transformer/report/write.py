"""The report of a sweep: read every point's workdir, write a table, a CSV and plots.

`python launch.py --mode=report --sweep_dir=DIR` (also run at the end of `--mode=sweep`) reads
`DIR/sweep.json` (the points; `sweep.json.xz` in a packed study) and each point's
`metrics.jsonl`, and writes into DIR:

- `results.csv`: one row per point (its name, fields, status, final eval metrics, wall time;
  its run's folder is `DIR/<point>`, so no column repeats it);
- `report.md`: per group of points that differ only in `seed`, the mean and 95% confidence
  interval (Student's t over seeds) of every final eval metric, over healthy runs only (for a
  study with `CONFIRMATORY_SEEDS`, once they have run, per seed set: `seed_sets`);
- `curves.webp`: train loss and the eval metric against step, mean over seeds with the
  min..max spread shaded;
- `final_vs_<field>.webp` for every swept field with several values: the final metric against
  it, one line per value of the other swept fields (none for a field another one determines,
  `runs.tied_fields`: that figure would repeat the other field's at fewer x positions; none
  for a field of names, such as the placement, when the LR figure is drawn: `transposed`);
- a `Verdict` section when the sweep file defines `analyze(runs)` (the studies in
  `experiments/`): the file's own test of its claim on these runs, as Markdown lines;
- `diagnostics.webp` when runs log rows with `"split": "diagnostics"`: per-layer profiles of
  the key quantities among the metrics whose name carries a layer index (`.../layer_3/...`;
  `figures.KEY_DIAGNOSTICS`), at the first and last diagnostics step, and
  `diagnostics_steps.webp`, the same over training; when an LR is swept, each setting of the
  other fields at its best LR (`diagnostics_figures.at_best_lr`).

A run is marked, and left out of the means, when it *diverged* (a non-finite loss or gradient
norm) or *collapsed* (its final eval loss is at least `1 - COLLAPSE_TOLERANCE` times the
unigram entropy of the eval data: it learned no more than token frequencies, the way post-norm
fails without warm-up; `runs.collapsed`, from the eval loss alone).
"""


from __future__ import annotations

import csv
import os
from typing import Sequence

from transformer import paths
from transformer import study as study_lib
from transformer.errors import CommandLineError
from transformer.sweep import points as sweep_lib
from transformer.report import budget
from transformer.report import provenance_report
from transformer.report import registration, robustness
from transformer.report.runs import (PENDING, Run, classify_run, eval_metric_names, groups,
                                     load_runs, study_claim, swept_fields, tied_fields,
                                     wall_seconds)
from transformer.report.seed_sets import SETS_APART, confirmatory_seeds, pooled_note, seed_sets
from transformer.report.stats import (format_interval, lr_sensitivity_table, mean_ci)
from transformer.report.figures import (curve_figures, is_number, lr_field, plot_curves,
                                        plot_final_vs)
from transformer.report.diagnostics_figures import (at_best_lr, plot_diagnostics,
                                                    plot_diagnostics_over_steps, plot_last_layer_vs)


def report_metric(metric: str, names: Sequence[str], sweep_dir: str) -> str:
  """`metric` (--report_metric), which some run must have logged; default loss (nats/token,
  the unit the study verdicts use), else the first metric logged."""
  if not metric:
    return "loss" if "loss" in names else names[0] if names else "loss"
  if metric not in names:
    logged = (f"they logged {', '.join(names)}" if names else
              "no run has logged an eval yet, so leave it out for now")
    raise CommandLineError(f"--report_metric={metric}: no run of {sweep_dir} logged an eval "
                           f"metric of that name; {logged}.")
  return metric


def write_report(sweep_dir: str, metric: str = "", title: str = "") -> str:
  """Writes report.md, results.csv and the plots into `sweep_dir`; returns report.md's path."""
  runs = load_runs(sweep_dir, entropy=False)
  manifest = sweep_lib.read_manifest(sweep_dir)
  names = eval_metric_names(runs)
  metric = report_metric(metric, names, sweep_dir)
  for run in runs:  # after the checks: the entropy is cached in sweep_dir
    classify_run(run, sweep_dir)
  fields = swept_fields(runs)
  _write_csv(runs, names, os.path.join(sweep_dir, "results.csv"))

  lines = _header_lines(runs, manifest, sweep_dir, title)
  prov = provenance_report.summarize(runs, manifest)
  for warning in prov.warnings:
    print(f"[report] WARNING: {warning}")
  lines += provenance_report.warning_lines(prov)
  lines += study_verdict(manifest, runs,
                         lambda rs: [classify_run(r, sweep_dir) for r in rs])
  lines += budget.section(runs)
  confirmatory = confirmatory_seeds(manifest)
  lines += _final_eval_table(runs, names, metric, fields, confirmatory)
  lines += _marked_runs_table(runs)
  lr = lr_field(fields)
  if lr:
    lines += ["", *lr_sensitivity_table(runs, lr, fields, confirmatory)]

  figures = _sweep_figures(runs, fields, metric, sweep_dir)
  figures += study_figures(manifest, runs, sweep_dir)
  figures += _diagnostics_figures(runs, manifest, fields, sweep_dir)
  lines += ["", *prov.lines] if prov.lines else []
  lines += ["", "## Figures", "", *pooled_note(runs, confirmatory)]
  for caption, path in figures:
    lines += [f"{caption}:", "", f"![{caption}]({path})", ""]
  lines += ["Raw figures: `results.csv`; every run's metrics: `<point>/metrics.jsonl` (in a "
            "committed study, its line of `runs.jsonl.xz`: `python "
            "experiments/compress_results.py --unpack <study dir>` writes the folders back); "
            "its output: `<point>/log.txt`, in the sweep dir it ran in (a committed study keeps "
            "no logs)."]
  out = paths.join(sweep_dir, "report.md")
  paths.write_text(out, "\n".join(lines) + "\n")
  return out


def _header_lines(runs: Sequence[Run], manifest: dict, sweep_dir: str, title: str) -> list[str]:
  """The report's title, the command that ran the sweep, the claim under test (a study) and
  the count of points per status."""
  counts = {s: sum(r.status == s for r in runs)
            for s in ("finished", "diverged", "collapsed", "incomplete", "missing")}
  command = manifest.get("command") or " ".join([  # "command": --runs (report/compare.py)
      "python launch.py --mode=sweep", f"--sweep={manifest['sweep_file']}",
      f"--config={manifest['config']}", *manifest["overrides"],
      f"--sweep_dir={manifest.get('sweep_dir', sweep_dir)}"])
  return [f"# {title or 'Sweep report: ' + paths.basename(paths.absolute(sweep_dir))}", "",
          f"Command: `{command}`", "",
          *([f"**Claim under test:** {claim}", ""] if (claim := study_claim(manifest)) else []),
          f"{len(runs)} points: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ".",
          ""]


def _final_eval_table(runs: Sequence[Run], names: Sequence[str], metric: str,
                      fields: Sequence[str], confirmatory: Sequence[int] = ()) -> list[str]:
  """`## Final eval`: per group of seeds, its swept values, healthy / all runs and the mean
  and 95% CI of every final eval metric over its healthy runs (`metric` starred); with
  `confirmatory` seeds in, each group's row per seed set (`seed_sets`), the verdict's first."""
  sets = seed_sets(runs, confirmatory)
  split = len(sets) > 1
  header = (["seeds"] if split else []) + list(fields) + ["healthy / runs"]
  header += [m + (" *" if m == metric else "") for m in names]
  apart = SETS_APART if split else ""
  lines = ["## Final eval", "",
           "Mean ± half-width of the 95% confidence interval over seeds (Student's t), over "
           f"healthy runs only; `*` marks the metric of the plots.{apart}", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  by_set = [(label, groups(members)) for label, members in sets]
  for group in groups(runs):
    for label, grouped in by_set:
      if group not in grouped:
        continue
      ok = [r for r in grouped[group] if r.healthy]
      values = dict(group)
      cells = ([label] if split else []) + [str(values.get(k, "")) for k in fields]
      cells.append(f"{len(ok)} / {len(grouped[group])}")
      cells += [format_interval(*mean_ci([r.final[m] for r in ok if m in r.final]))
                for m in names]
      lines.append("| " + " | ".join(cells) + " |")
  return lines


def _marked_runs_table(runs: Sequence[Run]) -> list[str]:
  """`## Runs not averaged in`: each unhealthy run's status, detail and log; [] if none."""
  marked = [r for r in runs if not r.healthy]
  if not marked:
    return []
  lines = ["", "## Runs not averaged in", "", "| point | status | detail | log |",
           "|---|---|---|---|"]
  for r in marked:  # a committed (packed) run keeps no log
    log = (f"`{r.name}/log.txt`" if paths.exists(paths.join(r.workdir, "log.txt"))
           else "not kept (packed run)")
    lines.append(f"| {r.name} | {r.status} | {r.detail} | {log} |")
  return lines


def _sweep_figures(runs: Sequence[Run], fields: Sequence[str], metric: str,
                   sweep_dir: str) -> list[tuple[str, str]]:
  """Draws the learning curves and the final `metric` against each swept field (but a tied
  one) into `sweep_dir`; returns the (caption, file name) of each drawn."""
  figures = []
  for suffix, members in curve_figures(runs):
    if plot_curves(members, metric, os.path.join(sweep_dir, f"curves{suffix}.webp")):
      where = f" ({suffix[1:].replace('_', ' ', 1).replace('_', '=', 1)})" if suffix else ""
      figures.append((f"Learning curves{where} (mean over healthy seeds, min..max shaded)",
                      f"curves{suffix}.webp"))
  tied = tied_fields(runs, fields)
  skip = {*tied, *transposed(runs, fields, tied)}
  for field in fields:
    path = f"final_vs_{field.replace('.', '_')}.webp"
    if field not in skip and plot_final_vs(runs, field, fields, metric,
                                            os.path.join(sweep_dir, path)):
      figures.append((f"Final {metric} against {field}", path))
  return figures


def transposed(runs: Sequence[Run], fields: Sequence[str], tied) -> list[str]:
  """The swept fields whose values are not numbers (the placement, the norm, qk-norm on or
  off), when an LR is swept and its figure drawn (not `tied`): the LR figure draws every
  (setting, LR) cell's mean and runs, a line per setting, so a figure with the setting on x
  and a line per LR would draw the same cells again, transposed."""
  lr = lr_field(fields)
  if lr is None or lr in tied:
    return []
  return [f for f in fields if f != lr and not all(
      is_number(r.overrides[f]) for r in runs if f in r.overrides)]


def _diagnostics_figures(runs: Sequence[Run], manifest: dict, fields: Sequence[str],
                         sweep_dir: str) -> list[tuple[str, str]]:
  """Draws the per-layer diagnostics figures into `sweep_dir` (the key quantities' profiles,
  each `report_diagnostics` prefix of the manifest against each swept field, the key
  quantities over training); returns the (caption, file name) of each drawn."""
  figures = []
  best = ", each setting at its best LR" if len(at_best_lr(runs)) < len(runs) else ""
  if plot_diagnostics(runs, os.path.join(sweep_dir, "diagnostics.webp")):
    figures.append(("Per-layer diagnostics (first and last diagnostics step; the key quantities, "
                    f"figures.KEY_DIAGNOSTICS{best})", "diagnostics.webp"))
  for prefix in manifest.get("report_diagnostics", []):
    for field in fields:
      path = f"{prefix.replace('/', '_')}_vs_{field.replace('.', '_')}.webp"
      if plot_last_layer_vs(runs, prefix, field, fields, os.path.join(sweep_dir, path)):
        figures.append((f"{prefix} diagnostics of the last layer at the first diagnostics step "
                        f"against {field} (95% CI over seeds)", path))
  if plot_diagnostics_over_steps(runs, os.path.join(sweep_dir, "diagnostics_steps.webp")):
    figures.append(("Key diagnostics over training (per-layer metrics: the largest layer's "
                    f"value; mean over seeds{best})", "diagnostics_steps.webp"))
  return figures


def study_figures(manifest: dict, runs: Sequence[Run], sweep_dir: str) -> list[tuple[str, str]]:
  """The study's own figures: its sweep file's `figures(runs, sweep_dir)`, which writes them
  into `sweep_dir` and returns (caption, file name) pairs; [] when it defines none or fails,
  and for --runs (no sweep file)."""
  if not manifest["sweep_file"]:
    return []
  try:
    make = study_lib.load(manifest["sweep_file"]).figures
    return list(make(list(runs), sweep_dir)) if make else []
  except Exception as e:  # noqa: BLE001
    print(f"[report] {manifest['sweep_file']}: figures() failed: {type(e).__name__}: {e}")
    return []


def study_verdict(manifest: dict, runs: Sequence[Run],
                  reclassify=lambda runs: None) -> list[str]:
  """The `## Verdict` lines of a study: its sweep file's `analyze(runs)`, which measures the
  claim's quantities on these runs and says whether they agree, then `## Robustness`, the
  verdict under the neighbouring thresholds its file lists (`robustness.section`; `reclassify`
  classifies the runs again when a threshold moves the collapse cutoff); [] for a plain sweep.
  A failing analysis is reported in the report (and printed), never hidden."""
  if not manifest["sweep_file"]:  # --runs: hand-launched runs, no sweep file
    return []
  try:
    study = study_lib.load(manifest["sweep_file"])
  except Exception as e:  # noqa: BLE001
    return [f"(No verdict: the sweep file {manifest['sweep_file']} did not load: {e})", ""]
  if study.analyze is None:
    return []
  pending = [r for r in runs if r.status in PENDING]
  caveat = ([f"**The sweep is not complete:** {len(pending)} of {len(runs)} points have not "
             "finished. The call below reads only the runs that ended, and may change when the "
             "rest has run.", ""] if pending else [])
  try:
    lines = ["## Verdict", "", *caveat, *study.analyze(list(runs)), ""]
    lines += robustness.section(study, list(runs), reclassify)
    return lines + registration.section(study)
  except Exception as e:  # noqa: BLE001
    print(f"[report] {manifest['sweep_file']}: analyze() failed: {type(e).__name__}: {e}")
    return ["## Verdict", "", f"The analysis failed ({type(e).__name__}: {e}); the tables "
            "below are the raw results.", ""]



def _write_csv(runs: Sequence[Run], names: Sequence[str], path: str) -> None:
  keys = []
  for r in runs:
    keys += [k for k in r.overrides if k not in keys]
  with paths.open_file(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["point", *keys, "status", "detail", "step", *names, "wall_s"])
    for r in runs:
      seconds = wall_seconds(r)
      wall = "" if seconds is None else f"{seconds:.1f}"
      w.writerow([r.name, *[r.overrides.get(k, "") for k in keys], r.status, r.detail,
                  r.final.get("step", ""), *[r.final.get(m, "") for m in names], wall])

