"""A study's verdict recomputed under its neighbouring thresholds: the report's `## Robustness`.

A verdict turns numbers into a call with thresholds: the collapse cutoff, the tolerance X of
"trained", a loss margin, the rule for "trained". A reviewer moves each to its neighbours and
asks whether the call survives. A study's sweep file lists them:

  THRESHOLDS = (analysis.COLLAPSE, analysis.X, analysis.RULE,
                Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", (0.02, 0.1)))

A threshold the call does not read cannot move it, and a row for it would be a check that
cannot fail: the file names those in `THRESHOLDS_NOT_READ = {label: why}` instead, and the
section says so.

Each `Threshold` (declared with the study contract, `transformer.study`; importable from here
too) names a module attribute (`module` None: the sweep file's own) and the values
to try; the section sets it to each value in turn (one threshold moved at a time, the others as
reported), runs the study's `analyze(runs)` again, and tabulates the verdict word. A threshold
that changes which runs count as collapsed (`reclassify`) has the runs classified again under
it. Every attribute is restored afterwards, also when `analyze` fails.

Below the table, the section describes what the call rests on without moving it: each line a
study's `analyze` hands to `describe` while the verdict as reported is computed (a paired
difference's seeds: how many lie beyond the margin on each side, and its jackknife;
`experiments/paired.py`). A description never changes the verdict.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional, Sequence

from transformer.study import Study, Threshold

ROBUSTNESS_LINE = "**Robustness:**"  # the summary (results/README.md) quotes this line


_DESCRIBED: Optional[list[str]] = None  # collecting while the verdict as reported is computed


def describe(line: str) -> None:
  """Adds `line` to the description under the robustness table of the study being reported
  (once; ignored outside the verdict as reported, e.g. while a threshold is moved)."""
  if _DESCRIBED is not None and line not in _DESCRIBED:
    _DESCRIBED.append(line)


def reported_verdict(study: Study, runs: list) -> tuple[str, list[str]]:
  """The verdict word as reported and the lines its `analyze` passed to `describe`."""
  global _DESCRIBED
  _DESCRIBED = []
  try:
    word = _word(study.analyze(runs))
    return word, list(_DESCRIBED)
  finally:
    _DESCRIBED = None


def _owner(study: Study, t: Threshold) -> Any:
  return study.module if t.module is None else importlib.import_module(t.module)


def _word(lines: Sequence[str]) -> str:
  """The verdict word of an `analyze` result: agrees, partly agrees, disagrees, inconclusive."""
  line = next((l for l in lines if l.startswith("**") and not l.startswith(ROBUSTNESS_LINE)),
              None)
  if line is None:
    return "no verdict"
  return line.split("**")[1].rstrip(".").lower()


def recompute(study: Study, runs: list, reclassify: Callable[[list], None]) -> list[tuple]:
  """`[(threshold, value, verdict word)]` for every threshold of the study's `THRESHOLDS` at
  each of its values; the verdict as reported first, as `(None, None, word)`."""
  return [(None, None, reported_verdict(study, runs)[0])] + _moved(study, runs, reclassify)


def _moved(study: Study, runs: list, reclassify: Callable[[list], None]) -> list[tuple]:
  """`[(threshold, value, verdict word)]` with each threshold moved to each of its values."""
  rows = []
  for t in study.thresholds:
    owner = _owner(study, t)
    reported = getattr(owner, t.name)
    for value in t.values:
      setattr(owner, t.name, value)
      try:
        if t.reclassify:
          reclassify(runs)
        word = _word(study.analyze(runs))
      except Exception as e:  # noqa: BLE001 -- a failure is a row of the table, not a crash
        word = f"analysis failed ({type(e).__name__})"
      finally:
        setattr(owner, t.name, reported)
        if t.reclassify:
          reclassify(runs)
      rows.append((t, value, word))
  return rows


def _value(t: Threshold, value: Any) -> str:
  if t.shown:
    return t.shown[list(t.values).index(value)] if value in t.values else t.shown[-1]
  return f"{value:g}" if isinstance(value, float) else str(value)


def section(study: Study, runs: list, reclassify: Callable[[list], None]) -> list[str]:
  """The `## Robustness` lines of a study's report (`transformer.study.load`); [] when its
  file lists no THRESHOLDS or has no `analyze`."""
  thresholds = study.thresholds
  if not thresholds or study.analyze is None:
    return []
  reported, described = reported_verdict(study, runs)
  moved = _moved(study, runs, reclassify)
  flips = [(t, v, w) for t, v, w in moved if w != reported]
  as_reported = ", ".join(f"{t.label} {_value(t, getattr(_owner(study, t), t.name))}"
                          for t in thresholds)
  if flips:
    summary = (f"{ROBUSTNESS_LINE} the call does not hold under every neighbouring threshold "
               f"({len(flips)} of {len(moved)} settings change it): "
               + "; ".join(f"{t.label} {_value(t, v)} gives \"{w}\"" for t, v, w in flips)
               + f" (reported: \"{reported}\").")
  else:
    summary = (f"{ROBUSTNESS_LINE} the call (\"{reported}\") holds under every neighbouring "
               f"threshold ({len(moved)} settings, one moved at a time).")
  lines = ["## Robustness", "",
           "The verdict recomputed with one threshold moved to each neighbouring value, the "
           f"others as reported ({as_reported}):", "",
           "| threshold | value | verdict |", "|---|---|---|",
           f"| as reported | - | {reported} |"]
  lines += [f"| {t.label} | {_value(t, v)} | {w} |" for t, v, w in moved]
  not_read = study.thresholds_not_read
  if not_read:
    lines += ["", "Not moved, because the call does not read them: "
              + "; ".join(f"{label} ({why})" for label, why in not_read.items()) + "."]
  if described:
    lines += ["", "Each paired difference the verdict reads, seed by seed (description, not a "
              "threshold: it moves no verdict):", "", *(f"- {line}" for line in described)]
  return lines + ["", summary, ""]
