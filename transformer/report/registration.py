"""Which calls of a study were fixed before their data: the report's `## Calls` section.

A study file says, per call, when the call (its statistic, margin and rule) was fixed
(`REGISTRATION`, `transformer.study`): "pre-registered at <commit>" when that commit fixed it
before the call's first run, or "post hoc: ..." when it was chosen after seeing data, with
what it replaced and where it was confirmed on data not used to choose it (or that it was not
yet). A study that says nothing has every call read as post hoc, and the section says so.
"""

from __future__ import annotations

from transformer.study import PRE_REGISTERED, Study

REGISTRATION_LINE = "**Calls:**"  # the summary (results/README.md) quotes this line


def counts_line(study: Study) -> str:
  """`**Calls:** 2 pre-registered, 1 post hoc (name).`, or that the file does not say."""
  reg = study.registration
  if not reg:
    return (f"{REGISTRATION_LINE} the study file does not say which calls were fixed before "
            "their data (no REGISTRATION): read every call as post hoc.")
  post = [call for call, text in reg.items() if not PRE_REGISTERED.match(text)]
  pre = len(reg) - len(post)
  named = f" ({'; '.join(post)})" if post else ""
  return f"{REGISTRATION_LINE} {pre} pre-registered, {len(post)} post hoc{named}."


def section(study: Study) -> list[str]:
  """The `## Calls` lines of a study's report; [] for a plain sweep (no `analyze`)."""
  if study.analyze is None:
    return []
  lines = ["## Calls: fixed before or after their data", "", counts_line(study), ""]
  lines += [f"- **{call}**: {text}" for call, text in study.registration.items()]
  return lines + ([""] if study.registration else [])
