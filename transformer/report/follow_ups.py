"""Past early training, in the summary's atlas (issue 69): each atlas answer at its study's
steps beside the same answer followed to 2,400 steps, and which answers are early-training only.

A study that follows others' answers further declares them twice: `FOLLOWS` (the study
contract: the studies it follows, read before it has runs) and `summarize(runs)["follow_ups"]`
(`{followed study: [(answer, text at the followed study's steps, text at its own steps or None
while not run yet, word), ...]}`). While it is not committed under the results folder, its file
beside the committed studies' files is found by its `FOLLOWS` line and its `summarize([])` gives
the answers with their early texts; once committed, its summary with its runs fills them in.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional, Sequence

from transformer import study as study_lib
from transformer.errors import ConfigError

LATER_STEPS = 2400  # the atlas's "past early training": 4x the protocol's 600 steps (issue 69)
NOT_YET = "not followed yet: early-training only"
# A followed answer's "early-training only?" cell, by the follower's word: an answer that does
# not hold later is one of early training; "not resolved" later settles neither way; a word
# starting "resolved" judges an answer the study left unresolved (there was none to test).
ONLY_EARLY = "yes: it does not hold at {steps:,} steps"
EARLY_ONLY_BY_WORD = {"holds": "no", "shrinks under the margin": ONLY_EARLY, "flips": ONLY_EARLY,
                      "grows past the margin": ONLY_EARLY,
                      "not resolved": "not settled: not resolved at {steps:,} steps"}
NO_EARLY_ANSWER = "no answer at the study's steps to test"
_DECLARES = re.compile(r"^FOLLOWS\s*[:=]", re.M)


@dataclasses.dataclass(frozen=True)
class Follower:
  """A study that follows answers further. `name`: its results folder (its file's stem);
  `state`: None when committed, else why it has no results ("not run", "runs in progress");
  `steps`: its runs' budget (None while not committed); `answers`: its follow-ups,
  `{followed study: [(answer, early text, later text or None, word), ...]}`, [] per study when
  its `summarize` could not say."""
  name: str
  state: Optional[str]
  steps: Optional[int]
  answers: dict


def _row_ok(row) -> bool:
  return (isinstance(row, (list, tuple)) and len(row) == 4
          and all(isinstance(x, str) for x in (row[0], row[1], row[3]))
          and (row[2] is None or isinstance(row[2], str)))


def checked(where: str, value) -> dict:
  """`value` (`summarize(runs)["follow_ups"]` of the study file `where`) when it has the shape
  above; else a one-line ConfigError saying what it must be."""
  if not (isinstance(value, dict) and all(
      isinstance(k, str) and isinstance(rows, (list, tuple)) and all(map(_row_ok, rows))
      for k, rows in value.items())):
    raise ConfigError(f"{where}: summarize(runs)['follow_ups'] must be {{followed study: "
                      "[(answer, early text, later text or None, word), ...]} (str, str, str "
                      "or None, str); fix its summarize.")
  return {k: [tuple(r) for r in rows] for k, rows in value.items()}


def pending(study_files: Sequence[str], committed: Sequence[str]) -> list[Follower]:
  """The followers not committed: each `*.py` beside `study_files` (the committed studies'
  sweep files, `FILE[:PRESET]`) with a `FOLLOWS` line and no folder among `committed`."""
  folders = sorted({os.path.dirname(study_lib.path_of(f)) for f in study_files})
  found = []
  for folder in folders:
    for file in sorted(os.listdir(folder)):
      path, stem = os.path.join(folder, file), file.removesuffix(".py")
      if (not file.endswith(".py") or not os.path.isfile(path) or stem in committed
          or stem in [f.name for f in found]):
        continue
      with open(path, encoding="utf-8") as f:
        if not _DECLARES.search(f.read()):
          continue
      try:
        answers = _early_answers(path)
      except Exception as e:  # noqa: BLE001 (as the summary does with a study that fails)
        print(f"[report] {file}: did not load ({e}); its follow-ups are left out of the atlas.")
        continue
      state = ("runs in progress" if os.path.isdir(os.path.join(folder, "in_progress", stem))
               else "not run")
      found.append(Follower(stem, state, None, answers))
  return found


def _early_answers(path: str) -> dict:
  """`{followed study: answers}` of the follower at `path` before its runs (its `summarize([])`
  follow-ups; [] per study in `FOLLOWS` when it cannot give them)."""
  s = study_lib.load(path)
  try:
    answers = checked(path, s.summarize([]).get("follow_ups", {}))
  except Exception:  # noqa: BLE001 (a summary that needs runs: the study names stay)
    answers = {}
  return {study: answers.get(study, []) for study in s.follows}


def followed(followers: Sequence[Follower]) -> dict[str, tuple[Follower, list]]:
  """`{followed study: (its follower, answers)}`, a committed follower before a pending one."""
  out: dict = {}
  for f in sorted(followers, key=lambda f: f.state is not None):
    for study, answers in f.answers.items():
      out.setdefault(study, (f, answers))
  return out


def table(studies: Sequence[tuple[str, dict]], budgets: dict[str, int],
          follow: dict[str, tuple[Follower, list]]) -> list[str]:
  """The atlas's table: per atlas study (`(name, summary)` with an "atlas" question), then per
  followed study without one, its answers at its steps (`budgets`) beside `follow`'s, and
  whether each is early-training only (no run past 600 steps measured it, or it does not hold
  at 2,400 steps: `early_only`)."""
  summaries = dict(studies)
  names = [n for n, s in studies if s.get("atlas")]
  names += [n for n in follow if n not in names]
  lines = ["| question | study | steps | answer | at the study's steps | at "
           f"{LATER_STEPS:,} steps | early-training only? |", "|---|---|---|---|---|---|---|"]
  for name in names:
    s = summaries.get(name, {})
    rows = _rows(name, s, budgets.get(name), follow.get(name))
    head = [s.get("atlas") or "(not an atlas question)",
            f"[{name}]({name}/report.md)" if name in summaries else name,
            f"{budgets[name]:,}" if name in budgets else "-"]
    for i, row in enumerate(rows):
      lines.append("| " + " | ".join((head if i == 0 else ["", "", ""]) + row) + " |")
  return lines


def _rows(name: str, s: dict, steps: Optional[int],
          follow: Optional[tuple[Follower, list]]) -> list[list[str]]:
  """A study's cells after question, study and steps: [answer, at its steps, at 2,400 steps,
  early-training only?] per answer followed, or one row for its verdict."""
  verdict = f"the data {s['verdict']} (above)" if s.get("verdict") else "-"
  if follow is None:
    if steps is not None and steps >= LATER_STEPS:
      return [["its verdict", verdict, f"its own runs reach {steps:,} steps", "no"]]
    return [["its verdict", verdict, "not followed", "yes"]]
  follower, answers = follow
  if not answers:
    return [["its verdict", verdict, f"{NOT_YET} ({follower.name}.py, {follower.state})", "yes"]]
  return [[answer, early, *_later(follower, later, word)] for answer, early, later, word in answers]


def _later(follower: Follower, later: Optional[str], word: str) -> list[str]:
  """[the later cell, early-training only?] of one followed answer."""
  if follower.state is not None:
    return [f"{NOT_YET} ({follower.name}.py, {follower.state})", "yes"]
  link = f"[{follower.name}]({follower.name}/report.md)"
  if later is None:
    return [f"{NOT_YET} ({link}: {word})", "yes"]
  at = "" if follower.steps == LATER_STEPS else f" at {follower.steps:,} steps"
  return [f"{later}{at}: **{word}** ({link})", early_only(word, follower.steps)]


def early_only(word: str, steps: int) -> str:
  """The "early-training only?" cell of an answer followed to `steps` whose word there is
  `word`; a word the table does not know sends the reader to the follower's report."""
  if word.startswith("resolved"):
    return NO_EARLY_ANSWER
  cell = EARLY_ONLY_BY_WORD.get(word, "see the follow-up's report")
  return cell.format(steps=steps)
