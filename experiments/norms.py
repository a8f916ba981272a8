"""Study 9: which norm under pre-norm: LayerNorm, RMSNorm, DyT (alpha_0 swept) and none.

  python launch.py --mode=sweep --sweep=experiments/norms.py:cpu \
      --sweep_dir=runs/studies/norms --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

Pre-norm x norm kind x the LR grid x 3 seeds, on the training studies' recipe. DyT
(`model.norm=dyt`, gamma * tanh(alpha x) + beta) is run at four initial alphas
(`model.dyt_alpha_init`; Zhu et al.'s default for non-LLM models is 0.5). The LayerNorm points
are lr_sensitivity's pre-norm runs (linked when that study was run with this code).

The call (`experiments/paired.py`): per norm, the clipped final eval loss minus LayerNorm's,
each at its own best LR, paired by seed; a norm *matches* LayerNorm when the 95% interval lies
within ± LOSS_MARGIN (0.05 nats/token, in this file before the runs) and is *worse* when it
lies above + LOSS_MARGIN. The matched-LR section reads every norm at 3e-3, and the robustness
section makes the call there and at the neighbouring margins, and describes each seed.
"""

from experiments import analysis as a
from experiments import paired
from experiments.presets import (PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS,
                                 PROTOCOL_SIZES, protocol)
from transformer.sweep import preset, product
from transformer.report.robustness import Threshold

CLAIM = ("Zhu et al. 2025 (DyT): replacing every LayerNorm by DyT(x) = gamma tanh(alpha x) + "
         "beta matches LayerNorm's results mostly without tuning (alpha_0 = 0.5 outside LLMs; "
         "LLMs need smaller alpha_0); RMSNorm matches LayerNorm; without any norm a pre-norm "
         "Transformer trains worse.")
# 0.5: Zhu et al.'s default outside LLMs; the smaller ones because the loss rose with alpha_0
# over {0.5, 1, 2} in the first run of this study (and LLMs need smaller alpha_0, they say).
DYT_ALPHAS = [0.05, 0.1, 0.2, 0.5]
VARIANTS = ([{"model.norm": "layernorm"}, {"model.norm": "rmsnorm"}]
            + [{"model.norm": "dyt", "model.dyt_alpha_init": a} for a in DYT_ALPHAS]
            + [{"model.norm": "none"}])
LOSS_MARGIN = 0.05  # nats/token: "matches LayerNorm" = best-LR loss within this, 95% CI


def get_sweep(size: str = "cpu"):
  """The protocol's model, budget, warm-up, LR grid and seeds; pre-norm with each norm (the
  LayerNorm runs are lr_sensitivity's)."""
  base = preset(PROTOCOL_SIZES, size)
  return product(base, [protocol(size)], [{"model.norm_placement": "pre"}], VARIANTS,
                 {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})


def label(run) -> str:
  norm = run.overrides.get("model.norm", "layernorm")
  if norm == "dyt":
    return f"dyt a0={run.overrides.get('model.dyt_alpha_init', 0.5):g}"
  return norm


def best_lr_losses(runs):
  """(the LR read, its clipped final losses by seed): the best LR (`paired.read`), or the
  matched LR while the robustness section asks for it."""
  lrs = {r.overrides[a.LR] for r in runs}
  return paired.read(runs, next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None))


def _first_loss(runs, lr) -> float:
  """Mean over the `runs` at learning rate `lr` of their first logged train loss."""
  firsts = [r.metrics["train"][0]["loss"] for r in runs
            if r.metrics.get("train") and r.overrides[a.LR] == lr]
  return sum(firsts) / max(len(firsts), 1)


def _by_norm(runs) -> tuple[list[str], dict]:
  """The norms' labels in run order, and `{label: its runs}`."""
  names = list(dict.fromkeys(label(r) for r in runs))
  return names, {n: [r for r in runs if label(r) == n] for n in names}


def _minus_layernorm(best: dict) -> dict:
  """`{norm: (mean, 95% half-width)}` of its clipped final loss at its best LR minus
  LayerNorm's at LayerNorm's, paired by seed; NaNs with fewer than two shared seeds. `best`:
  `{norm: best_lr_losses(its runs)}`."""
  ref = best.get("layernorm", (None, {}))[1]
  out = {}
  for n, (_, losses) in best.items():
    d = paired.difference(f"{n} minus LayerNorm", losses, ref)
    if n != "layernorm":
      paired.describe_seeds(d, LOSS_MARGIN)
    out[n] = d.interval if len(d.per_seed) > 1 else (float("nan"), float("nan"))
  return out


