"""`launch.py --mode=report --runs=W1,W2,... --report_dir=DIR`: compare runs launched by hand.

The runs need not come from one sweep: any workdirs with a `config.json` and a
`metrics.jsonl` (or `.gz`). DIR becomes a sweep dir of its own: a symlink per run (named by
the workdir's folder name, made unique) and a `sweep.json` whose points' overrides are the
config fields in which the runs differ; the sweep report (`transformer.report.write`) then
writes `report.md` (the final-metric table grouped by those fields, mean ± 95% CI where runs
differ only in `seed`; collapse and divergence marks; curves and `final_vs_<field>` plots),
`results.csv`, and this module adds a per-run table of the differences. A summary is printed.

Nothing here imports JAX.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from transformer import paths, user_files
from transformer.errors import CommandLineError
from transformer.config import FROM_DATA, flat_config
from transformer.sweep import points as sweep_lib
from transformer.workdir import CONFIG_FILE, PROVENANCE

def check_runs(workdirs: Sequence[str]) -> None:
  """One-line CommandLineError for a `--runs` entry that is not a run's workdir."""
  if len(workdirs) < 1:
    raise CommandLineError("--runs is empty; give the runs' workdirs, e.g. --runs=runs/a,runs/b.")
  for w in workdirs:
    if not os.path.isdir(w):
      kind = "is a file, not a workdir" if os.path.exists(w) else "does not exist"
      raise CommandLineError(f"--runs: {w} {kind}; give each run's --workdir.")
    if not os.path.isfile(os.path.join(w, CONFIG_FILE)):
      raise CommandLineError(f"--runs: {w} holds no {CONFIG_FILE}, so no run; give each run's "
                             "--workdir.")
  resolved = [os.path.realpath(w) for w in workdirs]
  if len(set(resolved)) != len(resolved):
    raise CommandLineError(f"--runs={','.join(workdirs)} names a workdir twice.")


def check_report_dir(workdirs: Sequence[str], report_dir: str) -> None:
  """One-line CommandLineError when `report_dir` is one of the compared runs' workdirs or lies
  inside one: the report would be written into that run."""
  out = os.path.realpath(report_dir)
  for w in workdirs:
    run = os.path.realpath(w)
    if out == run or out.startswith(run + os.sep):
      raise CommandLineError(f"--report_dir={report_dir} is inside the compared run {w}; give a "
                             "directory outside every run's workdir.")


def config_differences(configs: Sequence[dict]) -> list[str]:
  """The flattened config fields (`section.field`, `seed`) whose values are not the same in
  every config (a field a config lacks counts as `None`), data-derived fields and the runs'
  provenance (where and when each started: not config) left out, in the first config's order."""
  flats = [flat_config({k: v for k, v in c.items() if k != PROVENANCE})
           for c in configs]
  keys = []
  for f in flats:
    keys += [k for k in f if k not in keys]
  return [k for k in keys if k not in FROM_DATA
          and len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]


def _names(workdirs: Sequence[str]) -> list[str]:
  """A point name per workdir: its folder name, with its parent's prepended when two match."""
  base = [os.path.basename(os.path.normpath(w)) or "run" for w in workdirs]
  names = []
  for w, b in zip(workdirs, base):
    name = b
    if base.count(b) > 1:
      parent = os.path.basename(os.path.dirname(os.path.abspath(os.path.normpath(w))))
      name = f"{parent}-{b}"
    while name in names:
      name += "_"
    names.append(name)
  return names


def _link(report_dir: str, name: str, workdir: str) -> None:
  path = os.path.join(report_dir, name)
  if os.path.islink(path):
    os.remove(path)
  elif os.path.exists(path):
    raise CommandLineError(f"--report_dir={report_dir} already holds {name}, which is not a "
                           "link to a run; give another --report_dir.")
  os.symlink(os.path.abspath(workdir), path)


def write_runs_report(workdirs: Sequence[str], report_dir: str, metric: str = "") -> str:
  """Writes the comparison of `workdirs` into `report_dir` (see the module docstring); prints
  a per-run summary; returns report.md's path."""
  check_runs(workdirs)
  if os.path.exists(report_dir) and not os.path.isdir(report_dir):
    raise CommandLineError(f"--report_dir={report_dir} is a file; give a directory.")
  check_report_dir(workdirs, report_dir)
  configs = [user_files.read_json_object(os.path.join(w, CONFIG_FILE), user_files.SAVED_CONFIG,
                                         user_files.SAVED_CONFIG_FIX) for w in workdirs]
  fields = config_differences(configs)
  names = _names(workdirs)
  os.makedirs(report_dir, exist_ok=True)
  points = []
  for name, workdir, config in zip(names, workdirs, configs):
    _link(report_dir, name, workdir)
    flat = flat_config(config)
    steps = flat.get("train.num_steps")
    points.append({"name": name, "overrides": {k: flat.get(k) for k in fields},
                   "num_steps": steps if isinstance(steps, int) else 0})
  command = (f"python launch.py --mode=report --runs={','.join(workdirs)} "
             f"--report_dir={report_dir}" + (f" --report_metric={metric}" if metric else ""))
  manifest = {"sweep_file": "", "config": "", "overrides": [], "sweep_dir": report_dir,
              "command": command, "runs": [os.path.abspath(w) for w in workdirs],
              "points": points}
  paths.write_text(os.path.join(report_dir, sweep_lib.MANIFEST),
                   json.dumps(manifest, indent=1, default=str))

  from transformer.report import write as report
  from transformer.report import runs as report_runs
  path = report.write_report(report_dir, metric,
                             title=f"Comparison of {len(workdirs)} runs launched by hand")
  runs = {r.name: r for r in report_runs.load_runs(report_dir)}
  header = ["run", "workdir", *fields, "status", "final eval loss"]
  rows = []
  for name, workdir in zip(names, workdirs):
    r = runs[name]
    loss = r.final.get("loss")
    rows.append([name, f"`{workdir}`", *(str(r.overrides.get(k)) for k in fields), r.status,
                 "-" if loss is None else f"{loss:.4f}"])
  section = ["## Runs and their config differences", "",
             ("Config fields that differ between the runs (data-derived fields aside): "
              + (", ".join(f"`{k}`" for k in fields) if fields else "none")
              + ". Every other field is the same in all of them."), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
             *("| " + " | ".join(row) + " |" for row in rows), ""]
  with open(path, encoding="utf-8") as f:
    text = f.read().split("\n")
  at = next((i for i, line in enumerate(text) if line.startswith("## ")), len(text))
  paths.write_text(path, "\n".join(text[:at] + section + text[at:]))

  print(f"Compared {len(workdirs)} runs; they differ in: {', '.join(fields) or 'nothing'}.")
  width = max(len(n) for n in names)
  for name, row in zip(names, rows):
    diffs = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(fields, row[2:-2]))
    print(f"  {name:<{width}}  {row[-2]:<10} final loss {row[-1]:<8} {diffs}")
  return path

