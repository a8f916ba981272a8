"""The report of a sweep: read every point's workdir, write a table, a CSV and plots.

`python launch.py --mode=report --sweep_dir=DIR` (also run at the end of `--mode=sweep`) reads
`DIR/sweep.json` (the points) and each point's `metrics.jsonl`, and writes into DIR:

- `results.csv`: one row per point (swept fields, status, final eval metrics, wall time);
- `report.md`: per group of points that differ only in `seed`, the mean and 95% confidence
  interval (Student's t over seeds) of every final eval metric, over healthy runs only;
- `curves.png`: train loss and the eval metric against step, mean over seeds with the
  min..max spread shaded;
- `final_vs_<field>.png` for every swept field with several values: the final metric against
  it, one line per value of the other swept fields;
- a `Verdict` section when the sweep file defines `analyze(runs)` (the studies in
  `experiments/`): the file's own test of its claim on these runs, as Markdown lines;
- `diagnostics.png` when runs log rows with `"split": "diagnostics"`: per-layer profiles of
  every metric whose name carries a layer index (`.../layer_3/...`), at the first and last
  diagnostics step.

A run is marked, and left out of the means, when it *diverged* (a non-finite loss or gradient
norm) or *collapsed* (its final eval loss is within `COLLAPSE_TOLERANCE` of the unigram
entropy of the eval data, or above it, and its train loss has stopped falling: it learned no
more than token frequencies, the way post-norm fails without warm-up).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import re
from typing import Any, Optional, Sequence

import numpy as np

from transformer import paths, provenance, user_files
from transformer.config import LEGACY_DEFAULTS
from transformer.errors import CommandLineError
from transformer.sweep import points as sweep_lib
from transformer.sweep.points import holds_studies  # noqa: F401 -- report.holds_studies
from transformer.sweep import provenance_report
from transformer.workdir import CONFIG_FILE, PROVENANCE, read_metrics

COLLAPSE_TOLERANCE = 0.02  # relative: eval loss >= (1 - this) * unigram entropy = collapsed
_NOT_METRICS = ("step", "split", "time", "tokens", "examples")
_LAYER = re.compile(r"^(?P<pre>.*?)layers?[_/.]?(?P<index>\d+)(?P<post>.*)$")


@dataclasses.dataclass
class Run:
  """One point of the sweep and what its workdir holds."""
  name: str
  overrides: dict
  num_steps: int
  workdir: str
  metrics: dict
  status: str = "missing"  # finished | diverged | collapsed | incomplete | missing
  detail: str = ""

  @property
  def seed(self):
    return self.overrides.get("seed")

  @property
  def group(self) -> tuple:
    return tuple((k, v) for k, v in self.overrides.items() if k != "seed")

  @property
  def final(self) -> dict:
    evals = self.metrics.get("eval", [])
    return evals[-1] if evals else {}

  @property
  def healthy(self) -> bool:
    return self.status == "finished"


def _finite(row: dict, keys=("loss", "grad_norm")) -> bool:
  return all(math.isfinite(row[k]) for k in keys if isinstance(row.get(k), (int, float)))


def classify(run: Run, unigram_entropy: Optional[float]) -> None:
  """Sets `run.status` and `run.detail` from its metrics."""
  rows = run.metrics.get("train", []) + run.metrics.get("eval", [])
  if not rows:
    run.status, run.detail = "missing", "no metrics yet"
    return
  bad = next((r for r in rows if not _finite(r)), None)
  if bad is not None:
    run.status, run.detail = "diverged", f"non-finite {bad['split']} metrics at step {bad['step']}"
    return
  final = run.final
  if not final or final["step"] < run.num_steps:
    last = max(r["step"] for r in rows)
    run.status, run.detail = "incomplete", f"at step {last} of {run.num_steps}"
    return
  if unigram_entropy and _stuck_at(run, unigram_entropy):
    run.status = "collapsed"
    run.detail = (f"final eval loss {final['loss']:.4f} vs unigram entropy "
                  f"{unigram_entropy:.4f} nats/token, train loss flat over the second half")
    return
  run.status, run.detail = "finished", ""


def _stuck_at(run: Run, entropy: float) -> bool:
  """The final eval loss is at (or above) `entropy` and the train loss no longer falls: the
  least-squares line through the train losses of the second half of training drops by less
  than COLLAPSE_TOLERANCE * entropy over that half. (A line, not the half's first and last
  rows: one logged batch's loss is noisy, by more than the tolerance on 1k-token batches. A
  short run still on its way down is not collapsed, only unfinished in spirit.)"""
  if run.final["loss"] < (1 - COLLAPSE_TOLERANCE) * entropy:
    return False
  half = [(r["step"], r["loss"]) for r in run.metrics.get("train", [])
          if r["step"] >= run.final["step"] / 2]
  if len(half) < 2:  # read_metrics keeps one row per step: two rows span two steps
    return False
  steps, losses = np.array(half, dtype=np.float64).T
  slope = np.polyfit(steps, losses, 1)[0]
  return -slope * (steps[-1] - steps[0]) < COLLAPSE_TOLERANCE * entropy


def entropy_key(data: Any, identity: Optional[str]) -> str:
  """The entropy cache's key: the data config and the digest of the bytes it read
  (`provenance.data_identity`): the default corpus, this Python's stdlib, differs per Python.
  Without a digest (runs from before provenance, whose committed caches hold such keys) the
  data config's alone."""
  payload = data if identity is None else {"data": data, "identity": identity}
  return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _recorded_identity(saved: dict) -> Optional[str]:
  """The digest of the data the run recorded reading at its first start; None without one."""
  return (provenance.recorded_data(_section(saved, PROVENANCE)) or {}).get("digest")


