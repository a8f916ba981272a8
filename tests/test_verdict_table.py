"""The README's table of the studies' verdicts (transformer/report/verdict_table.py) and its
contents list."""

import os
import re

from transformer.report import verdict_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SUMMARY = """# Study results (generated)

## alpha

**Claim:** Doe et al. 2024 (X-LN): post-norm | diverges (at 12 layers) as it gets deeper; \
pre-norm does not.

**Verdict:** the data partly agrees ([report](alpha/report.md)).

**Robustness:** the call does not hold under every neighbouring threshold (2 of 8 settings \
change it): X (nats/token) 0.5 gives "agrees"; confidence 0.99 gives "disagrees" (reported: \
"partly agrees").

- a finding

## beta

**Claim:** Roe 2025: pre-norm trains.

**Verdict:** the data agrees ([report](beta/report.md)).

**Robustness:** the call ("agrees") holds under every neighbouring threshold (4 settings, one \
moved at a time).

## Per placement, across the studies

| placement | ... |
"""


def _read(name):
  with open(os.path.join(ROOT, name), encoding="utf-8") as f:
    return f.read()


def test_rows_come_from_the_summary():
  rows = verdict_table.verdicts(_SUMMARY)
  assert rows == [{"study": "alpha", "report": "alpha/report.md",
                   "source": "Doe et al. 2024 (X-LN)",
                   "claim": "post-norm | diverges as it gets deeper",  # no parentheses
                   "verdict": "partly agrees",
                   "holds": "no (2 of 8 settings change it)"},
                  {"study": "beta", "report": "beta/report.md", "source": "Roe 2025",
                   "claim": "pre-norm trains", "verdict": "agrees",
                   "holds": "yes (4 settings)"}]  # the cross-study section has no verdict
  assert ("| [alpha](experiments/results/alpha/report.md) | post-norm \\| diverges as it gets "
          "deeper | Doe et al. 2024 (X-LN) | partly agrees | no (2 of 8 settings change it) |"
          ) in verdict_table.table(_SUMMARY)


def test_the_readme_table_is_current_and_covers_every_study():
  summary = _read(verdict_table.SUMMARY)
  readme = _read(verdict_table.README)
  assert verdict_table.updated_readme(readme, summary) == readme, (
      "README.md's verdict table is stale: run python -m transformer.report.verdict_table")
  studies = [d for d in sorted(os.listdir(os.path.join(ROOT, "experiments", "results")))
             if os.path.isfile(os.path.join(ROOT, "experiments", "results", d, "report.md"))]
  for study in studies:
    if f"## {study}\n" in summary and "**Verdict:**" in summary.split(f"## {study}\n")[1]:
      assert f"[{study}](experiments/results/{study}/report.md)" in readme, study


def test_the_contents_list_names_every_section():
  readme = _read("README.md")
  contents = readme.split("## Contents", 1)[1].split("\n## ", 1)[0]
  for title in re.findall(r"^## (.+)$", readme, re.M):
    if title != "Contents":
      anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
      assert f"(#{anchor})" in contents, title
