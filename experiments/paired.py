"""The paired statistic a study's call rests on (issue 46), defined once for every study.

A call compares settings by a per-seed difference of the final eval loss (clipped at ln V,
`stats.clipped_final_loss`, so a diverged run counts as its initial loss and a collapsed one as
its loss), paired by seed: seed s of every setting shares its data order, so the difference
removes most of what the seed alone does. Each setting is read at its own best LR (the grid LR
with the lowest mean over seeds among those where every seed ended; one LR for all seeds, so
no seed's luck picks it), or, in the robustness section, at the study's matched LR.

The study's file states the difference and the margin M (nats/token) before the call is read:
- **agrees**: the 95% interval of the mean difference lies above M (the effect the claim names
  is larger than M);
- **disagrees**: the interval lies below M (any such effect is smaller than M);
- **inconclusive**: the interval contains M.
Counts of trained seeds and Fisher tests stay in the reports as description, never as the call:
with 3 seeds the smallest possible two-sided Fisher p is 0.10, so a count test cannot conclude.

The robustness section moves M to its neighbours, reads every setting at the matched LR
(`AT_MATCHED_LR`) and moves the confidence level (`analysis.CONFIDENCE`) (`margin_thresholds`).
It does not leave a seed out as a threshold (issue 68): with 3 seeds the 2 left give a t-value
of 12.7 (t_{0.975,1}), so that row flipped almost any call, also one whose three seeds all clear
the margin. Instead every difference `judge` reads is described under the table
(`seed_description`): how many seeds lie beyond the margin on each side, and the jackknife of
the mean (each leave-one-out mean and the jackknife standard error). 5 seeds are planned for
warmup_stability, clipping, hybrid_norm, lr_sensitivity and long_runs' DyT half: their sweeps
list seeds 3 and 4 (`presets.ADDED_SEEDS`) for the settings the calls read, after every earlier
point. Until those runs end, `added_seeds_ended` leaves a seed out whose runs have not all
ended and the report says so (`added_seeds_note`); `difference` pairs only the seeds both
sides have, so a setting with 5 seeds beside one with 3 is read on the 3.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from experiments import analysis as a
from experiments.presets import ADDED_SEEDS, PROTOCOL_SEEDS
from transformer.report import robustness
from transformer.report.robustness import Threshold
from transformer.report.runs import PENDING, Run
from transformer.report import stats
from transformer.report.stats import clipped_final_loss, mean_ci

LR = "optim.learning_rate"
AT_MATCHED_LR = False  # the robustness section's "every setting at the matched LR"

MATCHED_LR = Threshold("LR each setting is read at", "experiments.paired", "AT_MATCHED_LR",
                       (True,), shown=("the matched LR", "its own best LR"))


# What a call on a paired loss difference does not read (a study's THRESHOLDS_NOT_READ).
NOT_READ = {a.COLLAPSE.label: a.COLLAPSE_NOT_READ,
            a.X.label: "the call reads losses at each setting's best LR, not the largest LR "
                       "trained within X (described, not called)",
            a.RULE.label: a.RULE_NOT_READ}


def margin_thresholds(values: tuple = (0.03, 0.1), matched_lr: bool = True) -> tuple:
  """The THRESHOLDS of a study whose call is a paired loss difference against its
  `LOSS_MARGIN`: the confidence level, the margin's neighbours `values`, and (`matched_lr`)
  every setting at the matched LR. The seeds are described, not moved (`seed_description`)."""
  margin = Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", values)
  return (a.CONFIDENCE, margin, MATCHED_LR) if matched_lr else (a.CONFIDENCE, margin)


def seed_losses(runs: Sequence[Run]) -> dict:
  """`{seed: clipped final loss}` of one setting's runs at one LR (seeds that ended; the seed
  left out, when one is, dropped)."""
  out = {}
  for r in runs:
    loss = clipped_final_loss(r)
    if loss is not None:
      out[r.seed] = loss
  return out


def best_lr(runs: Sequence[Run]) -> Optional[float]:
  """The setting's best LR: the lowest mean clipped final loss over seeds, among the LRs at
  which every seed of the setting ended; None when there is none."""
  seeds = {r.seed for r in runs}
  means = {}
  for lr in sorted({r.overrides[LR] for r in runs}):
    losses = seed_losses([r for r in runs if r.overrides[LR] == lr])
    if losses and set(losses) == seeds:
      means[lr] = sum(losses.values()) / len(losses)
  return min(means, key=lambda lr: (means[lr], lr)) if means else None


def read(runs: Sequence[Run], matched_lr: Optional[float]) -> tuple[Optional[float], dict]:
  """(the LR read, `{seed: loss}` there): the setting's best LR, or `matched_lr` while
  AT_MATCHED_LR is set (a study without one reads its best LR either way)."""
  lr = matched_lr if AT_MATCHED_LR and matched_lr is not None else best_lr(runs)
  if lr is None:
    return None, {}
  return lr, seed_losses([r for r in runs if r.overrides[LR] == lr])


@dataclasses.dataclass(frozen=True)
class Difference:
  """A per-seed difference and its mean with the `stats.CONFIDENCE` (95%) t-interval."""
  label: str
  per_seed: dict
  unit: str = "nats/token"

  @property
  def interval(self) -> tuple[float, float]:
    return mean_ci(list(self.per_seed.values()))

  def estimate(self) -> str:
    """The mean and its half-width, `+0.123 ± 0.045` (the mean alone from one seed)."""
    mean, half = self.interval
    return f"{mean:+.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")

  def text(self) -> str:
    unit = f" {self.unit}" if self.unit else ""
    return f"{self.label}: {self.estimate()}{unit} ({len(self.per_seed)} seeds)"


def difference(label: str, a: dict, b: dict, unit: str = "nats/token") -> Difference:
  """`a - b` on the seeds both have (`{seed: value}` each), in `unit`."""
  return Difference(label, {s: a[s] - b[s] for s in sorted(set(a) & set(b))}, unit)


# A five-seed call's REGISTRATION adds this: when its seeds 3 and 4 were added.
FIVE_SEEDS = ("read on 5 seeds once seeds 3 and 4 have run (issue 68 point 8: added after the "
              "3-seed runs were seen, for the settings the call reads)")


def added_seeds_ended(runs: Sequence[Run]) -> list[Run]:
  """`runs` without every run of an `ADDED_SEEDS` seed any of whose runs here has not ended
  (listed but not run yet, or incomplete): a seed is read once all its runs have ended, so a
  sweep part-way through its new seeds is read on the seeds it has whole."""
  waiting = {r.seed for r in runs if r.seed in ADDED_SEEDS and r.status in PENDING}
  return [r for r in runs if r.seed not in waiting]


def added_seeds_note(runs: Sequence[Run], settings: str) -> str:
  """One line: whether the call reads `ADDED_SEEDS` (issue 68 point 8) of `settings` (words,
  e.g. "post- and pre-norm"), or which of them are not run yet."""
  read = sorted({r.seed for r in added_seeds_ended(runs) if r.seed in ADDED_SEEDS})
  waiting = [s for s in ADDED_SEEDS if s not in read]
  lead = (f"Issue 68 point 8 (5 seeds, the two more added after the {len(PROTOCOL_SEEDS)}-seed "
          "runs were seen): ")

  def seeds(values):
    return (f"seed {values[0]}" if len(values) == 1 else
            f"seeds {', '.join(str(s) for s in values[:-1])} and {values[-1]}")
  if not waiting:
    return (f"{lead}{seeds(read)} of {settings} read, so the call rests on "
            f"{len(PROTOCOL_SEEDS) + len(read)} seeds there.")
  return (f"{lead}{seeds(waiting)} of {settings} not run yet (experiments/README.md, \"Five "
          f"seeds\"), so the call reads seeds {', '.join(str(s) for s in PROTOCOL_SEEDS + read)} "
          "there.")


def added_seeds_reading(d: Difference, margin: float) -> str:
  """`d` on `ADDED_SEEDS` alone, one line ('' when none of them is paired in `d`): data not used
  to choose a call chosen after the 3-seed runs, so its check on new data. Each new seed's
  value and how many lie above and below `margin`: a sign count, not a test (with 2 seeds a
  95% t interval has t = 12.7, wider than any effect here)."""
  new = {s: v for s, v in d.per_seed.items() if s in ADDED_SEEDS}
  if not new:
    return ""
  above = sum(v > margin for v in new.values())
  below = sum(v < margin for v in new.values())
  return (f"{d.label} on the added seeds alone (not used to choose the call): "
          + ", ".join(f"seed {s} {v:+.3f}" for s, v in new.items())
          + f"; {above} of {len(new)} above the margin {margin:g}, {below} below.")


def seed_description(d: Difference, margin: float) -> str:
  """How `d`'s seeds stand against `margin`, one line: the count of seeds above and below it,
  each seed's value, and the jackknife of the mean (each leave-one-out mean, the jackknife
  standard error; `stats.jackknife_mean`)."""
  seeds, values = list(d.per_seed), list(d.per_seed.values())
  above = sum(v > margin for v in values)
  below = sum(v < margin for v in values)
  line = (f"{d.label}: {above} of {len(values)} seeds above the margin {margin:.3g}, {below} "
          "below (" + ", ".join(f"seed {s} {v:+.3f}" for s, v in d.per_seed.items()) + ")")
  loo, se = stats.jackknife_mean(values)
  if not loo:
    return line + "; too few seeds for a jackknife."
  return (line + "; leave-one-out means " + ", ".join(
      f"{m:+.3f} without seed {s}" for s, m in zip(seeds, loo))
      + f" (jackknife SE {se:.3f}; {sum(m > margin for m in loo)} of {len(loo)} above the "
      "margin).")


def describe_seeds(d: Difference, margin: float) -> None:
  """Puts `seed_description(d, margin)` under the robustness table (only while the report
  computes the verdict as reported): for a call read by a study's own route, not `judge`."""
  robustness.describe(seed_description(d, margin))


