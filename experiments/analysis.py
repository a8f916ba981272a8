"""What the studies measure on their runs: the pieces their `analyze(runs)` verdicts share.

A study's sweep file defines `analyze(runs)` (runs: `transformer.report.runs.Run`, one per point);
the report puts the Markdown lines it returns under `## Verdict`. Every number in a verdict is
computed here from the runs' `metrics.jsonl`; the thresholds that turn numbers into "agrees"
are stated in the verdict text next to the numbers.
"""

from __future__ import annotations

import collections
import math
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from experiments.presets import DEFAULT_ACTIVATION, PAPER_ACTIVATION  # noqa: F401
from transformer.config import LEGACY_DEFAULTS
from transformer.report.figures import layer_profiles
from transformer.report.runs import Run
from transformer.report.seed_sets import seed_list, split_seeds
from transformer.report.stats import (clipped_final_loss, initial_loss, mean_ci,  # noqa: F401
                                      mean_clipped_loss_per_lr)
from transformer.report import stats as report_stats
from transformer.report.robustness import Threshold

PLACEMENT = "model.norm_placement"
LR = "optim.learning_rate"


def activation(run: Run) -> str:
  """The run's `model.activation` (`DEFAULT_ACTIVATION` when its point leaves it unset)."""
  return run.overrides.get("model.activation", DEFAULT_ACTIVATION)


def activation_name(activation: str) -> str:
  """How a paper writes `model.activation`: ReLU, GELU, SwiGLU."""
  return {"relu": "ReLU", "gelu": "GELU", "swiglu": "SwiGLU"}.get(activation, activation)


def fmt(mean: float, half: float, digits: int = 3) -> str:
  """`mean ± half` (the half-width of a 95% interval), `-` for no value."""
  if mean is None or not math.isfinite(mean):
    return "-"
  if half is None or not math.isfinite(half):
    return f"{mean:.{digits}g}"
  return f"{mean:.{digits}g} ± {half:.2g}"


def ci(values: Iterable[float]) -> str:
  return fmt(*mean_ci(list(values)))


def diagnostics_rows(run: Run) -> list[dict]:
  return run.metrics.get("diagnostics", [])


def profile(row: dict, metric: str) -> dict[int, float]:
  """`{layer: value}` of the per-layer metric `metric` (e.g. "feed_forward/wo/grad_norm",
  "residual_rms", "self_attention/attn_max_logit") in a diagnostics row; {} if absent."""
  for name, values in layer_profiles(row).items():
    if name.endswith("*/" + metric):
      return values
  return {}


def at_init(run: Run, metric: str) -> dict[int, float]:
  """The per-layer profile of `metric` at the run's first diagnostics step (initialization
  for the one-step studies)."""
  rows = diagnostics_rows(run)
  return profile(rows[0], metric) if rows else {}


