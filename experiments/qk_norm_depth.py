"""Does qk-norm remove post-norm's depth failure? (issue 49, question 4, its second half)

  python launch.py --mode=sweep --sweep=experiments/qk_norm_depth.py:cpu \
      --sweep_dir=runs/studies/qk_norm_depth --parallel=2 \
      --reuse_runs_from=experiments/results/qk_norm_post,experiments/results/depth_lr,\
experiments/results/lr_sensitivity

qk_norm_post asked whether qk-norm removes post-norm's LR cliff at 6 layers. Post-norm's other
failure is depth: in depth_lr, 12 layers cost it +0.785 nats/token over 6, each depth at its
own best LR, where DeepNorm gains. Here post-norm with qk-norm at 12 layers (scanned, as in
depth_lr) over post-norm's 12-layer window in depth_lr (LR 1e-4 to 3e-3), 3 seeds: 12 runs
are new. Post-norm with qk-norm at 6 layers is qk_norm_post's; post-norm without qk-norm at 6
layers is lr_sensitivity's and at 12 layers depth_lr's (all linked: the same config and data).

The call (`experiments/paired.py`), fixed before the new runs: per seed, post-norm's depth cost
(12 minus 6 layers, each depth at its own best LR) with qk-norm minus without it, paired by
seed. It *agrees* (qk-norm removes at least `LOSS_MARGIN` of the depth failure) when the 95%
interval lies below -0.05 nats/token, *disagrees* when it lies above -0.05, *inconclusive*
otherwise. Described beside it: the depth cost with qk-norm on its own, each setting's best LR
and loss, and where a best LR sits on its window's edge.

Extended after those 12 runs, the call unchanged: at 12 layers both settings' best LR fell on
1e-4, the window's lowest (depth_lr's post-norm too), so neither optimum was located; one LR
lower, 3e-5 (`BELOW`), for both settings: 6 more new runs.
"""

from experiments import analysis as a
from experiments import atlas, depth_lr, paired
from experiments.presets import LAYERS, PROTOCOL_LRS, PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.sweep import preset, product

CLAIM = ("Open question (issue 49): qk-norm removes post-norm's depth failure. Post-norm stops "
         "gaining from depth (Liu et al. 2020; Wang et al. 2022); qk-norm bounds the attention "
         "logits (Dehghani et al. 2023; Wortsman et al. 2023); no paper tests the two together.")
ATLAS = "Does qk-norm remove post-norm's depth failure?"
LOSS_MARGIN = 0.05  # nats/token of depth cost that qk-norm must remove
DEPTH = "model.num_layers"
QK = "model.qk_norm"
FIGURE = "loss_heatmap.png"
# One LR below depth_lr's 12-layer post-norm window, where both settings' best fell on its edge.
BELOW = {"cpu": [3e-5], "gpu": []}


def deep_lrs(size: str) -> list[float]:
  """`BELOW`, then post-norm's 12-layer window in depth_lr (its extension below the window
  first)."""
  return BELOW[size] + depth_lr.EXTENDED[size].get(("post", depth_lr.DEPTHS[size][-1]), []) \
      + depth_lr.WINDOW[size]["post"]


def get_sweep(size: str = "cpu"):
  """The new runs first (post + qk-norm, deep), then the linked ones: post + qk-norm at the
  protocol's depth (qk_norm_post's), post-norm without it deep (depth_lr's) and at the
  protocol's depth (lr_sensitivity's)."""
  base = preset(PROTOCOL_SIZES, size)
  deep = depth_lr.DEPTHS[size][-1]
  deep_fixed = {**protocol(size, varied=(DEPTH,)), "model.scan_layers": True}
  points = []
  for qk in (True, False):
    points += product(base, [deep_fixed], {"model.norm_placement": ["post"]},
                      {"optim.learning_rate": deep_lrs(size)}, {DEPTH: [deep]},
                      {QK: [qk]}, {"seed": PROTOCOL_SEEDS})
  for qk in (True, False):
    points += product(base, [protocol(size)], {"model.norm_placement": ["post"]}, {QK: [qk]},
                      {"optim.learning_rate": PROTOCOL_LRS[size]}, {"seed": PROTOCOL_SEEDS})
  return points