def _matched_lines(runs, names, by) -> list[str]:
  """The matched-LR section: each norm at the matched LR, and minus LayerNorm there (paired)."""
  lrs = {r.overrides[a.LR] for r in runs}
  lr = next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None)
  if lr is None:
    return []
  at = {n: paired.seed_losses(a.select(by[n], optim__learning_rate=lr)) for n in names}
  ref = at.get("layernorm", {})
  rows = [[n, a.ci(at[n].values()), "-" if n == "layernorm" else
           a.fmt(*paired.difference(n, at[n], ref).interval)] for n in names]
  return [f"At the matched LR {lr:g} (every norm at one LR): clipped final eval loss, and minus "
          "LayerNorm's there, paired by seed (mean ± 95% CI over seeds):", "",
          *a.table(["norm", f"loss @ {lr:g}", "minus LayerNorm"], rows), ""]


def _table_lines(runs, names, by, best, diff) -> list[str]:
  """The protocol line, the per-norm table and the notes on best LRs at the grid's edge."""
  rows = []
  for n in names:
    lr, losses = best[n]
    largest = a.largest_stable_lr(by[n])
    rows.append([n, "-" if lr is None else f"{lr:g}", a.ci(losses.values()),
                 "-" if n == "layernorm" else a.fmt(*diff[n]),
                 a.ci(a.per_seed(by[n], a.lr_sensitivity)),
                 "none" if largest is None else f"{largest:g}", a.status_counts(by[n])])
  lines = [a.protocol(runs), "",
           "Pre-norm with each norm: the best LR of the grid, the clipped final eval loss "
           "there (nats/token, mean ± 95% CI over seeds), minus LayerNorm's at its own best LR "
           "(paired by seed), the LR sensitivity (Wortsman et al., per seed) and the largest "
           "stable LR:", "",
           *a.table(["norm", "best LR", "loss @ best LR", "minus LayerNorm", "LR sensitivity",
                     "largest stable LR", "runs"], rows), ""]
  return lines + [n for n in (a.edge_note(f"{label_} best LR", best[label_][0], by[label_])
                              for label_ in names) if n]


def _no_norm_lines(none_runs) -> list[str]:
  """Why the runs without any norm start far above ln V, and how many end clipped."""
  lnv = a.initial_loss(none_runs[0])
  clipped = [r for r in none_runs if (v := a.clipped_final_loss(r)) is not None and v >= lnv]
  return ["Without any norm the final norm before the output projection goes too, so the "
          "logits are not normalized and the loss starts far above ln V = "
          f"{lnv:.2f}: the first logged train row (mean of the first steps) is "
          f"{_first_loss(none_runs, min(r.overrides[a.LR] for r in none_runs)):.0f} "
          f"nats/token at the smallest LR. {len(clipped)} of {len(none_runs)} such runs "
          "end above ln V and count as ln V (clipped).", ""]


def _matches(diff: dict, n: str) -> bool:
  """Whether norm n's difference to LayerNorm lies within ± LOSS_MARGIN (95% CI)."""
  m, h = diff.get(n, (float("nan"), float("nan")))
  return m == m and h == h and abs(m) + h <= LOSS_MARGIN


def _worse(diff: dict, n: str) -> bool:
  """Whether norm n ends more than LOSS_MARGIN above LayerNorm (95% CI)."""
  m, h = diff.get(n, (float("nan"), float("nan")))
  return m == m and h == h and m - h > LOSS_MARGIN