def unigram_entropy(workdir: str, cache_dir: str) -> Optional[float]:
  """Entropy (nats/token) of the token frequencies of the eval split of the run in `workdir`,
  for decoder LMs; None for other kinds. Cached in `cache_dir` by `entropy_key`: looked up
  under the data identity the run recorded (its data config alone for a run without one),
  then under that of the data here, where it is computed (and cached) when neither is. A
  recorded identity that differs from the data here is reported: the collapse check then
  compares with the entropy of other bytes."""
  saved = saved_config(workdir)
  if saved is None or _section(saved, "model").get("kind") != "decoder_lm":
    return None
  cache_path = paths.join(cache_dir, "unigram_entropy.json")
  cache = _read_cache(cache_path)
  recorded = _recorded_identity(saved)
  key = entropy_key(saved.get("data"), recorded)
  if isinstance(cache.get(key), (int, float)):
    return cache[key]
  if not paths.has_scheme(workdir) and os.path.islink(workdir.rstrip("/")):
    # A run linked from another sweep (--reuse_runs_from): that sweep's cache holds the value
    # measured for it, which matters for a run that recorded no data identity (its key alone
    # cannot tell which Python's stdlib it read).
    home = os.path.dirname(os.path.realpath(workdir.rstrip("/")))
    value = _read_cache(os.path.join(home, "unigram_entropy.json")).get(key)
    if isinstance(value, (int, float)):
      return value
  here = provenance.data_identity(_section(saved, "data"))["digest"]
  if recorded and here != recorded:
    print(f"[report] {workdir} read data {recorded}; the data here is {here}, so its unigram "
          "entropy is that of the data here.")
  key = entropy_key(saved.get("data"), here)
  if not isinstance(cache.get(key), (int, float)):
    from transformer.config import DataConfig  # noqa: PLC0415
    from transformer.data.pipeline import lm_data  # noqa: PLC0415 -- TensorFlow
    data_cfg = DataConfig(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in saved["data"].items()})
    data = lm_data(data_cfg, saved["train"]["batch_size"], seed=0, workdir=workdir)
    counts = np.zeros(data.tokenizer.vocab_size, np.int64)
    for batch in data.eval_batches():
      counts += np.bincount(batch["targets"][batch["weights"] > 0].ravel(),
                            minlength=counts.size)[:counts.size]
    p = counts[counts > 0] / counts.sum()
    cache[key] = float(-(p * np.log(p)).sum())
    if paths.has_scheme(cache_path):  # an object is replaced whole: never half-written
      paths.write_text(cache_path, json.dumps(cache, indent=1))
      return cache[key]
    tmp = f"{cache_path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(cache, f, indent=1)
    os.replace(tmp, cache_path)  # atomic: a killed report leaves no half-written cache
  return cache[key]


def saved_config(workdir: str) -> Optional[dict]:
  """The run's config.json as a dict, None when there is none; a file that is not a JSON
  object is a one-line UserFileError."""
  path = paths.join(workdir, CONFIG_FILE)
  if not paths.exists(path):
    return None
  return user_files.read_json_object(path, user_files.SAVED_CONFIG, user_files.SAVED_CONFIG_FIX)


def _section(saved: dict, name: str) -> dict:
  value = saved.get(name)
  return value if isinstance(value, dict) else {}


def _read_cache(path: str) -> dict:
  """The entropy cache; `{}` (so: computed again) when it is missing or corrupt."""
  try:
    with paths.open_file(path, encoding="utf-8") as f:
      cache = json.load(f)
  except (OSError, ValueError):
    return {}
  return cache if isinstance(cache, dict) else {}