def judge(d: Difference, margin: float, describe: bool = True) -> Optional[bool]:
  """True when the interval lies above `margin`, False when below it, None when it contains
  it or there are fewer than 2 seeds. Also describes `d`'s seeds (`describe_seeds`) unless
  `describe` is False: a difference the verdict does not read."""
  if describe:
    describe_seeds(d, margin)
  mean, half = d.interval
  if len(d.per_seed) < 2 or math.isnan(half):
    return None
  if mean - half > margin:
    return True
  if mean + half < margin:
    return False
  return None


def outcome(d: Difference, margin: float, lower_gains: bool = True) -> str:
  """What `d`'s 95% interval found against `±margin` (`margin` >= 0), in words: "gains" when
  it lies beyond the margin on the gain side (below -margin when `lower_gains`, as for a loss
  difference; above +margin otherwise), "loses" when beyond it on the other side, "neither
  gains nor loses <margin>" when it lies inside (-margin, margin), "not resolved" otherwise or
  under 2 seeds."""
  mean, half = d.interval
  if len(d.per_seed) < 2 or math.isnan(half):
    return "not resolved"
  lo, hi = (mean - half, mean + half) if lower_gains else (-(mean + half), -(mean - half))
  if hi < -margin:
    return "gains"
  if lo > margin:
    return "loses"
  if -margin < lo and hi < margin:
    return f"neither gains nor loses {margin:g}"
  return "not resolved"