def slope_ci(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
  """Least-squares slope of y on x and the half-width of its 95% interval (Student's t with
  n - 2 degrees of freedom); half-width nan for fewer than 3 points."""
  from scipy import stats
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2 or np.ptp(x) == 0:
    return float("nan"), float("nan")
  fit = stats.linregress(x, y)
  if x.size < 3:
    return float(fit.slope), float("nan")
  level = 0.5 + report_stats.CONFIDENCE / 2
  return float(fit.slope), float(stats.t.ppf(level, x.size - 2) * fit.stderr)


def r_squared(x: Sequence[float], y: Sequence[float]) -> float:
  from scipy import stats
  return float(stats.linregress(np.asarray(x, float), np.asarray(y, float)).rvalue ** 2)


def contains(mean: float, half: float, value: float) -> bool:
  return math.isfinite(half) and abs(mean - value) <= half


def select(runs: Sequence[Run], **fields) -> list[Run]:
  """Runs whose overrides have every `field=value` (dots in field names written as `__`)."""
  want = {k.replace("__", "."): v for k, v in fields.items()}
  return [r for r in runs if all(r.overrides.get(k) == v for k, v in want.items())]


def lr_sensitivity(runs: Sequence[Run]) -> Optional[float]:
  """Wortsman et al.'s LR sensitivity of runs that differ only in the learning rate: the mean
  over the grid of the clipped final loss minus the best grid point's."""
  means = list(mean_clipped_loss_per_lr(runs, LR).values())
  return float(np.mean(means) - min(means)) if means else None


def by_seed(runs: Sequence[Run], statistic: Callable[[Sequence[Run]], Optional[float]]):
  """`{seed: statistic of that seed's runs alone}` (each seed a replicate of the whole grid),
  leaving out seeds where it is None: for comparisons paired by seed."""
  seeds = sorted({r.overrides.get("seed") for r in runs}, key=str)
  out = {s: statistic([r for r in runs if r.overrides.get("seed") == s]) for s in seeds}
  return {s: v for s, v in out.items() if v is not None}


def per_seed(runs: Sequence[Run], statistic: Callable[[Sequence[Run]], Optional[float]]):
  """`by_seed`'s values, as a list over seeds."""
  return list(by_seed(runs, statistic).values())


def largest_stable_lr(runs: Sequence[Run]) -> Optional[float]:
  """The largest learning rate up to which every run (seed) finished healthily, counted up
  from the best one: `largest_trained_lr` under the rule HEALTHY (the same LR as
  `transformer.report.stats.largest_stable_lr`, which the generic report tables use)."""
  return largest_trained_lr(runs, CALL_TOLERANCE, rule=HEALTHY)


def status_counts(runs: Sequence[Run]) -> str:
  counts = {}
  for r in runs:
    counts[r.status] = counts.get(r.status, 0) + 1
  return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
          + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def verdict_word(agrees) -> str:
  """`verdict`'s outcome as words inside a sentence: "agrees", "partly agrees", ..."""
  return {True: "agrees", "partly": "partly agrees", False: "disagrees",
          None: "is inconclusive"}[agrees]


def verdict_of(lines: Sequence[str]) -> tuple[str, str]:
  """The verdict of an `analyze` result (the line `verdict` wrote): its outcome as
  `verdict_word` words it, and its text after the bold word."""
  line = next(l for l in lines if l.startswith("**"))
  word = line.split("**")[1].rstrip(".").lower()
  return {"inconclusive": "is inconclusive"}.get(word, word), line.split("** ", 1)[1]


def verdict(agrees, why: str) -> str:
  """`agrees`: True, "partly" (the direction holds, the size does not), False, or None
  (the data cannot tell)."""
  word = {True: "**Agrees.**", "partly": "**Partly agrees.**", False: "**Disagrees.**",
          None: "**Inconclusive.**"}[agrees]
  return f"{word} {why}"


# --- Stability as a curve over the tolerance, significance, protocol -------------------------

# "Collapsed" and "trained", defined once for every study.
# - *Collapsed* (`transformer.report.runs.collapsed`): the final eval loss is at least
#   (1 - COLLAPSE_TOLERANCE) x the unigram entropy of the eval split, from eval loss alone.
#   *Diverged*: a non-finite loss or gradient norm.
# - *Trained at X* (rule WITHIN_X): the run did not diverge and its final eval loss (clipped at
#   ln V) is within X nats/token of the best final loss its seed reached at any LR in the same
#   setting. The verdicts are given at CALL_TOLERANCE and shown over TOLERANCES.
# - *Trained* (rule HEALTHY, "stable"): the run finished, neither diverged nor collapsed.
# A study says which rule its call uses; its `## Robustness` section recomputes the call with
# the other (SWAP_RULE), the cutoff and X at their neighbours (COLLAPSE, X, RULE below).
TOLERANCES = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
CALL_TOLERANCE = 0.3
SEEDS_NEEDED = 5
WITHIN_X, HEALTHY = "within X of the seed's best", "finished healthily"
SWAP_RULE = False  # True: every call made with the other rule (the robustness section)

COLLAPSE = Threshold("collapse cutoff (relative to the unigram entropy)",
                     "transformer.report.runs", "COLLAPSE_TOLERANCE", (0.01, 0.05),
                     reclassify=True)
X = Threshold("X (nats/token)", "experiments.analysis", "CALL_TOLERANCE", (0.2, 0.5))
CONFIDENCE = Threshold("confidence level of the intervals", "transformer.report.stats",
                       "CONFIDENCE", (0.9, 0.99))
RULE = Threshold("rule for trained", "experiments.analysis", "SWAP_RULE", (True,),
                 shown=("the other rule (within X <-> finished healthily)", "the study's own"))


# Why a shared threshold cannot move a call that does not read it (THRESHOLDS_NOT_READ).
COLLAPSE_NOT_READ = ("the call reads clipped final losses, where a collapsed run counts as its "
                     "loss either way, and no run's status")
RULE_NOT_READ = "the call does not ask which runs trained"


def rule_used(rule: str) -> str:
  """`rule`, or the other one while SWAP_RULE is set."""
  if not SWAP_RULE:
    return rule
  return HEALTHY if rule == WITHIN_X else WITHIN_X


def seed_best(runs: Sequence[Run]) -> dict:
  """`{seed: the lowest clipped final loss of that seed's runs}` (the runs of one setting)."""
  best = {}
  for r in runs:
    v = clipped_final_loss(r)
    if v is not None:
      best[r.seed] = min(v, best.get(r.seed, math.inf))
  return best


def trained_at(run: Run, best: dict, tolerance: float, rule: str = WITHIN_X) -> Optional[bool]:
  """Whether `run` is trained under `rule` (`rule_used`): WITHIN_X, it ended within
  `tolerance` nats of its seed's best (`seed_best`) and did not diverge; HEALTHY, it finished
  (neither diverged nor collapsed). None for a run that has not ended."""
  v = clipped_final_loss(run)
  if v is None or run.seed not in best:
    return None
  if rule_used(rule) == HEALTHY:
    return run.status == "finished"
  return run.status != "diverged" and v <= best[run.seed] + tolerance


def best_lr(runs: Sequence[Run]) -> Optional[float]:
  """The grid LR with the lowest mean clipped final loss over the seeds that ended at every LR
  of the grid (`seeds_every_lr_ran`, as the report's LR table chooses it)."""
  means = mean_clipped_loss_per_lr(report_stats.seeds_every_lr_ran(runs, LR)[0], LR)
  return min(means, key=means.get) if means else None


def largest_trained_lr(runs: Sequence[Run], tolerance: float,
                       rule: str = WITHIN_X) -> Optional[float]:
  """The largest LR up to which every seed is `trained_at` `tolerance` (under `rule`), at that
  LR and at every grid LR from the best one (`best_lr`) up to it; None when the best LR's runs
  already fail. Counted up from the best LR (below it a short run is slow, not unstable)."""
  best = seed_best(runs)
  start = best_lr(runs)
  if start is None:
    return None
  largest = None
  for lr in sorted({r.overrides[LR] for r in runs if r.overrides[LR] >= start}):
    if not all(trained_at(r, best, tolerance, rule) for r in runs if r.overrides[LR] == lr):
      break
    largest = lr
  return largest


def trained_counts(runs: Sequence[Run], lr: float, tolerance: float) -> tuple[int, int]:
  """(seeds trained at `tolerance`, seeds ended) at `lr`."""
  best = seed_best(runs)
  marks = [trained_at(r, best, tolerance) for r in runs if r.overrides[LR] == lr]
  marks = [m for m in marks if m is not None]
  return sum(marks), len(marks)


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
  """Two-sided Fisher exact p of k1 of n1 against k2 of n2."""
  from scipy import stats
  return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


def holm(pvalues: dict) -> dict:
  """Holm's step-down adjustment of `{name: p}` for testing them together (family-wise error):
  the k-th smallest p times (m - k + 1), kept monotone, capped at 1."""
  order = sorted(pvalues, key=pvalues.get)
  out, running = {}, 0.0
  for k, name in enumerate(order):
    running = max(running, min(1.0, (len(order) - k) * pvalues[name]))
    out[name] = running
  return out


def best_possible_p(n: int) -> float:
  """The smallest two-sided Fisher p that n seeds against n can give (n of n against 0)."""
  return fisher_p(n, n, 0, n)


def bigram_level(runs: Sequence[Run]) -> Optional[float]:
  """The bigram level (nats/token) of the eval split, as the first run with a readable
  `baselines.json` recorded it; None where no run has one."""
  from transformer.train import baselines
  for r in runs:
    try:
      recorded = baselines.read(r.workdir)
    except Exception:  # noqa: BLE001 -- a torn record: another run's will do
      continue
    if recorded:
      return recorded["bigram_nats"]
  return None


def fmt_lr(lr: Optional[float]) -> str:
  return "none" if lr is None else f"{lr:g}"


def saved(run: Run) -> dict:
  from transformer.report.runs import saved_config
  try:
    return saved_config(run.workdir) or {}
  except Exception:  # noqa: BLE001 -- a protocol line is not worth a failed verdict
    return {}


# What each `optim.decay_mask` decays (transformer/train/optim.py), as the protocol says it.
DECAYED = {"role": "kernels and embeddings (mask by role)",
           "ndim": "every parameter of 2+ dims (the `ndim` mask of runs made before the mask "
                   "by role: kernels, embeddings, the [heads, head_dim] q/k/v biases and, in a "
                   "scanned stack, every stacked leaf)"}


def seeds_text(runs: Sequence[Run]) -> str:
  """"3 seeds", or, where placements have different seed counts (seeds added to some of
  them), "3 seeds (5 for post, pre)": the count most placements have, then the others'."""
  per = {}
  for r in runs:
    per.setdefault(r.overrides.get(PLACEMENT), set()).add(r.seed)
  counts = {p: len(s) for p, s in per.items()}
  tally = collections.Counter(counts.values())
  if len(tally) <= 1:
    return f"{len(set().union(*per.values()))} seeds"
  common = min(tally, key=lambda n: (-tally[n], n))  # the most placements', the fewer on a tie
  others = {}
  for p, n in counts.items():
    if n != common:
      others.setdefault(n, []).append(str(p))
  more = "; ".join(f"{n} for {', '.join(ps)}" for n, ps in sorted(others.items()))
  return f"{common} seeds ({more})"


def protocol(runs: Sequence[Run]) -> str:
  """One sentence: the recipe the verdict rests on, read from the runs' saved config.json
  (the first run with one; every study keeps these fields fixed across its points)."""
  cfg = next((c for c in (saved(r) for r in runs) if c), {})
  if not cfg:
    return "Protocol: the runs' config.json files are missing; see the sweep file."
  m, o, t, d = (cfg.get(k, {}) for k in ("model", "optim", "train", "data"))
  depths = sorted({r.overrides["model.num_layers"] for r in runs
                   if "model.num_layers" in r.overrides})
  layers = (f"decoder of {', '.join(str(d) for d in depths)} layers" if len(depths) > 1 else
            f"{depths[0] if depths else m.get('num_layers', '?')}-layer decoder")
  size = (f"{layers}, d_model "
          f"{m.get('d_model')}, {m.get('num_heads')} heads, d_ff {m.get('d_ff')}, vocab "
          f"{m.get('vocab_size')}; batch {t.get('batch_size')} x {d.get('seq_len')} tokens; "
          f"{seeds_text(runs)}")
  if t.get("num_steps", 0) <= 1:
    return f"Protocol: one batch at initialization; {size}."
  lrs = sorted({r.overrides[LR] for r in runs if LR in r.overrides})
  per_placement = {}
  for r in runs:
    if LR in r.overrides and PLACEMENT in r.overrides:
      per_placement.setdefault(r.overrides[PLACEMENT], set()).add(r.overrides[LR])
  lr_text = ("LR grid " + (", ".join(f"{lr:g}" for lr in lrs) if lrs else
                           f"{o.get('learning_rate')}"))
  if len(lrs) > 1 and per_placement and all(len(v) == 1 for v in per_placement.values()):
    lr_text = "one LR per placement: " + ", ".join(
        f"{p} {next(iter(v)):g}" for p, v in per_placement.items())  # not a grid
  warmups = sorted({r.overrides.get("optim.warmup_steps", o.get("warmup_steps")) for r in runs})
  steps = sorted({r.num_steps for r in runs if r.num_steps} or {t.get("num_steps")})
  masks = sorted({(c.get("optim") or {}).get("decay_mask", LEGACY_DEFAULTS["optim.decay_mask"])
                  for c in (saved(r) for r in runs) if c})
  optims = {}  # optim.name -> the optim config of its first run
  for c in (saved(r) for r in runs):
    if c:
      optims.setdefault((c.get("optim") or {}).get("name", "adamw"), c.get("optim") or {})
  return ("Protocol: " + size + f"; {' or '.join(str(n) for n in steps)} steps; "
          f"{_optimizer_text(optims)} with weight decay "
          f"{o.get('weight_decay')} on {' / '.join(DECAYED[m] for m in masks)} "
          "coupled to the LR (optax adamw: the decay is scaled by the schedule), global-norm "
          f"clipping at {o.get('clip_norm')}, linear warm-up of "
          f"{' or '.join(str(w) for w in warmups)} steps then {o.get('decay')} decay to "
          f"{o.get('end_lr_factor'):g} of the peak; {lr_text}.")


def _optimizer_text(optims: dict) -> str:
  """The runs' optimizers (`{optim.name: its optim config}`) with the hyperparameters each
  reads (transformer/train/optim.py); AdamW alone as every study before `optim.name` said it."""
  def adam(o):
    return f"b1 {o.get('b1')}, b2 {o.get('b2')}, eps {o.get('eps'):g}"
  def text(name, o):
    return {"adamw": lambda: f"AdamW ({adam(o)})", "adam": lambda: f"Adam ({adam(o)})",
            "lion": lambda: f"Lion (b1 {o.get('b1')}, b2 {o.get('b2')})",
            "muon": lambda: (f"Muon (momentum {o.get('muon_momentum')}, "
                             f"{o.get('muon_ns_steps')} Newton-Schulz steps) on the hidden "
                             f"matrices and Adam ({adam(o)}) on the rest")}.get(
                                 name, lambda: name)()
  if len(optims) == 1:
    return text(*next(iter(optims.items())))
  return "by `optim.name`: " + "; ".join(text(n, optims[n]) for n in sorted(optims)) + ";"


def edge_note(label: str, lr: Optional[float], runs: Sequence[Run]) -> str:
  """A warning when `lr` (a best or largest stable LR) is the grid's smallest or largest: the
  grid then does not locate it. '' otherwise."""
  lrs = sorted({r.overrides[LR] for r in runs})
  if lr is None or not lrs:
    return ""
  if lr == lrs[-1]:
    return f"{label}: {lr:g} is the grid's largest LR, so it is a lower bound (not located)."
  if lr == lrs[0]:
    return f"{label}: {lr:g} is the grid's smallest LR, so it is an upper bound (not located)."
  return ""


def separated_tiers(values: dict) -> list[list]:
  """A partial order of `{name: per-seed values}` as tiers: names sorted by mean, cut between
  neighbours only where every name below the cut has a 95% interval entirely below every
  name's above it. Names inside a tier are not distinguishable with these seeds."""
  stats = {k: mean_ci(v) for k, v in values.items() if len(v)}
  order = sorted(stats, key=lambda k: stats[k][0])
  hi = lambda k: stats[k][0] + (stats[k][1] if math.isfinite(stats[k][1]) else math.inf)
  lo = lambda k: stats[k][0] - (stats[k][1] if math.isfinite(stats[k][1]) else math.inf)
  tiers, current = [], []
  for i, k in enumerate(order):
    current.append(k)
    below, above = order[:i + 1], order[i + 1:]
    if above and max(hi(b) for b in below) < min(lo(a) for a in above):
      tiers.append(current)
      current = []
  if current:
    tiers.append(current)
  return tiers


def tiers_text(tiers: list[list]) -> str:
  return " < ".join("{" + ", ".join(t) + "}" if len(t) > 1 else t[0] for t in tiers)


def seed_fit_ratio(profiles: Sequence[dict]) -> list[float]:
  """Per seed (one profile `{layer: value}` each): the fitted last/first ratio
  exp(s (L_last - L_first)) of log value = c + s * layer."""
  out = []
  for q in profiles:
    layers = sorted(q)
    if len(layers) < 2:
      continue
    s = np.polyfit(layers, [math.log(q[l]) for l in layers], 1)[0]
    out.append(math.exp(s * (layers[-1] - layers[0])))
  return out


def log_ci(values: Sequence[float]) -> tuple[float, float, float]:
  """(low, geometric mean, high): the 95% interval over seeds of positive `values`, taken on
  the log scale (t over seeds) and mapped back."""
  m, h = mean_ci([math.log(v) for v in values])
  h = h if math.isfinite(h) else float("nan")
  return math.exp(m - h), math.exp(m), math.exp(m + h)


def needed_tolerance(runs: Sequence[Run]) -> dict:
  """`{lr: the smallest tolerance at which every seed is trained at lr}` for the grid LRs from
  `best_lr` up (inf where a run diverged or has not ended): `largest_trained_lr(runs, X)` is
  the largest LR of the run of LRs from the best whose values are all <= X."""
  best, start = seed_best(runs), best_lr(runs)
  out = {}
  if start is None:
    return out
  for lr in sorted({r.overrides[LR] for r in runs if r.overrides[LR] >= start}):
    gaps = []
    for r in runs:
      if r.overrides[LR] == lr:
        v = clipped_final_loss(r)
        gaps.append(math.inf if v is None or r.status == "diverged" or r.seed not in best
                    else v - best[r.seed])
    out[lr] = max(gaps) if gaps else math.inf
  return out


def breakpoints(*runs_sets: Sequence[Run]) -> list[float]:
  """The tolerances at which `largest_trained_lr` of any of the run sets changes."""
  out = set()
  for runs in runs_sets:
    level = 0.0
    for need in needed_tolerance(runs).values():
      level = max(level, need)
      if math.isfinite(level):
        out.add(level)
  return sorted(out)


def intervals_where(pred, points: Sequence[float], hi: float = 1.0) -> list[tuple[float, float]]:
  """Where the step function `pred(X)` (constant between the sorted `points`) is true on
  [0, hi]: a list of [start, end) intervals."""
  edges = sorted({0.0, *[p for p in points if 0 < p < hi], hi})
  out = []
  for a, b in zip(edges[:-1], edges[1:]):
    if pred((a + b) / 2):  # constant between breakpoints: its middle is safe from rounding
      if out and abs(out[-1][1] - a) < 1e-12:
        out[-1] = (out[-1][0], b)
      else:
        out.append((a, b))
  return out


def intervals_text(intervals: list[tuple[float, float]], hi: float = 1.0) -> str:
  """The X where a call holds, worded to follow "for": "X in [0.2, 0.5), X in [0.7, 1]" or
  "no X in [0, 1]"."""
  if not intervals:
    return f"no X in [0, {hi:g}]"
  return ", ".join(f"X in [{a:.3g}, {b:.3g}" + (")" if b < hi else "]") for a, b in intervals)


def tolerance_steps_figure(plt, panels: Sequence[str], curves: Sequence[tuple], level: Callable,
                           levels: Sequence, level_labels: Sequence[str], ylabel: str,
                           call_x: float, size: tuple[float, float]):
  """A row of panels sharing the y axis, one per name in `panels`: in each, one step line per
  `(key, style, colour, label)` of `curves` against the tolerance X in [0, 1] (steps of 0.01),
  at the position of `level(panel, key, X)` among `levels` (1, 2, ... bottom to top, labelled
  `level_labels`; 0, "none", for a level not among them), and a dotted line at `call_x`.
  `size`: (width per panel, height) in inches. Returns the figure of `plt` (pyplot)."""
  xs = [round(0.01 * i, 2) for i in range(0, 101)]
  n = len(panels)
  fig, axes = plt.subplots(1, n, figsize=(size[0] * n + 1.6, size[1]), sharey=True, squeeze=False)
  ticks = {v: i + 1 for i, v in enumerate(levels)}
  for ax, p in zip(axes[0], panels):
    for key, style, colour, label in curves:
      ys = [ticks.get(level(p, key, t), 0) for t in xs]
      ax.step(xs, ys, style, where="post", color=colour, lw=1.6, label=label)
    ax.axvline(call_x, color="gray", lw=0.8, ls=":")
    ax.set_title(p)
    ax.set_xlabel("tolerance X (nats)")
    ax.grid(alpha=0.3)
  axes[0][0].set_yticks([0, *ticks.values()], ["none", *level_labels])
  axes[0][0].set_ylabel(ylabel)
  axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
  fig.tight_layout()
  return fig


def default_activation_call(agrees) -> str:
  """The sentence, without its end, that states a study's call again on our default
  feed-forward activation (the verdict is on the paper's)."""
  return (f"With our default {activation_name(DEFAULT_ACTIVATION)} feed-forward net the same "
          f"test {verdict_word(agrees)}")


# --- A call chosen after its data, read on seeds run after it was fixed (issue 68 point 7) -----

def seeds_heading(runs: Sequence[Run], role: str = "") -> str:
  """"Seeds 3-5" for the runs' seeds, then `role` (", the verdict's")."""
  return f"Seeds {seed_list(sorted({r.seed for r in runs}))}{role}"


def confirmatory_split(runs: Sequence[Run], seeds: Sequence[int]) -> tuple[list, list]:
  """(the runs the call reads, the exploratory runs described beside it): the runs of the
  confirmatory `seeds` and the others once any confirmatory run is here; every run and none
  while none is (the call then reads the data it was chosen on, and `confirmatory_note` says
  so). The report's generic tables split the runs the same way (`seed_sets`)."""
  return split_seeds(runs, seeds)


def confirmatory_note(runs: Sequence[Run], seeds: Sequence[int]) -> str:
  """Which seeds the verdict reads: the confirmatory ones alone, or, before they have run,
  the exploratory ones it was chosen on."""
  if any(r.seed in seeds for r in runs):
    return (f"The verdict reads the confirmatory seeds {seed_list(seeds)} alone (fixed before "
            "their runs, after the call was chosen on the others; issue 68); the exploratory "
            "seeds' reading follows it, as description.")
  return (f"The confirmatory seeds {seed_list(seeds)} have not run yet: the verdict reads the "
          "seeds the call was chosen on, so it is not yet confirmed on new data.")


def confirmatory_reading(runs: Sequence[Run], seeds: Sequence[int], reading) -> list[str]:
  """The verdict's lines after the protocol line for a call with confirmatory `seeds`: the note,
  each seed set's `reading(runs, describe)` body (headed once both sets have runs), the verdict
  on `confirmatory_split`'s set and what `reading` puts after it, then the exploratory set's
  test, described. `reading` returns (body, verdict, sentence, lines after the verdict)."""
  judged, explored = confirmatory_split(runs, seeds)
  body, agrees, said, tail = reading(judged, True)
  lines = [confirmatory_note(runs, seeds), ""]
  if explored:
    seen = reading(explored, False)
    lines += [seeds_heading(judged, ", the verdict's:"), "", *body,
              seeds_heading(explored, ", exploratory (described):"), "", *seen[0]]
  else:
    lines += body
  lines += [verdict(agrees, said), *tail]
  if explored:
    lines += ["", exploratory_line(seen[1], seen[2], explored)]
  return lines


def exploratory_line(agrees, found: str, runs: Sequence[Run]) -> str:
  """The same test on the exploratory runs (the data the call was chosen on), one line of
  description below the verdict."""
  seeds = sorted({r.seed for r in runs})
  return (f"On the exploratory seeds {seed_list(seeds)} (the runs the call was chosen on; "
          f"described, not the call) the same test {verdict_word(agrees)}: {found}")
