"""The summary of a folder of studies (`--mode=report --sweep_dir=experiments/results`):
per study its claim, verdict, headline numbers and main figure, then tables across studies."""

from __future__ import annotations

import os
from typing import Optional, Sequence

from transformer import paths, provenance
from transformer import study as study_lib
from transformer.config import LEGACY_DEFAULTS
from transformer.sweep import points as sweep_lib
from transformer.report import follow_ups
from transformer.report.budget import BUDGET_LINE, COST_LINE
from transformer.report.registration import REGISTRATION_LINE
from transformer.report.robustness import ROBUSTNESS_LINE
from transformer.report.runs import (PENDING, Run, read_cache, config_section, load_runs,
                                   saved_config, study_claim)


SUMMARY = "README.md"
VERDICT_WORDS = ("**Agrees.**", "**Partly agrees.**", "**Disagrees.**", "**Inconclusive.**")


def write_summary(results_dir: str) -> tuple[str, list[str]]:
  """Writes `results_dir/README.md` from every study under it (a subfolder with a manifest,
  sweep.json or sweep.json.xz, whose sweep file defines `summarize(runs)`): per study its
  claim, verdict, headline numbers, main figure and the command that regenerates its report;
  then one table per placement across the studies. Returns (the path, the verdict lines
  printed by --mode=report)."""
  studies, per_placement, columns, verdicts, data_rows = [], {}, [], [], []
  budgets = {}
  for name in sorted(os.listdir(results_dir)):
    study = _read_study(results_dir, name)
    if study is None:
      continue
    manifest, runs, s = study
    studies.append((name, manifest, s))
    budgets[name] = max((r.num_steps for r in runs), default=0)
    data_rows.append((name, *_study_data(os.path.join(results_dir, name), runs)))
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
    lines += _study_lines(results_dir, name, manifest, s)
  lines += _atlas_lines(results_dir, studies, budgets)
  lines += _placement_lines(per_placement, columns)
  lines += _data_section(data_rows)
  path = os.path.join(results_dir, SUMMARY)
  paths.write_text(path, "\n".join(lines).rstrip() + "\n")
  return path, verdicts


def _read_study(results_dir: str, name: str) -> Optional[tuple[dict, list[Run], dict]]:
  """(manifest, runs, its sweep file's `summarize(runs)` with the recipe notes and, while
  points are pending, the inconclusive verdict) of the study `results_dir/name`; None when it
  is no study, its sweep file does not load (said) or defines no `summarize`."""
  sweep_dir = os.path.join(results_dir, name)
  if not sweep_lib.manifest_path(sweep_dir):
    return None
  manifest = sweep_lib.read_manifest(sweep_dir)
  try:
    summarize = study_lib.load(manifest["sweep_file"]).summarize
  except Exception as e:  # noqa: BLE001
    print(f"[report] {name}: sweep file did not load ({e}); left out of the summary.")
    return None
  if summarize is None:
    return None
  runs = load_runs(sweep_dir)
  s = summarize(runs)
  s.setdefault("numbers", []).extend(recipe_changes_since(runs))
  pending = sum(r.status in PENDING for r in runs)
  if pending:  # its report waits for them (report.py's caveat); so does the summary
    s["verdict"] = "is inconclusive"
    s["numbers"].insert(0, f"The sweep is not complete: {pending} of {len(runs)} points have "
                        "not finished; the numbers below read only the runs that ended.")
  return manifest, runs, s


def _study_lines(results_dir: str, name: str, manifest: dict, s: dict) -> list[str]:
  """A study's section: claim, verdict, the lines quoted from its report, its numbers, its
  main figure (when written) and the command that regenerates its report."""
  lines = [f"## {name}", "", f"**Claim:** {study_claim(manifest)}", "",
           f"**Verdict:** the data {s['verdict']} ([report]({name}/report.md)).", "",
           *_quoted(os.path.join(results_dir, name, "report.md"))]
  lines += [f"- {n}" for n in s.get("numbers", [])]
  lines.append("")
  if s.get("figure") and os.path.exists(os.path.join(results_dir, name, s["figure"])):
    lines += [f"![{name}]({name}/{s['figure']})", ""]
  return lines + [f"Regenerate: `python launch.py --mode=report --sweep_dir={results_dir}/{name}`",
                  ""]