def finding(name: str, d: Difference, margin: float, lower_gains: bool = True) -> str:
  """`name`, what `d` found (`outcome`) and its interval: "admin not resolved (+0.004 ±
  0.053)": a verdict clause written from the numbers, never from the hypothesis."""
  return f"{name} {outcome(d, margin, lower_gains)} ({d.estimate()})"


def call_text(d: Difference, margin: float, describe: bool = True) -> str:
  """`d` and where its interval lies against `margin`, as one sentence (`judge`'s
  `describe`)."""
  word = {True: "above", False: "below", None: "across"}[judge(d, margin, describe)]
  return (f"{d.text()}; its {stats.CONFIDENCE:.0%} interval lies {word} the margin "
          f"{margin:g}")


def side(diffs: Sequence[Difference], margin: float, describe: bool = True) -> Optional[bool]:
  """One call on several differences (a placement's cost against each fixed warm-up): True
  when every interval lies above `margin`, False when every one lies below, None otherwise.
  An intersection-union test: each interval at the stated confidence, with no multiplicity
  adjustment, and no difference chosen from the data. `describe`: `judge`'s."""
  sides = [judge(d, margin, describe) for d in diffs]
  if sides and all(s is True for s in sides):
    return True
  if sides and all(s is False for s in sides):
    return False
  return None


def halves(found: Sequence[Optional[bool]], claimed: Sequence[bool]):
  """The verdict of a claim made of halves, each its own call (`judge` or `side`), `claimed`
  the side each half should find: True when every half finds its side, "partly" when some
  do, False when none does and one lies wholly on the other side, None otherwise."""
  agree = [f is c for f, c in zip(found, claimed)]
  if agree and all(agree):
    return True
  if any(agree):
    return "partly"
  if any(f is (not c) for f, c in zip(found, claimed)):
    return False
  return None


def sides_text(diffs: dict, margin: float, against: str = "against",
               describe: bool = True) -> str:
  """Where each difference's interval lies against `margin`, grouped by side, each with its
  mean ± half-width: `above the margin 0.05 against 150 (+0.098 ± 0.041), 300 (+0.096 ±
  0.034); across it against 60 (+0.078 ± 0.064)`. `diffs` maps a label to a difference; a
  lone difference under the label '' reads `above the margin 0.05 (+0.290 ± 0.040)`.
  `describe`: `judge`'s."""
  groups: dict = {}
  for label, d in diffs.items():
    groups.setdefault(judge(d, margin, describe), []).append(
        f"{label} ({d.estimate()})" if label else f"({d.estimate()})")
  parts = []
  for s, word in ((True, "above"), (False, "below"), (None, "across")):
    if s in groups:
      where = f"the margin {margin:g}" if not parts else "it"
      lead = f" {against} " if any(diffs) else " "
      parts.append(f"{word} {where}{lead}{', '.join(groups[s])}")
  return "; ".join(parts)
