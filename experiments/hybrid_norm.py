"""HybridNorm beside post- and pre-norm over the LR grid (issue 49, question 6).

  python launch.py --mode=sweep --sweep=experiments/hybrid_norm.py:cpu \
      --sweep_dir=runs/studies/hybrid_norm --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity

HybridNorm (`norm_placement=hybrid`): attention `x + Attn(x)` with queries, keys and values
each normalized per head after projection (QKV-Norm); the feed-forward half `y + FFN(y)` with
`y = N(x)`; a final norm after the stack (the paper's block, issue 68). The committed
HybridNorm runs are that block's (trained at 8f2da00, 2026-12-02). The results committed up to
commit e081cee ran an earlier reading, now `norm_placement=hybrid_v0` (q, k, v normed over all
heads together, `N(x + FFN(x))`, no final norm; pre minus it was -0.131 ± 0.082, largest
stable LR 3e-3); depth_lr keeps those 6-layer runs inside its own packed file.
`--reuse_runs_from` refuses to link an old `hybrid` run to a point now. The protocol's
model, budget, warm-up, LR grid and seeds; post- and pre-norm are lr_sensitivity's runs (same
config and data, linked), so only HybridNorm's 15 runs are new.

Five seeds (issue 68 point 8, after the 3-seed runs were seen): seeds 3 and 4 of HybridNorm and
pre-norm, the call's two settings, over the whole grid (each is read at its best LR of the mean
over seeds), listed after every earlier point: 10 new HybridNorm runs, and pre-norm's 10 are
lr_sensitivity's (linked). Post-norm, described, keeps 3 seeds (post minus HybridNorm pairs
the seeds both have). Not run yet; the report says so until they have.

The call (`experiments/paired.py`), fixed before HybridNorm's runs: the paper claims HybridNorm
ends below pre-norm. The statistic is pre-norm's clipped final eval loss minus HybridNorm's,
each at its own best LR of the grid, paired by seed. It *agrees* when the 95% interval lies
above `LOSS_MARGIN` (0.01 nats/token), *disagrees* when it lies below it. Described beside it:
HybridNorm minus post-norm the same way, and the stability half of the claim: each
placement's LR sensitivity without the grid's two lowest LRs and its largest stable LR.

Not tested: the paper's HybridNorm* variant (its first block treated differently), and its
scale (language models of 150M-7B parameters trained on many more tokens).
"""

from experiments import analysis as a
from experiments import atlas, lr_sensitivity, paired
from experiments.presets import (ADDED_SEEDS, PROTOCOL_LRS, PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS,
                                 PROTOCOL_SIZES)
from experiments.presets import protocol
from transformer.sweep import preset, product

CLAIM = ("Zhuo et al. 2025 (HybridNorm): QKV normalization inside attention with post-norm "
         "around the feed-forward net 'combines the training stability of Pre-Norm with the "
         "superior performance of Post-Norm': lower loss than pre-norm at stable training.")
PLACEMENTS = ["hybrid", "pre", "post"]  # the new runs first; pre and post are linked
LOSS_MARGIN = 0.01  # nats/token: pre-norm's loss above HybridNorm's by more than this agrees
JUDGED = ["hybrid", "pre"]  # the call's settings: seeds 3 and 4 for them (issue 68)

ATLAS = "Does HybridNorm end below pre-norm at each one's best LR?"  # the summary's atlas line