def _call_line(names, diff, judged) -> str:
  """The verdict on DyT at alpha_0 = 0.5 (and tuned), RMSNorm and no norm against LayerNorm."""
  dyts = [n for n in names if n.startswith("dyt")]
  default = "dyt a0=0.5"
  said = []
  if default in judged:
    word = "matches" if _matches(diff, default) else "does not match"
    said.append(f"DyT at alpha_0 = 0.5 {word} LayerNorm ({a.fmt(*diff[default])} nats/token)")
  tuned = [n for n in dyts if _matches(diff, n)]
  if tuned and default not in tuned:
    said.append(f"with tuning it does ({', '.join(tuned)})")
  others = [n for n in dyts if n != default and n in judged]
  if others and not tuned:  # the issue asked for smaller alpha_0: say what they gave
    closest = min(others, key=lambda n: diff[n][0])
    said.append(f"nor at any other alpha_0 tried (the closest, {closest}: "
                f"{a.fmt(*diff[closest])})")
  if "rmsnorm" in judged:
    said.append(f"RMSNorm {'matches' if _matches(diff, 'rmsnorm') else 'does not match'} "
                f"({a.fmt(*diff['rmsnorm'])})")
  if "none" in judged:
    said.append(f"no norm is {'worse' if _worse(diff, 'none') else 'not clearly worse'} "
                f"({a.fmt(*diff['none'])})")
  unjudged = [n for n in (default, "rmsnorm", "none") if n in names and n not in judged]
  if unjudged:
    said.append(f"not judged, no finished runs to compare: {', '.join(unjudged)}")
  parts = [_matches(diff, default) if default in judged else None,
           _matches(diff, "rmsnorm") if "rmsnorm" in judged else None,
           _worse(diff, "none") if "none" in judged else None]
  known = [p for p in parts if p is not None]
  text = "; ".join(said) + f" (match: 95% CI within ± {LOSS_MARGIN} nats/token)."
  if known and all(known) and unjudged:
    return a.verdict(None, text + " What was judged agrees; the rest has not run.")
  if known and all(known):
    return a.verdict(True, text)
  if any(known) or tuned:
    return a.verdict("partly", text)
  return a.verdict(False if known else None, text)


def analyze(runs):
  """Per norm: the best LR and its clipped final loss (mean ± 95% CI over seeds), the
  difference to LayerNorm at each one's best LR (paired by seed), the LR sensitivity and the
  largest stable LR. DyT and RMSNorm "match" LayerNorm when the 95% interval of that
  difference lies within ± LOSS_MARGIN."""
  names, by = _by_norm(runs)
  best = {n: best_lr_losses(by[n]) for n in names}
  diff = _minus_layernorm(best)
  lines = _table_lines(runs, names, by, best, diff) + _matched_lines(runs, names, by)
  # A norm is judged only once some seed has a loss at its best LR and at LayerNorm's (a
  # study cut off midway lists norms whose runs have not run yet).
  judged = [n for n in names if n != "layernorm" and diff[n][0] == diff[n][0]]
  if "none" in judged:
    lines += _no_norm_lines(by["none"])
  if not best.get("layernorm", (None, {}))[1]:
    return lines + [a.verdict(None, "No LayerNorm runs to compare with.")]
  return lines + [_call_line(names, diff, judged)]


def summarize(runs):
  """The summary's entry (transformer/report/summary.write_summary): verdict, headline numbers
  and the main figure."""
  word, said = a.verdict_of(analyze(runs))
  names, by = _by_norm(runs)
  numbers = []
  for n in names:
    lr, losses = best_lr_losses(by[n])
    numbers.append(f"{n}: best LR {a.fmt_lr(lr)}, clipped final loss there "
                   f"{a.ci(losses.values())} nats/token (pre-norm, {len(losses)} seeds)")
  return {"verdict": word,
          "numbers": [said] + numbers,
          "figure": "final_vs_optim_learning_rate.webp"}

# What the verdict's call depends on, recomputed at its neighbours in the report's `## Robustness`
# (transformer/report/robustness.py; the shared ones are defined in experiments/analysis.py).
THRESHOLDS = (a.CONFIDENCE,
              Threshold("loss margin (nats/token)", None, "LOSS_MARGIN", (0.03, 0.1)),
              paired.MATCHED_LR)
THRESHOLDS_NOT_READ = {a.COLLAPSE.label: a.COLLAPSE_NOT_READ,
                       a.RULE.label: a.RULE_NOT_READ + " (the largest stable "
                       "LR is shown, not judged)"}

# Which calls were fixed before their data (`transformer/study.py`; the report's `## Calls`):
# from `git log --follow -p` of this file and the runs' provenance.
_FIXED = ("pre-registered at b455241, the commit that added this file (each norm minus "
          "LayerNorm at each one's best LR, paired by seed, against ± LOSS_MARGIN 0.05) before "
          "any norms run (the old recipe's, 2026-11-23; the protocol's, from 2026-11-25 22:51); "
          "46a9f86 later read it through experiments/paired.py, the verdict unchanged")
REGISTRATION = {"DyT (alpha_0 = 0.5) matches LayerNorm": _FIXED,
                "RMSNorm matches LayerNorm": _FIXED,
                "no norm is worse than LayerNorm": _FIXED}