def load_runs(sweep_dir: str, entropy: bool = True) -> list[Run]:
  """The sweep's runs, classified (collapse is checked only with `entropy`, which computes
  and caches the unigram entropy of each run's data)."""
  manifest = sweep_lib.read_manifest(sweep_dir)
  runs = []
  for p in manifest["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    run = Run(p["name"], p["overrides"], p["num_steps"], workdir, read_metrics(workdir))
    runs.append(run)
  for run in runs:
    classify_run(run, sweep_dir, entropy)
  return runs


def classify_run(run: Run, sweep_dir: str, entropy: bool = True) -> None:
  """`classify(run, ...)` with its data's unigram entropy (when `entropy`) for collapse."""
  h = None
  if entropy and run.metrics.get("eval"):
    try:
      h = unigram_entropy(run.workdir, sweep_dir)
    except Exception as e:  # noqa: BLE001 -- the report goes on without collapse marks
      print(f"[report] unigram entropy of {run.workdir}'s data not computed ({e}); "
            "collapse is not checked.")
  classify(run, h)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
  """Mean and the half-width of its `confidence` interval (Student's t, n - 1 degrees of
  freedom); the half-width is nan for fewer than 2 values."""
  x = np.asarray(values, np.float64)
  if x.size == 0:
    return float("nan"), float("nan")
  if x.size < 2:
    return float(x[0]), float("nan")
  from scipy import stats  # noqa: PLC0415
  half = stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
  return float(x.mean()), float(half)


def _fmt(mean: float, half: float) -> str:
  if math.isnan(mean):
    return "-"
  return f"{mean:.4f}" if math.isnan(half) else f"{mean:.4f} ± {half:.4f}"


def eval_metric_names(runs: Sequence[Run]) -> list[str]:
  names = []
  for r in runs:
    for k, v in r.final.items():
      if k not in _NOT_METRICS and isinstance(v, (int, float)) and k not in names:
        names.append(k)
  return names


def groups(runs: Sequence[Run]) -> dict[tuple, list[Run]]:
  out: dict[tuple, list[Run]] = {}
  for r in runs:
    out.setdefault(r.group, []).append(r)
  return out


def swept_fields(runs: Sequence[Run]) -> list[str]:
  """Fields (other than seed) that take more than one value across the points."""
  fields = []
  for r in runs:
    for k in r.overrides:
      if k != "seed" and k not in fields:
        fields.append(k)
  return [f for f in fields if len({json.dumps(r.overrides.get(f), default=str)
                                    for r in runs}) > 1]


def _label(group: tuple, swept: Optional[Sequence[str]] = None) -> str:
  """`placement=post, learning_rate=0.01`: the group's fields (only those in `swept`, the
  fields that vary across the sweep, when given) by their last name part; a field the group's
  points leave unset shows as `config` (the value of --config)."""
  return ", ".join(f"{k.rsplit('.', 1)[-1]}={'config' if v is None else v}" for k, v in group
                   if swept is None or k in swept) or "all"


def report_metric(metric: str, names: Sequence[str], sweep_dir: str) -> str:
  """`metric` (--report_metric), which some run must have logged; default bits_per_byte if
  logged, else loss."""
  if not metric:
    return "bits_per_byte" if "bits_per_byte" in names else "loss"
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

  counts = {s: sum(r.status == s for r in runs)
            for s in ("finished", "diverged", "collapsed", "incomplete", "missing")}
  command = manifest.get("command") or " ".join([  # "command": --runs (sweep/compare.py)
      "python launch.py --mode=sweep", f"--sweep={manifest['sweep_file']}",
      f"--config={manifest['config']}", *manifest["overrides"],
      f"--sweep_dir={manifest.get('sweep_dir', sweep_dir)}"])
  lines = [f"# {title or 'Sweep report: ' + paths.basename(paths.absolute(sweep_dir))}", "",
           f"Command: `{command}`", "",
           *([f"**Claim under test:** {claim}", ""] if (claim := study_claim(manifest)) else []),
           f"{len(runs)} points: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ".",
           ""]
  prov = provenance_report.summarize(runs, manifest)
  for warning in prov.warnings:
    print(f"[report] WARNING: {warning}")
  lines += provenance_report.warning_lines(prov)
  lines += study_verdict(manifest, runs)
  group_cols = [k for k in fields]
  header = group_cols + ["healthy / runs"] + [m + (" *" if m == metric else "") for m in names]
  lines += ["## Final eval", "",
            "Mean ± half-width of the 95% confidence interval over seeds (Student's t), over "
            "healthy runs only; `*` marks the metric of the plots.", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for group, members in groups(runs).items():
    values = dict(group)
    ok = [r for r in members if r.healthy]
    cells = [str(values.get(k, "")) for k in group_cols]
    cells.append(f"{len(ok)} / {len(members)}")
    cells += [_fmt(*mean_ci([r.final[m] for r in ok if m in r.final])) for m in names]
    lines.append("| " + " | ".join(cells) + " |")
  marked = [r for r in runs if not r.healthy]
  if marked:
    lines += ["", "## Runs not averaged in", "", "| point | status | detail | log |",
              "|---|---|---|---|"]
    for r in marked:
      lines.append(f"| {r.name} | {r.status} | {r.detail} | `{r.name}/log.txt` |")

  lr_field = next((f for f in fields if f.rsplit(".", 1)[-1] == "learning_rate"), None)
  if lr_field:
    lines += ["", *lr_sensitivity_table(runs, lr_field, fields)]

  figures = []
  if _plot_curves(runs, metric, os.path.join(sweep_dir, "curves.png")):
    figures.append(("Learning curves (mean over healthy seeds, min..max shaded)", "curves.png"))
  for field in fields:
    path = f"final_vs_{field.replace('.', '_')}.png"
    if _plot_final_vs(runs, field, fields, metric, os.path.join(sweep_dir, path)):
      figures.append((f"Final {metric} against {field}", path))
  figures += study_figures(manifest, runs, sweep_dir)
  if _plot_diagnostics(runs, os.path.join(sweep_dir, "diagnostics.png")):
    figures.append(("Per-layer diagnostics (first and last diagnostics step)", "diagnostics.png"))
  for prefix in manifest.get("report_diagnostics", []):
    for field in fields:
      path = f"{prefix.replace('/', '_')}_vs_{field.replace('.', '_')}.png"
      if _plot_last_layer_vs(runs, prefix, field, fields, os.path.join(sweep_dir, path)):
        figures.append((f"{prefix} diagnostics of the last layer at the first diagnostics step "
                        f"against {field} (95% CI over seeds)", path))
  if _plot_diagnostics_over_steps(runs, os.path.join(sweep_dir, "diagnostics_steps.png")):
    figures.append(("Diagnostics over training (per-layer metrics: the largest layer's value; "
                    "mean over seeds)", "diagnostics_steps.png"))
  lines += ["", *prov.lines] if prov.lines else []
  lines += ["", "## Figures", ""]
  for caption, path in figures:
    lines += [f"{caption}:", "", f"![{caption}]({path})", ""]
  lines += ["Raw figures: `results.csv`; every run's metrics: `<point>/metrics.jsonl` "
            "(`metrics.jsonl.gz` in a committed study); its "
            "output: `<point>/log.txt`."]
  out = paths.join(sweep_dir, "report.md")
  paths.write_text(out, "\n".join(lines) + "\n")
  return out


def study_claim(manifest: dict) -> str:
  """The claim as the sweep file words it now (`CLAIM`), else as the manifest recorded it when
  the sweep ran."""
  try:
    return getattr(sweep_lib.sweep_module(manifest["sweep_file"]), "CLAIM", "") or \
        manifest.get("claim", "")
  except Exception:  # noqa: BLE001
    return manifest.get("claim", "")


def study_figures(manifest: dict, runs: Sequence[Run], sweep_dir: str) -> list[tuple[str, str]]:
  """The study's own figures: its sweep file's `figures(runs, sweep_dir)`, which writes them
  into `sweep_dir` and returns (caption, file name) pairs; [] when it defines none or fails."""
  try:
    make = getattr(sweep_lib.sweep_module(manifest["sweep_file"]), "figures", None)
    return list(make(list(runs), sweep_dir)) if make else []
  except Exception as e:  # noqa: BLE001
    print(f"[report] {manifest['sweep_file']}: figures() failed: {type(e).__name__}: {e}")
    return []


def study_verdict(manifest: dict, runs: Sequence[Run]) -> list[str]:
  """The `## Verdict` lines of a study: its sweep file's `analyze(runs)`, which measures the
  claim's quantities on these runs and says whether they agree; [] for a plain sweep. A
  failing analysis is reported in the report (and printed), never hidden."""
  if not manifest["sweep_file"]:  # --runs: hand-launched runs, no sweep file
    return []
  try:
    module = sweep_lib.sweep_module(manifest["sweep_file"])
  except Exception as e:  # noqa: BLE001
    return [f"(No verdict: the sweep file {manifest['sweep_file']} did not load: {e})", ""]
  analyze = getattr(module, "analyze", None)
  if analyze is None:
    return []
  try:
    return ["## Verdict", "", *analyze(list(runs)), ""]
  except Exception as e:  # noqa: BLE001
    print(f"[report] {manifest['sweep_file']}: analyze() failed: {type(e).__name__}: {e}")
    return ["## Verdict", "", f"The analysis failed ({type(e).__name__}: {e}); the tables "
            "below are the raw results.", ""]


def initial_loss(run: Run) -> float:
  """The loss at initialization, ln(vocab size) (a model whose outputs are near uniform), from
  the run's config.json; the first logged train loss if there is no config."""
  vocab_size = _section(saved_config(run.workdir) or {}, "model").get("vocab_size")
  if isinstance(vocab_size, int) and vocab_size > 0:
    return math.log(vocab_size)
  train = run.metrics.get("train", [])
  return train[0]["loss"] if train else float("nan")


def clipped_final_loss(run: Run) -> Optional[float]:
  """Wortsman et al.'s min(final eval loss, initial loss): a diverged run counts as the
  initial loss ln V; None for a run that has not ended."""
  if run.status == "diverged":
    return initial_loss(run)
  if run.status not in ("finished", "collapsed") or "loss" not in run.final:
    return None
  loss = run.final["loss"]
  return initial_loss(run) if not math.isfinite(loss) else min(loss, initial_loss(run))


def mean_clipped_loss_per_lr(runs: Sequence[Run], lr_field: str) -> dict[float, float]:
  """`{lr: mean over seeds of clipped_final_loss}` for the LRs with an ended run."""
  per_lr: dict[float, list[float]] = {}
  for r in runs:
    v = clipped_final_loss(r)
    if v is not None:
      per_lr.setdefault(r.overrides[lr_field], []).append(v)
  return {lr: float(np.mean(v)) for lr, v in sorted(per_lr.items())}


def largest_stable_lr(runs: Sequence[Run], lr_field: str) -> Optional[float]:
  """The largest LR of the grid up to which training is stable: every run (seed) finished
  healthily at it and at every grid LR from the best one (lowest mean clipped final loss) up
  to it; None when the best LR's runs already fail. Counted up from the best LR, not from the
  grid's smallest: below it a short run learns slowly, and one that ends near the unigram
  entropy there is slow, not unstable; and a lucky set of seeds above an LR where training
  failed does not count as stable."""
  means = mean_clipped_loss_per_lr(runs, lr_field)
  if not means:
    return None
  best = min(means, key=means.get)
  largest = None
  for lr in sorted(lr for lr in means if lr >= best):
    if not all(r.status == "finished" for r in runs if r.overrides[lr_field] == lr):
      break
    largest = lr
  return largest


def lr_sensitivity_table(runs: Sequence[Run], lr_field: str, fields: Sequence[str]) -> list[str]:
  """Markdown lines: per value of the other swept fields, the best learning rate, the largest
  one at which every seed trained healthily, and the LR sensitivity of Wortsman et al. (2023):
  the mean over the grid of (final eval loss, clipped at the initial loss; a diverged run
  counts as the initial loss) minus the best grid point's, each grid point a mean over seeds.
  Incomplete or missing runs are left out."""
  others = [f for f in fields if f != lr_field]
  lines = ["## Learning-rate sweep", "",
           "LR sensitivity (Wortsman et al. 2023): mean over the LR grid of min(final eval loss, "
           "initial loss ln V) minus the best LR's; diverged runs count as the initial loss. "
           "Largest stable LR: the largest such that at it and at every grid LR from the best "
           "one up to it every seed finished (neither diverged nor collapsed).", "",
           "| " + " | ".join(others + ["best LR", "best eval loss", "largest stable LR",
                                       "LR sensitivity", "grid points"]) + " |",
           "|" + "---|" * (len(others) + 5)]
  by_other: dict[tuple, list[Run]] = {}
  for r in runs:
    by_other.setdefault(tuple(r.overrides.get(f) for f in others), []).append(r)
  for key, members in by_other.items():
    means = mean_clipped_loss_per_lr(members, lr_field)
    if not means:
      continue
    stable = largest_stable_lr(members, lr_field)
    best_lr = min(means, key=means.get)
    sensitivity = float(np.mean([m - means[best_lr] for m in means.values()]))
    cells = [str(v) for v in key] + [f"{best_lr:g}", f"{means[best_lr]:.4f}",
                                     f"{stable:g}" if stable else "none",
                                     f"{sensitivity:.4f}", str(len(means))]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def _write_csv(runs: Sequence[Run], names: Sequence[str], path: str) -> None:
  keys = []
  for r in runs:
    keys += [k for k in r.overrides if k not in keys]
  with paths.open_file(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["point", *keys, "status", "detail", "step", *names, "wall_s", "workdir"])
    for r in runs:
      times = [row["time"] for rows in r.metrics.values() for row in rows if "time" in row]
      wall = f"{max(times) - min(times):.1f}" if times else ""
      w.writerow([r.name, *[r.overrides.get(k, "") for k in keys], r.status, r.detail,
                  r.final.get("step", ""), *[r.final.get(m, "") for m in names], wall,
                  r.workdir])


def _pyplot():
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415
  return plt


PNG_COLORS = 256  # plots are lines on white: a palette keeps their colours, 3x smaller


def save_png(plt, fig, path: str, dpi: int) -> None:
  """Writes `fig` to `path` as a palette PNG and closes it. The bytes depend only on the
  figure (no date or software version in the file), so a regenerated report is identical."""
  from PIL import Image  # noqa: PLC0415 -- loaded with matplotlib, only when drawing
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=dpi)
  plt.close(fig)
  image = Image.open(buf).convert("RGB")
  image = image.quantize(PNG_COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
  with paths.open_file(path, "wb") as f:
    image.save(f, format="png", optimize=True)


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


def _lr_field(fields: Sequence[str]) -> Optional[str]:
  return next((f for f in fields if f.rsplit(".", 1)[-1] == "learning_rate"), None)


def _lr_colors(plt, values: Sequence[float]) -> dict:
  """A sequential colour per learning rate (dark = small, bright = large)."""
  cmap = plt.get_cmap("viridis")
  values = sorted(values)
  n = max(len(values) - 1, 1)
  return {v: cmap(0.9 * i / n) for i, v in enumerate(values)}


def _split(runs: Sequence[Run], keys: Sequence[str]) -> dict[tuple, list[Run]]:
  out: dict[tuple, list[Run]] = {}
  for r in runs:
    out.setdefault(tuple((k, r.overrides.get(k)) for k in keys), []).append(r)
  return out


def _mark_legend(ax, handles: list, plt, final_eval: bool = False) -> None:
  """The legend outside the axes on the right, with the run marks explained (and the last
  eval's, when `final_eval`)."""
  from matplotlib.lines import Line2D  # noqa: PLC0415
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


def _curves_figure(runs: Sequence[Run], metric: str):
  """The learning-curves figure (or None): with a learning-rate field, one panel per value of
  the other swept fields, train loss (mean over healthy seeds, line) and eval loss (marks)
  coloured by LR, every unhealthy run drawn alone (dotted) and marked at its end; without one,
  train and eval panels with one colour per group. Legends outside the axes."""
  swept = swept_fields(runs)
  lr = _lr_field(swept)
  plt = _pyplot()
  if lr is None:
    return _curves_by_group(runs, metric, swept, plt)
  others = [f for f in swept if f != lr]
  panels = _split(runs, others)
  colors = _lr_colors(plt, {r.overrides[lr] for r in runs})
  cols = min(3, len(panels))
  rows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols + 1.4, 3.2 * rows), squeeze=False,
                           sharey=True)
  drawn = False
  for ax, (key, members) in zip(axes.ravel(), panels.items()):
    for value, lr_runs in sorted(_split(members, [lr]).items(), key=lambda kv: kv[0][0][1]):
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
    ax.set_title(_label(key, swept) if key else "all", fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  if not drawn:
    plt.close(fig)
    return None
  finals = [r.final["loss"] for r in runs if r.healthy and "loss" in r.final]
  highest = max((row["loss"] for r in runs for row in r.metrics.get("train", [])
                 if math.isfinite(row.get("loss", math.nan))), default=None)
  if finals and highest is not None:
    # A far-off run (a model without any norm starts near 100 nats) would flatten the rest:
    # the shared y stops at twice the median final loss or 1.2x the loss at init, ln V.
    cap = max(2 * float(np.median(finals)),
              1.2 * float(np.median([initial_loss(r) for r in runs])))
    if highest > cap:
      low = min(row["loss"] for r in runs for row in r.metrics.get("train", [])
                if math.isfinite(row.get("loss", math.nan)))
      axes.ravel()[0].set_ylim(low - 0.05 * (cap - low), cap)
  for ax, (key, members) in zip(axes.ravel(), panels.items()):
    for r in members:
      if r.status == "diverged":
        steps = [row["step"] for row in r.metrics.get("train", [])]
        _top_edge(ax, [(max(steps) if steps else 0, r, None)], colors[r.overrides[lr]])
  for ax in axes.ravel()[len(panels):]:
    ax.axis("off")
  for ax in axes[:, 0]:
    ax.set_ylabel("train loss (line) / eval loss (marks)")
  from matplotlib.lines import Line2D  # noqa: PLC0415
  handles = [Line2D([], [], color=c, lw=2, label=f"LR {v:g}") for v, c in colors.items()]
  _mark_legend(axes[0, -1] if len(panels) >= cols else axes.ravel()[len(panels) - 1],
               handles, plt, final_eval=True)
  fig.tight_layout()
  return fig


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
                                 label=f"{_label(group, swept)} (n={len(ok)})")[0])
        ax.fill_between(steps, lo, hi, color=color, alpha=0.2)
        drawn = True
      for r in members:  # marked runs are drawn thin, each alone, so they are seen
        if not r.healthy and r.metrics.get(split):
          rows = [row for row in r.metrics[split] if key in row]
          ax.plot([row["step"] for row in rows], [row[key] for row in rows], color=color,
                  ls=":", lw=1)
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


