"""Does qk-norm remove post-norm's LR cliff? (issue 49, question 4)

  python launch.py --mode=sweep --sweep=experiments/qk_norm_post.py:cpu \
      --sweep_dir=runs/studies/qk_norm_post --parallel=2 \
      --reuse_runs_from=experiments/results/lr_sensitivity

qk_norm_logits asked it for pre-norm; post-norm is the placement with the cliff (its loss
rises past its best LR while pre-norm's stays flat). Post-norm with qk-norm over the protocol's
LR grid, 3 seeds; post-norm without qk-norm and pre-norm are lr_sensitivity's runs (same config
and data, linked), so only the 15 qk-norm runs are new.

The call (`experiments/paired.py`'s margin rule), fixed before the qk-norm runs: per seed,
post-norm's LR sensitivity without the grid's two lowest LRs (lr_sensitivity's trimmed
measure: the mean over the upper grid of the clipped final loss minus the best) without
qk-norm minus with it, paired by seed. It *agrees* (qk-norm removes at least `LOSS_MARGIN` of
the cliff) when the 95% interval lies above 0.05 nats/token, *disagrees* when it lies below.
Described beside it: whether post-norm with qk-norm is as flat as pre-norm (the same measure,
post with qk-norm minus pre), the loss at the best LR with and without qk-norm, and the largest
stable LR of each.
"""

from experiments import analysis as a
from experiments import atlas, lr_sensitivity, paired
from experiments.presets import PROTOCOL_LRS, PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.sweep import preset, product

CLAIM = ("Open question (issue 49): qk-norm flattens post-norm's LR cliff. Wortsman et al. 2023 "
         "show qk-layernorm lowers LR sensitivity in pre-norm models; post-norm is the "
         "placement with the cliff (Xiong et al. 2020); no paper tests the two together.")
SETTINGS = (("post", True), ("post", False), ("pre", False))  # the new runs first
LOSS_MARGIN = 0.05  # nats/token of trimmed LR sensitivity that qk-norm must remove

ATLAS = "Does qk-norm remove post-norm's LR cliff?"  # the summary's atlas line


def get_sweep(size: str = "cpu"):
  """Post-norm with qk-norm (new), post-norm and pre-norm without (lr_sensitivity's)."""
  base = preset(PROTOCOL_SIZES, size)  # first: an unknown size is a clear error
  return [point for p, qk in SETTINGS for point in product(
      base, [protocol(size)], {"model.norm_placement": [p]}, {"model.qk_norm": [qk]},
      {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})]


def _name(placement: str, qk: bool) -> str:
  return f"{placement}{' + qk-norm' if qk else ''}"


def _runs(runs, placement, qk):
  return [r for r in runs if r.overrides[a.PLACEMENT] == placement
          and bool(r.overrides.get("model.qk_norm", False)) == qk]


def measure(runs) -> dict:
  """Per setting: `{seed: trimmed LR sensitivity}`, the LR read and `{seed: loss}` there, the
  largest stable LR and the clipped losses per LR; the call's difference and pre's."""
  lrs = sorted({r.overrides[a.LR] for r in runs})
  high = lrs[lr_sensitivity.LOW:]
  out = {"lrs": lrs, "high": high, "settings": {}}
  for p, qk in SETTINGS:
    mine = _runs(runs, p, qk)
    sens = {s: v for s, v in a.by_seed(mine, lambda rs: lr_sensitivity.trimmed_sensitivity(
        rs, high)).items() if s != paired.LEFT_OUT_SEED}
    per_lr = {lr: [v for v in (a.clipped_final_loss(r) for r in mine
                               if r.overrides[a.LR] == lr) if v is not None] for lr in lrs}
    out["settings"][(p, qk)] = {"sensitivity": sens, "read": paired.read(mine, None),
                                "stable": a.largest_stable_lr(mine), "per_lr": per_lr}
  s = out["settings"]
  out["call"] = paired.difference(
      "post-norm's trimmed LR sensitivity without qk-norm minus with it",
      s[("post", False)]["sensitivity"], s[("post", True)]["sensitivity"])
  out["vs_pre"] = paired.difference(
      "post-norm with qk-norm minus pre-norm, the same measure",
      s[("post", True)]["sensitivity"], s[("pre", False)]["sensitivity"])
  out["best"] = paired.difference(
      "post-norm's loss at its best LR without qk-norm minus with it",
      s[("post", False)]["read"][1], s[("post", True)]["read"][1])
  return out


def analyze(runs):
  m = measure(runs)
  rows = [[_name(p, qk), a.ci(list(v["sensitivity"].values())),
           *(a.ci(v["per_lr"][lr]) for lr in m["lrs"]), a.fmt_lr(v["read"][0]),
           a.fmt_lr(v["stable"]), a.status_counts(_runs(runs, p, qk))]
          for (p, qk), v in m["settings"].items()]
  lines = [a.protocol(runs), "",
           f"LR sensitivity over {', '.join(f'{lr:g}' for lr in m['high'])} (the best taken "
           "over the whole grid; lr_sensitivity's trimmed measure), the clipped final eval loss "
           "(nats/token) at each LR, the best LR and the largest LR at which every seed "
           "finished, mean ± 95% CI over seeds:", "",
           *a.table(["setting", "LR sensitivity (trimmed)", *(f"loss @ {lr:g}" for lr in m["lrs"]),
                     "best LR", "largest stable LR", "runs"], rows), "",
           "Paired by seed:", "", f"- {m['call'].text()}", f"- {m['vs_pre'].text()}",
           f"- {m['best'].text()}", ""]
  edges = [n for (p, qk), v in m["settings"].items() for n in [a.edge_note(
      f"{_name(p, qk)}: largest stable LR", v["stable"], _runs(runs, p, qk))] if n]
  lines += [*(f"- {n}" for n in edges), *([""] if edges else [])]
  flat = {True: "above", False: "below", None: "across"}[paired.judge(m["vs_pre"], 0.0)]
  stable = ", ".join(f"{_name(p, qk)} {a.fmt_lr(v['stable'])}"
                     for (p, qk), v in m["settings"].items())
  return lines + [a.verdict(paired.judge(m["call"], LOSS_MARGIN),
                            f"{paired.call_text(m['call'], LOSS_MARGIN)}. Against pre-norm's "
                            f"flatness, post-norm with qk-norm's interval lies {flat} zero. "
                            f"Described: the largest stable LR is {stable}.")]


FIGURE = "loss_heatmap.png"


def figures(runs, sweep_dir):
  """`loss_heatmap.png`: setting x LR, the mean clipped final loss, non-trained cells marked."""
  key = lambda r: (r.overrides[a.PLACEMENT], bool(r.overrides.get("model.qk_norm", False)))
  return atlas.loss_heatmap_figure(runs, sweep_dir, FIGURE, key, SETTINGS,
                                   [_name(p, qk) for p, qk in SETTINGS])


def summarize(runs):
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS,
          "numbers": [m["call"].text(), m["vs_pre"].text(), m["best"].text()],
          "figure": FIGURE, "placements": {}}


THRESHOLDS = (a.CONFIDENCE, *paired.loss_margin_thresholds()[1:3])
THRESHOLDS_NOT_READ = {**paired.NOT_READ, paired.MATCHED_LR.label:
                       "the call is a sensitivity over the whole grid, read at no single LR"}
