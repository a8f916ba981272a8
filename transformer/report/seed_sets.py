"""Which seeds a table reads: a study's confirmatory seeds apart from its exploratory ones.

A study whose call was chosen on some seeds and then checked on new ones names those in
`CONFIRMATORY_SEEDS` (`transformer.study`); its verdict reads them alone. The report's generic
tables (final eval, LR sweep) then show each seed set in its own rows, so no number there
pools the data a call was chosen on with the data that confirms it. Before any confirmatory
run is in, there is one set, every run, and no label.
"""

from __future__ import annotations

from typing import Sequence

from transformer import study as study_lib
from transformer.report.runs import Run

# Said under a table whose rows are split by `seed_sets` (the final-eval and LR tables).
SETS_APART = (" Each setting's confirmatory seeds, which the verdict reads alone, are in a row "
              "apart from the exploratory seeds its call was chosen on (`seeds`).")


def seed_list(seeds: Sequence[int]) -> str:
  """"3-5" for three or more consecutive seeds, "3, 5" otherwise."""
  seeds = sorted(seeds)
  if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
    return f"{seeds[0]}-{seeds[-1]}"
  return ", ".join(str(s) for s in seeds)


def split_seeds(runs: Sequence[Run], seeds: Sequence[int]) -> tuple[list[Run], list[Run]]:
  """(the runs of the confirmatory `seeds`, the others) once any confirmatory run is here;
  (every run, []) while none is."""
  confirm = [r for r in runs if r.seed in seeds]
  if not confirm:
    return list(runs), []
  return confirm, [r for r in runs if r.seed not in seeds]


def seed_sets(runs: Sequence[Run], seeds: Sequence[int]) -> list[tuple[str, list[Run]]]:
  """[(label, runs)]: `[("3-5 (the verdict's)", ...), ("0-2 (exploratory)", ...)]` once a
  run of the confirmatory `seeds` is here and others are too; else `[("", runs)]`."""
  judged, explored = split_seeds(runs, seeds)
  if not explored:
    return [("", judged)]
  return [(f"{_seeds_of(judged)} (the verdict's)", judged),
          (f"{_seeds_of(explored)} (exploratory)", explored)]


def _seeds_of(runs: Sequence[Run]) -> str:
  return seed_list({r.seed for r in runs})


def confirmatory_seeds(manifest: dict) -> tuple[int, ...]:
  """The sweep file's `CONFIRMATORY_SEEDS`; () for a plain sweep, `--runs`, or a file that does
  not load (the verdict section reports that failure)."""
  if not manifest.get("sweep_file"):
    return ()
  try:
    return study_lib.load(manifest["sweep_file"]).confirmatory_seeds
  except Exception:  # noqa: BLE001
    return ()


def pooled_note(runs: Sequence[Run], seeds: Sequence[int]) -> list[str]:
  """One line saying that what follows pools the seed sets (the figures); [] with one set."""
  judged, explored = split_seeds(runs, seeds)
  if not explored:
    return []
  return [f"The figures pool every seed: the exploratory ({_seeds_of(explored)}) and the "
          f"confirmatory ({_seeds_of(judged)}) the verdict reads alone.", ""]