def _plot_curves(runs: Sequence[Run], metric: str, path: str) -> bool:
  fig = _curves_figure(runs, metric)
  if fig is None:
    return False
  save_png(_pyplot(), fig, path, dpi=90)
  return True


def _is_number(v: Any) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def _final_vs_figure(runs: Sequence[Run], field: str, fields: Sequence[str], metric: str):
  """Final `metric` against `field` (or None): one panel per value of the first other swept
  field when there are two or more others (e.g. per placement), one line per value of the
  rest, coloured by learning rate (sequential) when that is one of them. The line is the mean
  over healthy seeds; every run is a mark: filled when healthy, hollow when collapsed, an x on
  the top edge when diverged (collapsed runs are the LR studies' main evidence, so they are
  drawn, not dropped). Legend outside the axes."""
  values = []
  for r in runs:
    if field in r.overrides and r.overrides[field] not in values:
      values.append(r.overrides[field])
  if not values:
    return None
  numeric = all(_is_number(v) for v in values)
  if numeric:
    values = sorted(values)
  others = [f for f in fields if f != field]
  lr = _lr_field(others)
  if len(others) >= 2:
    panel_keys = [next(f for f in others if f != lr)]
  elif len(others) == 1 and field == _lr_field(fields):
    panel_keys = others
  else:
    panel_keys = []
  line_keys = [f for f in others if f not in panel_keys]
  plt = _pyplot()
  panels = _split(runs, panel_keys)
  cols = min(3, len(panels))
  nrows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols + 1.8, 3.2 * nrows),
                           squeeze=False, sharey=True)
  cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  lr_colors = _lr_colors(plt, {r.overrides.get(lr) for r in runs}) if lr in line_keys else {}
  line_index: dict[tuple, int] = {}
  handles: dict[str, Any] = {}
  drawn = False
  xs_of = lambda v: v if numeric else values.index(v)  # noqa: E731
  marks_of: dict = {}
  for ax, (pkey, members) in zip(axes.ravel(), panels.items()):
    marks = []
    for lkey, line_runs in _split(members, line_keys).items():
      i = line_index.setdefault(lkey, len(line_index))
      color = (lr_colors[dict(lkey)[lr]] if lr_colors else cycle[i % len(cycle)])
      xs, ys, errs = [], [], []
      points = []
      for v in values:
        at = [r for r in line_runs if r.overrides.get(field) == v]
        ok = [r.final[metric] for r in at if r.healthy and metric in r.final]
        if ok:
          mean, half = mean_ci(ok)
          xs.append(xs_of(v))
          ys.append(mean)
          errs.append(0.0 if math.isnan(half) else half)
        points += [(xs_of(v), r, r.final.get(metric)) for r in at]
      label = _label(lkey) if lkey else "mean over healthy seeds"
      if xs:
        line = ax.errorbar(xs, ys, yerr=errs, color=color, capsize=2, lw=1.3, label=label)
        handles.setdefault(label, line)
        drawn = True
      _run_marks(ax, points, color)
      marks.append((points, color))
      drawn = drawn or bool(points)
    if numeric and min(values) > 0 and max(values) / min(values) >= 10:
      ax.set_xscale("log")
    if not numeric:
      ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=30, fontsize=8)
    ax.set_title(_label(pkey) if pkey else f"{metric} vs {field}", fontsize=9)
    ax.set_xlabel(field)
    ax.grid(alpha=0.3)
    ax.autoscale_view()
    for points, color in marks:
      marks_of[(id(ax), id(points))] = (points, color, ax)
  if not drawn:
    plt.close(fig)
    return None
  cap = _outlier_cap([v for points, _, _ in marks_of.values() for _, _, v in points
                      if v is not None and math.isfinite(v)])
  if cap is not None:  # the panels share y: one far-off group would flatten every other
    low = min(v for points, _, _ in marks_of.values() for _, _, v in points
              if v is not None and math.isfinite(v))
    axes.ravel()[0].set_ylim(low - 0.05 * (cap - low), cap)
  for points, color, ax in marks_of.values():
    _top_edge(ax, points, color, cap)
  for ax in axes.ravel()[len(panels):]:
    ax.axis("off")
  for ax in axes[:, 0]:
    ax.set_ylabel(f"final eval {metric}")
  if lr_colors:
    from matplotlib.lines import Line2D  # noqa: PLC0415
    hs = [Line2D([], [], color=c, lw=2, label=f"LR {v:g}") for v, c in sorted(lr_colors.items())]
  else:
    hs = list(handles.values())
  _mark_legend(axes[0, -1], hs, plt)
  fig.tight_layout()
  return fig