def _atlas_lines(results_dir: str, studies: Sequence[tuple[str, dict, dict]],
                 budgets: dict[str, int]) -> list[str]:
  """`## The placement atlas`: one line per study whose summary names an atlas question
  (`summarize(runs)["atlas"]`, the question in a few words): its answer (the verdict line of
  its report), whether that holds at the neighbouring thresholds, and which of its calls were
  fixed before their data (`registration.REGISTRATION_LINE`); then `_past_early`'s table.
  [] when no study names a question."""
  rows = []
  for name, _, s in studies:
    if not s.get("atlas"):
      continue
    report = os.path.join(results_dir, name, "report.md")
    try:
      verdict = [l for l in verdict_lines(report) if l.startswith(VERDICT_WORDS)]
    except (OSError, UnicodeDecodeError):
      verdict = []
    robust = [l for l in _quoted(report) if l.startswith(ROBUSTNESS_LINE)]
    holds = ("not recomputed" if not robust else "holds" if " holds under every " in robust[0]
             else "does not hold")
    answer = verdict[0] if verdict else f"the data {s['verdict']}"
    calls = [l.removeprefix(REGISTRATION_LINE).strip() for l in _quoted(report)
             if l.startswith(REGISTRATION_LINE)]
    rows.append(f"- **{s['atlas']}** ([{name}]({name}/report.md)) {answer} At the "
                f"neighbouring thresholds the call {holds}."
                + (f" Calls: {calls[0]}" if calls else ""))
  if not rows:
    return []
  return ["## The placement atlas", "",
          "Issue 49's questions (the interactions no paper tabulates, and the claims "
          "published since the studies were planned), one line each: the study's verdict and "
          "whether it holds when each threshold moves to its neighbours (the study's "
          "robustness section).", "", *rows, "", *_past_early(studies, budgets)]


def _past_early(studies: Sequence[tuple[str, dict, dict]], budgets: dict[str, int]) -> list[str]:
  """The atlas's `follow_ups.table`: per question its answers at its study's steps (`budgets`:
  each study's longest run) beside the same answers at 2,400 steps, from the committed
  studies' `summarize(runs)["follow_ups"]` and, for the followers not committed, their files'
  `FOLLOWS` (`follow_ups.pending`)."""
  committed = [follow_ups.Follower(name, None, budgets[name], follow_ups.checked(
      study_lib.split_spec(m["sweep_file"])[0], s["follow_ups"]))
               for name, m, s in studies if s.get("follow_ups")]
  waiting = follow_ups.pending([m["sweep_file"] for _, m, _ in studies],
                               [name for name, _, _ in studies])
  return ["Past early training (issue 69): a 600-step study trains 0.5 tokens per parameter, "
          "so each of its answers is early-training only until a study follows it to 2,400 "
          "steps, and stays so if it does not hold there (it shrinks under the margin, flips, "
          "or grows past it). Per question, its answers at the study's steps (the statistic, "
          "nats/token, mean ± 95% CI over seeds, as its report quotes it) beside the same "
          "statistic at 2,400 steps with the follow-up's word (holds, shrinks under the margin, "
          "flips, ...; its report says how each was judged).", "",
          *follow_ups.table([(name, s) for name, _, s in studies], budgets,
                            follow_ups.followed(committed + waiting)), ""]


