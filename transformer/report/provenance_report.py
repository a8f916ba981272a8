"""The report's provenance section: which commits, libraries, devices and data its runs saw.

Each run's records (`transformer.provenance.read_records`: one per start of the run) are
pooled. The section lists every commit (with its dirty flag), library version set, device and
data identity seen, with the runs that saw it, and counts the runs without any record ("not
recorded": runs from before provenance). The report warns, in report.md and on stdout, when
its runs mix commits, started from a tree with uncommitted changes, or mix data identities:
then their differences may come from the code or the data, not the swept fields.

A sweep none of whose runs recorded provenance (the committed studies made before it) gets no
section and no warning, so its regenerated report keeps its bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from transformer import provenance

# Libraries named in the section's version lines (all recorded ones are in provenance.jsonl).
SHOWN_VERSIONS = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy",
                  "tensorflow", "tensorflow-cpu", "tensorflow-datasets")


@dataclasses.dataclass
class Seen:
  """Each value seen (a commit, a version set, ...) -> the names of the runs that saw it."""
  values: dict[str, list[str]] = dataclasses.field(default_factory=dict)

  def add(self, value: str, run: str) -> None:
    names = self.values.setdefault(value, [])
    if run not in names:
      names.append(run)

  def lines(self, title: str) -> list[str]:
    out = [f"- {title}:"]
    for value, names in self.values.items():
      out.append(f"  - {value}: {_runs(names)}")
    return out


def _runs(names: Sequence[str]) -> str:
  """`a, b, c`; past four names, the first four and the count."""
  return ", ".join(names[:4]) + (f", ... ({len(names)} runs)" if len(names) > 4 else "")


def _git(record: Mapping) -> Mapping:
  git = record.get("git")
  return git if isinstance(git, Mapping) else {}


def _commit_label(record: Mapping) -> str:
  git = _git(record)
  if not git.get("commit"):
    return "unknown (not a git checkout)"
  return git["commit"][:12] + (" (dirty)" if git.get("dirty") else "")


def _versions_label(record: Mapping) -> str:
  v = record.get("versions") if isinstance(record.get("versions"), Mapping) else {}
  return ", ".join([f"Python {record.get('python')}"] +
                   [f"{k} {v[k]}" for k in SHOWN_VERSIONS if k in v])


def _devices_label(record: Mapping) -> str:
  d = record.get("devices")
  if not isinstance(d, Mapping):
    return "not recorded"
  return (f"{d.get('count')} x {d.get('kind')} ({d.get('platform')}), "
          f"{d.get('processes')} process(es)")


@dataclasses.dataclass
class ProvenanceSummary:
  """What the runs' records say, and the warnings they call for."""
  lines: list[str]
  warnings: list[str]


def summarize(runs: Sequence[Any], manifest: Mapping) -> ProvenanceSummary:
  """The section (Markdown lines) and warnings for `runs` (`report.Run`s: `.name`,
  `.workdir`, `.metrics`); both empty when no run recorded provenance."""
  commits, versions, devices, data = Seen(), Seen(), Seen(), Seen()
  known_commits, dirty, digests, missing = set(), [], set(), []
  for run in runs:
    records = provenance.read_records(run.workdir)
    if not records and run.metrics:  # a point not started yet is left out
      missing.append(run.name)
    for r in records:
      commits.add(_commit_label(r), run.name)
      versions.add(_versions_label(r), run.name)
      devices.add(_devices_label(r), run.name)
      if _git(r).get("commit"):
        known_commits.add(_git(r)["commit"])
      if _git(r).get("dirty") and run.name not in dirty:
        dirty.append(run.name)
      identity = provenance.recorded_data(r)
      if identity:
        digests.add(identity["digest"])
        data.add(provenance.describe_data(identity), run.name)
  if not commits.values:  # no run recorded any
    return ProvenanceSummary([], [])
  warnings = []
  if len(known_commits) > 1:
    warnings.append(f"the runs mix {len(known_commits)} commits "
                    f"({', '.join(sorted(c[:12] for c in known_commits))}).")
  if dirty:
    warnings.append(f"{len(dirty)} run(s) started from a tree with uncommitted changes "
                    f"({_runs(dirty)}).")
  if len(digests) > 1:
    warnings.append(f"the runs mix {len(digests)} data identities (see Provenance).")
  lines = ["## Provenance", "",
           "Per start of each run (`<point>/provenance.jsonl`); a resumed run may show "
           "several values.", ""]
  lines += commits.lines("Commits") + versions.lines("Versions") + devices.lines("Devices")
  lines += data.lines("Data") if data.values else ["- Data: not recorded"]
  if missing:
    lines.append(f"- Not recorded (runs from before provenance): {_runs(missing)}")
  sweep = manifest.get("provenance")
  if isinstance(sweep, Mapping):
    lines.append(f"- The sweep command (sweep.json): commit {_commit_label(sweep)}, "
                 f"{sweep.get('time')}, on {sweep.get('host')}")
  return ProvenanceSummary(lines, warnings)


def warning_lines(summary: ProvenanceSummary) -> list[str]:
  """report.md's warning paragraph (empty without warnings)."""
  return [line for w in summary.warnings for line in (f"**Warning:** {w}", "")]