def _name(qk: bool) -> str:
  return "post + qk-norm" if qk else "post"


def _setting(runs, qk: bool, depth: int):
  return [r for r in runs if bool(r.overrides.get(QK, False)) == qk
          and r.overrides.get(DEPTH, LAYERS["cpu"]) == depth]


def measure(runs) -> dict:
  depths = sorted({r.overrides.get(DEPTH, LAYERS["cpu"]) for r in runs})
  shallow, deep = depths[0], depths[-1]
  best = {(qk, d): paired.read(_setting(runs, qk, d), None) for qk in (True, False)
          for d in (shallow, deep)}
  cost = {qk: paired.difference(f"{_name(qk)}, {deep} minus {shallow} "
                                "layers, each at its best LR",
                                best[(qk, deep)][1], best[(qk, shallow)][1])
          for qk in (True, False)}
  call = paired.difference("post-norm's depth cost with qk-norm minus without it",
                           cost[True].per_seed, cost[False].per_seed)
  return {"depths": (shallow, deep), "best": best, "cost": cost, "call": call}


def analyze(runs):
  m = measure(runs)
  shallow, deep = m["depths"]
  rows = [[_name(qk), *(f"{a.fmt_lr(m['best'][(qk, d)][0])}: "
                                             f"{a.ci(list(m['best'][(qk, d)][1].values()))}"
                                             for d in (shallow, deep))] for qk in (False, True)]
  lines = [a.protocol(runs), "",
           "Per setting and depth: the best LR and the clipped final eval loss there "
           "(nats/token, mean ± 95% CI over seeds):", "",
           *a.table(["setting", f"{shallow} layers", f"{deep} layers"], rows), "",
           "Depth cost, each depth at its own best LR, paired by seed:", "",
           *(f"- {m['cost'][qk].text()}" for qk in (False, True))]
  edges = [n for (qk, d), (lr, _) in m["best"].items() for n in [a.edge_note(
      f"{_name(qk)} at {d} layers: best LR", lr,
      _setting(runs, qk, d))] if n]
  lines += ["", *(f"- {n}" for n in edges)] if edges else []
  side = paired.judge(m["call"], -LOSS_MARGIN)
  agrees = {True: False, False: True, None: None}[side]  # below -margin: qk-norm removes it
  return lines + ["", a.verdict(agrees, f"{paired.call_text(m['call'], -LOSS_MARGIN)}.")]


def figures(runs, sweep_dir):
  """`loss_heatmap.png`: setting (with and without qk-norm, at each depth) x LR."""
  deep = max(r.overrides.get(DEPTH, LAYERS["cpu"]) for r in runs)
  settings = [(qk, d) for qk in (False, True) for d in (LAYERS["cpu"], deep)]
  key = lambda r: (bool(r.overrides.get(QK, False)), r.overrides.get(DEPTH, LAYERS["cpu"]))
  names = [f"{_name(qk)}, {d} layers" for qk, d in settings]
  return atlas.loss_heatmap_figure(runs, sweep_dir, FIGURE, key, settings, names)


def summarize(runs):
  m = measure(runs)
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "atlas": ATLAS, "figure": FIGURE, "placements": {},
          "numbers": [m["call"].text(), *(m["cost"][qk].text() for qk in (False, True))]}


THRESHOLDS = (a.CONFIDENCE, *paired.loss_margin_thresholds((0.02, 0.1))[1:3])
THRESHOLDS_NOT_READ = {**paired.NOT_READ, paired.MATCHED_LR.label:
                       "each depth is read at its own best LR: that is the question"}