def get_sweep(size: str = "cpu"):
  """The protocol's model, budget, warm-up, LR grid and seeds, for HybridNorm, pre and post;
  then seeds 3 and 4 of HybridNorm and pre, seed by seed (issue 68)."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  added = product(base, [protocol(size)], {"model.norm_placement": JUDGED},
                  {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": ADDED_SEEDS})
  return (product(base, [protocol(size)], {"model.norm_placement": PLACEMENTS},
                  {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})
          + sorted(added, key=lambda p: p["seed"]))


def measure(runs) -> dict:
  """Per placement the LR read and `{seed: loss}` there; the call's difference (pre minus
  hybrid) and post minus hybrid; lr_sensitivity's measures of the same runs. A seed 3 or 4
  is read once all its runs have ended."""
  runs = paired.added_seeds_ended(runs)
  lrs = {r.overrides[a.LR] for r in runs}
  matched = next((lr for lr in PROTOCOL_MATCHED_LR.values() if lr in lrs), None)
  read = {p: paired.read(a.select(runs, model__norm_placement=p), matched) for p in PLACEMENTS}
  losses = {p: read[p][1] for p in PLACEMENTS}
  return {"read": read,
          "call": paired.difference("pre-norm minus HybridNorm", losses["pre"],
                                    losses["hybrid"]),
          "post": paired.difference("post-norm minus HybridNorm", losses["post"],
                                    losses["hybrid"]),
          "sensitivity": lr_sensitivity.measure(runs)}


def analyze(runs):
  runs = paired.added_seeds_ended(runs)
  m = measure(runs)
  s = m["sensitivity"]
  rows = [[p, a.fmt_lr(m["read"][p][0]), a.ci(list(m["read"][p][1].values())),
           a.ci(s["trim"].get(p, [])), a.fmt_lr(s["best"].get(p)), a.fmt_lr(s["stable"].get(p)),
           a.status_counts(a.select(runs, model__norm_placement=p))] for p in PLACEMENTS]
  lines = [a.protocol(runs), "",
           "Per placement: the LR read (its own best LR of the grid), the clipped final eval "
           "loss there (nats/token, mean ± 95% CI over seeds), the LR sensitivity without the "
           f"grid's {lr_sensitivity.LOW} lowest LRs (lr_sensitivity's measure), and the largest "
           "LR at which every seed finished:", "",
           *a.table(["placement", "LR read", "loss there", "LR sensitivity (trimmed)",
                     "best LR", "largest stable LR", "runs"], rows), "",
           "Paired by seed, each placement at the LR read:", "",
           f"- {m['call'].text()}", f"- {m['post'].text()}", "",
           paired.added_seeds_note(runs, "HybridNorm and pre-norm"), ""]
  edges = [n for p in PLACEMENTS for n in [a.edge_note(
      f"{p}: best LR", m["read"][p][0], a.select(runs, model__norm_placement=p))] if n]
  lines += [*(f"- {n}" for n in edges), *([""] if edges else [])]
  agrees = paired.judge(m["call"], LOSS_MARGIN)
  post_word = {True: "above", False: "below", None: "across"}[  # described, not the call
      paired.judge(m["post"], 0.0, describe=False)]
  stable = ", ".join(f"{p} {a.fmt_lr(m['sensitivity']['stable'].get(p))}" for p in PLACEMENTS)
  return lines + [a.verdict(agrees, f"{paired.call_text(m['call'], LOSS_MARGIN)}. HybridNorm "
                            f"against post-norm: post minus hybrid {m['post'].estimate()}, "
                            f"whose interval lies {post_word} zero. The stability half, "
                            f"described: the largest stable LR is {stable}.")]


FIGURE = "loss_heatmap.webp"


def figures(runs, sweep_dir):
  """`loss_heatmap.webp`: placement x LR, the mean clipped final loss, non-trained cells marked."""
  return atlas.loss_heatmap_figure(runs, sweep_dir, FIGURE, lambda r: r.overrides[a.PLACEMENT],
                                   PLACEMENTS)


def summarize(runs):
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  s = m["sensitivity"]
  return {"verdict": word, "atlas": ATLAS, "numbers": [m["call"].text(), m["post"].text()],
          "figure": FIGURE,
          "placements": {p: {"best LR": a.fmt_lr(s["best"].get(p)),
                             "largest stable LR, warm-up": a.fmt_lr(s["stable"].get(p)),
                             "LR sensitivity (without lowest LRs)": a.ci(s["trim"].get(p, []))}
                         for p in PLACEMENTS}}


THRESHOLDS = paired.margin_thresholds((0.0, 0.03))
THRESHOLDS_NOT_READ = paired.NOT_READ

REGISTRATION = {
    "pre-norm minus HybridNorm": "pre-registered at e235672 (statistic and LOSS_MARGIN 0.01), "
                                 "before hybrid_v0's first run (2026-11-26 23:39) and before the "
                                 "paper's block was built (0ba5dd1) and its 15 runs trained "
                                 "(2026-12-02); pre-norm's runs are lr_sensitivity's; "
                                 f"{paired.FIVE_SEEDS}"}