def _plot_final_vs(runs: Sequence[Run], field: str, fields: Sequence[str], metric: str,
                   path: str) -> bool:
  fig = _final_vs_figure(runs, field, fields, metric)
  if fig is None:
    return False
  save_png(_pyplot(), fig, path, dpi=90)
  return True


def layer_profiles(row: dict) -> dict[str, dict[int, float]]:
  """`{metric: {layer: value}}` from a diagnostics row's keys that carry a layer index."""
  out: dict[str, dict[int, float]] = {}
  for k, v in row.items():
    m = _LAYER.match(k)
    if m and k not in _NOT_METRICS and _is_number(v):
      name = (m["pre"] + "*" + m["post"]).strip("/._")
      out.setdefault(name, {})[int(m["index"])] = float(v)
  return out


def _plot_last_layer_vs(runs: Sequence[Run], prefix: str, field: str, fields: Sequence[str],
                        path: str) -> bool:
  """Per-layer metrics whose name (layer index replaced by `*`, e.g.
  `decoder/*/feed_forward/grad_norm`) contains `prefix`: the last layer's value at the first
  diagnostics step against `field` (numeric), one line per metric and value of the other
  swept fields."""
  if not all(_is_number(r.overrides.get(field)) for r in runs):
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
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.8))
  for key, by_x in points.items():
    xs = sorted(by_x)
    stats = [mean_ci(by_x[x]) for x in xs]
    ax.errorbar(xs, [m for m, _ in stats], yerr=[0 if math.isnan(h) else h for _, h in stats],
                marker="o", capsize=3, label=f"{key[0]} {_label(key[1:])}")
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
  """A figure with `n` panels, three to a row; `axes` is `[rows, cols]`."""
  cols = min(3, n)
  rows = math.ceil(n / cols)
  return plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)


