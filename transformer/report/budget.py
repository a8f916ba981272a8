"""The report's `## Baselines and budget`: where the count models' levels are, how much each run
trained, and how far below the bigram level the best run ended (issue 29: a claim about
optimisation made at the bigram level is weak evidence).

Read from each run's baselines record (`runs.recorded_baselines`: the run's `baselines.json`, or
its study's `study_baselines.json` for runs from before that file); never from the data.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

from transformer.report.runs import Run, linked_from, recorded_baselines, wall_seconds

BUDGET_LINE = "**Budget:**"  # the summary (results/README.md) quotes this line
COST_LINE = "**Cost:**"  # so does it this one
WANTED_MARGIN = 0.3  # nats/token below the bigram level the protocol asks of a study's best run


def _span(values: Sequence[float], fmt: str) -> str:
  low, high = min(values), max(values)
  return format(low, fmt) if format(low, fmt) == format(high, fmt) else (
      f"{format(low, fmt)}-{format(high, fmt)}")


def best_run(runs: Sequence[Run]) -> Optional[Run]:
  """The finished run with the lowest final eval loss (nats/token); None without one."""
  done = [r for r in runs if r.healthy and isinstance(r.final.get("loss"), (int, float))
          and math.isfinite(r.final["loss"]) and r.num_steps > 1]
  return min(done, key=lambda r: (r.final["loss"], r.name)) if done else None


def section(runs: Sequence[Run]) -> list[str]:
  """The section's lines; only the cost line when no run has a baselines record (not a
  decoder LM study), [] without runs."""
  records = {r.name: rec for r in runs if (rec := recorded_baselines(r.workdir))
             and all(isinstance(rec.get(k), (int, float)) for k in
                     ("unigram_nats", "bigram_nats", "train_tokens", "params"))}
  if not records:  # not a decoder LM study: what its runs cost, still
    return [cost_line(runs), ""] if runs else []
  unigrams = sorted({round(rec["unigram_nats"], 4) for rec in records.values()})
  bigrams = sorted({round(rec["bigram_nats"], 4) for rec in records.values()})
  tokens = [rec["train_tokens"] for rec in records.values()]
  params = [rec["params"] for rec in records.values()]
  per_param = [rec["train_tokens"] / rec["params"] for rec in records.values()]
  lines = ["## Baselines and budget", "",
           "Count-model levels of the eval split (plug-in entropies of the scored tokens, "
           "nats/token; recorded by each run at its start, or measured afterwards for runs "
           "that predate the record, `study_baselines.json`): unigram "
           f"{', '.join(f'{u:.4f}' for u in unigrams)}, bigram "
           f"{', '.join(f'{b:.4f}' for b in bigrams)}. Training tokens per run: "
           f"{_span(tokens, ',')}; parameters: {_span(params, ',')}; tokens per parameter: "
           f"{_span(per_param, '.3g')}."]
  if len(records) < len(runs):
    lines[-1] += f" ({len(runs) - len(records)} of {len(runs)} runs have no record.)"
  best = best_run([r for r in runs if r.name in records])
  budget = (f"{BUDGET_LINE} {_span(per_param, '.3g')} tokens per parameter "
            f"({_span(tokens, ',')} tokens per run)")
  if best is None:
    lines += ["", budget + "; no run trained past its first step."]
    return lines + ["", cost_line(runs), ""]
  gap = records[best.name]["bigram_nats"] - best.final["loss"]
  below = [r for r in runs if r.name in records and r.healthy and r.num_steps > 1
           and r.final.get("loss", math.inf) < records[r.name]["bigram_nats"]]
  trained = [r for r in runs if r.name in records and r.healthy and r.num_steps > 1]
  where = (f"{gap:.3f} below" if gap >= 0 else f"{-gap:.3f} above") + " the bigram level"
  if gap < WANTED_MARGIN:
    where += f" (short of the {WANTED_MARGIN} the protocol asks)"
  lines += ["", budget + f"; best run `{best.name}` ends at {best.final['loss']:.4f} "
            f"nats/token, {where}; {len(below)} of {len(trained)} finished "
            "runs end below it."]
  return lines + ["", cost_line(runs), ""]


def cost_line(runs: Sequence[Run]) -> str:
  """What the study's own runs cost, from their metrics' timestamps: how many it trained and
  how many it linked from other studies, their median and total wall time, and the total two
  at a time (the studies' `--parallel=2` on 2 cores)."""
  linked = sum(linked_from(r.workdir) is not None for r in runs)
  walls = [w for r in runs
           if linked_from(r.workdir) is None and (w := wall_seconds(r)) is not None]
  line = f"{COST_LINE} {len(walls)} runs trained for this study"
  if linked:
    line += f", {linked} linked from other studies"
  if not walls:
    return line + "."
  median = statistics.median(walls)
  return line + ("; wall time per run (first to last metrics row of each start, pauses left "
                 f"out) median {median:.0f} s, "
                 f"{sum(walls) / 3600:.2f} h in all ({sum(walls) / 7200:.2f} h elapsed if run "
                 "two at a time).")