def _placement_lines(per_placement: dict[str, dict], columns: Sequence[str]) -> list[str]:
  """`## Per placement, across the studies`: per placement a table of `columns` (`{column:
  "value (study)"}` each); [] when no study reported placements."""
  if not per_placement:
    return []
  lines = ["## Per placement, across the studies", "",
           "Intervals are 95% over seeds (± half-widths; [low, high] for ratios, on the log "
           "scale); the study each number comes from is in parentheses.", ""]
  for placement, cells in per_placement.items():
    lines += [f"### {placement}", "", "| quantity | value |", "|---|---|"]
    lines += [f"| {c} | {cells[c]} |" for c in columns if c in cells]
    lines.append("")
  return lines


def _study_data(sweep_dir: str, runs: Sequence[Run]) -> tuple[list[float], dict, int]:
  """What data a study's runs read: the unigram entropies of its committed cache
  (`unigram_entropy.json`), `{digest: description}` of the data identities its runs recorded
  (`provenance.data_identity`), and how many runs recorded none."""
  cache = read_cache(os.path.join(sweep_dir, "unigram_entropy.json"))
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


def recipe_changes_since(runs: Sequence[Run]) -> list[str]:
  """Notes on fixes made to the recipe after these runs were trained, read off their saved
  configs: a config without `optim.decay_mask` predates the weight-decay mask by parameter role
  and Admin's profiling on a training batch (both landed together)."""
  saved = {r.name: c for r in runs if (c := saved_config(r.workdir)) is not None}
  legacy = [r for r in runs if r.name in saved
            and "decay_mask" not in config_section(saved[r.name], "optim")]
  # Trained runs on the old mask: saved before it existed, or made since with it set to match.
  # (One-step runs measure at init, before any update.)
  old_mask = LEGACY_DEFAULTS["optim.decay_mask"]
  ndim = [r for r in runs if r.name in saved and r.num_steps > 1
          and config_section(saved[r.name], "optim").get("decay_mask", old_mask) == "ndim"]
  before = sum(r in legacy for r in ndim)
  how = [f"{before} saved before it"] * bool(before) + [
      f"{len(ndim) - before} set `optim.decay_mask=ndim` to match them"] * bool(len(ndim) - before)
  notes = [] if not ndim else [
      f"{len(ndim)} of {len(runs)} runs used the weight-decay mask of runs made before the "
      f"mask by parameter role ({' and '.join(how)}): they decayed every parameter with "
      "ndim >= 2 (in these unrolled models that adds only the [heads, head_dim] "
      "query/key/value biases; reruns use `optim.decay_mask=role`)."]
  admin = [r for r in legacy
           if config_section(saved[r.name], "model").get("norm_placement") == "admin"]
  if admin:
    notes.append(f"Its {len(admin)} Admin runs profiled the omegas on an all-zero (padding) "
                 "batch, not on a training batch as Liu et al. 2020 do (fixed since); Admin's "
                 "numbers may change when rerun.")
  return notes


def _quoted(report_path: str) -> list[str]:
  """The study report's robustness line (`robustness.ROBUSTNESS_LINE`: whether its call holds
  under every neighbouring threshold), calls line (`registration.REGISTRATION_LINE`: which
  calls were pre-registered), budget line (`budget.BUDGET_LINE`: tokens per
  parameter, the best run against the bigram level) and cost line (`budget.COST_LINE`: the
  runs it trained and their wall time), as the report states them."""
  try:
    with open(report_path, encoding="utf-8") as f:
      text = f.read().splitlines()
  except (OSError, UnicodeDecodeError):
    return []
  out = []
  for start in (ROBUSTNESS_LINE, REGISTRATION_LINE, BUDGET_LINE, COST_LINE):
    found = [l for l in text if l.startswith(start)]
    out += [found[0], ""] if found else []
  return out


def verdict_lines(report_path: str) -> list[str]:
  """The verdict paragraph(s) of a written report.md (the `**...**` lines), for the console."""
  with open(report_path, encoding="utf-8") as f:
    return [l for l in f.read().splitlines() if l.startswith("**") and not l.startswith(
        "**Claim")]