def _save_panels(plt, fig, axes, n: int, path: str) -> None:
  """Hides the unused panels, puts the legend on the first, writes `path`."""
  for ax in axes.ravel()[n:]:
    ax.axis("off")
  axes.ravel()[0].legend(fontsize=6)
  fig.tight_layout()
  save_png(plt, fig, path, dpi=100)

def _plot_diagnostics_over_steps(runs: Sequence[Run], path: str) -> bool:
  swept = swept_fields(runs)
  series: dict[str, dict[tuple, dict[int, list[float]]]] = {}  # metric -> group -> step -> [v]
  for r in runs:
    rows = r.metrics.get("diagnostics", [])
    if len(rows) < 2:
      continue
    for row in rows:
      values = {name: max(prof.values()) for name, prof in layer_profiles(row).items()}
      values.update({k: float(v) for k, v in row.items() if k not in _NOT_METRICS
                     and _is_number(v) and not _LAYER.match(k)})
      for name, v in values.items():
        series.setdefault(name, {}).setdefault(r.group, {}).setdefault(row["step"], []).append(v)
  if not series:
    return False
  plt = _pyplot()
  names = sorted(series)
  fig, axes = _panel_grid(plt, len(names))
  for ax, name in zip(axes.ravel(), names):
    for group, by_step in series[name].items():
      steps = sorted(by_step)
      ax.plot(steps, [np.mean(by_step[t]) for t in steps], label=_label(group, swept))
    ax.set_xlabel("step")
    ax.set_title(name, fontsize=8)
    ax.grid(alpha=0.3)
  _save_panels(plt, fig, axes, len(names), path)
  return True


def _plot_diagnostics(runs: Sequence[Run], path: str) -> bool:
  swept = swept_fields(runs)
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
  if not profiles:
    return False
  plt = _pyplot()
  names = sorted(profiles)
  fig, axes = _panel_grid(plt, len(names))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  group_index = {g: i for i, g in enumerate(groups(runs))}
  for ax, name in zip(axes.ravel(), names):
    for (group, which, step), profs in profiles[name].items():
      layers = sorted(set.intersection(*(set(p) for p in profs)))
      mean = [np.mean([p[l] for p in profs]) for l in layers]
      ax.plot(layers, mean, marker="o", ms=3, ls="-" if which == "last" else "--",
              color=colors[group_index[group] % len(colors)],
              label=f"{_label(group, swept)} @ {step}")
    ax.set_xlabel("layer")
    ax.set_title(name, fontsize=8)
    ax.grid(alpha=0.3)
  _save_panels(plt, fig, axes, len(names), path)
  return True


# --- The summary of a folder of studies ---------------------------------------------------------

SUMMARY = "README.md"


def write_summary(results_dir: str) -> tuple[str, list[str]]:
  """Writes `results_dir/README.md` from every study under it (a subfolder with sweep.json
  whose sweep file defines `summarize(runs)`): per study its claim, verdict, headline numbers,
  main figure and the command that regenerates its report; then one table per placement
  across the studies. Returns (the path, the verdict lines printed by --mode=report)."""
  studies, per_placement, columns, verdicts, data_rows = [], {}, [], [], []
  for name in sorted(os.listdir(results_dir)):
    sweep_dir = os.path.join(results_dir, name)
    if not os.path.exists(os.path.join(sweep_dir, sweep_lib.MANIFEST)):
      continue
    manifest = sweep_lib.read_manifest(sweep_dir)
    try:
      summarize = getattr(sweep_lib.sweep_module(manifest["sweep_file"]), "summarize", None)
    except Exception as e:  # noqa: BLE001
      print(f"[report] {name}: sweep file did not load ({e}); left out of the summary.")
      continue
    if summarize is None:
      continue
    runs = load_runs(sweep_dir)
    s = summarize(runs)
    s.setdefault("numbers", []).extend(_recipe_changes_since(runs))
    studies.append((name, manifest, s))
    data_rows.append((name, *_study_data(sweep_dir, runs)))
    verdicts.append(f"{name}: {s['verdict']}")
    for placement, cells in s.get("placements", {}).items():
      for column, value in cells.items():
        if column not in columns:
          columns.append(column)
        per_placement.setdefault(placement, {})[column] = f"{value} ({name})"
  lines = ["# Study results (generated)", "",
           "Written by `python launch.py --mode=report --sweep_dir=" + results_dir + "` from the "
           "committed runs of every study below; do not edit by hand. Each study's own report "
           "(`<study>/report.md`) has its verdict in full: the protocol it rests on, the tables, "
           "the tolerance or seed counts it depends on and the points to add.", ""]
  for name, manifest, s in studies:
    lines += [f"## {name}", "", f"**Claim:** {study_claim(manifest)}", "",
              f"**Verdict:** the data {s['verdict']} ([report]({name}/report.md)).", ""]
    lines += [f"- {n}" for n in s.get("numbers", [])]
    lines.append("")
    if s.get("figure") and os.path.exists(os.path.join(results_dir, name, s["figure"])):
      lines += [f"![{name}]({name}/{s['figure']})", ""]
    lines += [f"Regenerate: `python launch.py --mode=report --sweep_dir={results_dir}/{name}`",
              ""]
  if per_placement:
    lines += ["## Per placement, across the studies", "",
              "Intervals are 95% over seeds (± half-widths; [low, high] for ratios, on the log "
              "scale); the study each number comes from is in parentheses.", ""]
    for placement, cells in per_placement.items():
      lines += [f"### {placement}", "", "| quantity | value |", "|---|---|"]
      lines += [f"| {c} | {cells[c]} |" for c in columns if c in cells]
      lines.append("")
  lines += _data_section(data_rows)
  path = os.path.join(results_dir, SUMMARY)
  with open(path, "w") as f:
    f.write("\n".join(lines).rstrip() + "\n")
  return path, verdicts


def _study_data(sweep_dir: str, runs: Sequence[Run]) -> tuple[list[float], dict, int]:
  """What data a study's runs read: the unigram entropies of its committed cache
  (`unigram_entropy.json`), `{digest: description}` of the data identities its runs recorded
  (`provenance.data_identity`), and how many runs recorded none."""
  cache = _read_cache(os.path.join(sweep_dir, "unigram_entropy.json"))
  entropies = sorted({round(v, 4) for v in cache.values() if isinstance(v, (int, float))})
  recorded, unrecorded = {}, 0
  for run in runs:
    identities = [i for i in map(provenance.recorded_data,
                                 provenance.read_records(run.workdir)) if i]
    if not identities:
      unrecorded += bool(run.metrics)
    for identity in identities:
      recorded.setdefault(identity["digest"],
                          provenance.describe_data(identity).replace(" | ", ", "))
  return entropies, recorded, unrecorded


def _data_section(rows: Sequence[tuple]) -> list[str]:
  """`## Data the studies read`: per study the data its runs recorded (the default corpus is
  the stdlib of the Python that builds it, so it differs between Python versions) and the
  unigram entropy of its eval split; a warning when the recorded corpora differ or some runs
  recorded none."""
  if not rows:
    return []
  digests = {d for _, _, recorded, _ in rows for d in recorded}
  unrecorded = [name for name, _, _, n in rows if n]
  lines = ["## Data the studies read", "",
           "The default corpus is the standard library of the Python that builds it, so it "
           "differs between Python versions; runs started since provenance landed record the "
           "corpus they read (`provenance.jsonl`: Python version, files, digest). The unigram "
           "entropy of the eval split (the collapse check's reference, nats/token) depends on "
           "the corpus and on the eval split's row length and batch count.", ""]
  if len(digests) > 1:
    lines += [f"**The runs recorded {len(digests)} different corpora**: compare numbers "
              "across studies only within one corpus.", ""]
  if unrecorded:
    lines += [f"The runs of {', '.join(unrecorded)} (all or some) predate provenance and did "
              "not record their corpus; experiments/README.md says which it was.", ""]
  lines += ["| study | corpus recorded by the runs | eval-split unigram entropy |",
            "|---|---|---|"]
  for name, entropies, recorded, n in rows:
    text = "; ".join(recorded.values())
    if n:
      text += ("; " if text else "") + f"{n} run(s) not recorded"
    lines.append(f"| {name} | {text or '-'} | "
                 f"{', '.join(f'{e:g}' for e in entropies) or '-'} |")
  return lines + [""]


def _recipe_changes_since(runs: Sequence[Run]) -> list[str]:
  """Notes on fixes made to the recipe after these runs were trained, read off their saved
  configs: a config without `optim.decay_mask` predates the weight-decay mask by parameter role
  and Admin's profiling on a training batch (both landed together)."""
  saved = {r.name: c for r in runs if (c := saved_config(r.workdir)) is not None}
  legacy = [r for r in runs if r.name in saved
            and "decay_mask" not in _section(saved[r.name], "optim")]
  # Trained runs on the old mask: saved before it existed, or made since with it set to match.
  # (One-step runs measure at init, before any update.)
  old_mask = LEGACY_DEFAULTS["optim.decay_mask"]
  ndim = [r for r in runs if r.name in saved and r.num_steps > 1
          and _section(saved[r.name], "optim").get("decay_mask", old_mask) == "ndim"]
  before = sum(r in legacy for r in ndim)
  how = [f"{before} saved before it"] * bool(before) + [
      f"{len(ndim) - before} set `optim.decay_mask=ndim` to match them"] * bool(len(ndim) - before)
  notes = [] if not ndim else [
      f"{len(ndim)} of {len(runs)} runs used the weight-decay mask of runs made before the "
      f"mask by parameter role ({' and '.join(how)}): they decayed every parameter with "
      "ndim >= 2 (in these unrolled models that adds only the [heads, head_dim] "
      "query/key/value biases; reruns use `optim.decay_mask=role`)."]
  admin = [r for r in legacy if _section(saved[r.name], "model").get("norm_placement") == "admin"]
  if admin:
    notes.append(f"Its {len(admin)} Admin runs profiled the omegas on an all-zero (padding) "
                 "batch, not on a training batch as Liu et al. 2020 do (fixed since); Admin's "
                 "numbers may change when rerun.")
  return notes


def verdict_lines(report_path: str) -> list[str]:
  """The verdict paragraph(s) of a written report.md (the `**...**` lines), for the console."""
  with open(report_path, encoding="utf-8") as f:
    return [l for l in f.read().splitlines() if l.startswith("**") and not l.startswith(
        "**Claim")]
