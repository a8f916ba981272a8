"""Study 4: warm-up and the largest stable learning rate.

  python launch.py --mode=sweep --sweep=experiments/warmup_stability.py:cpu \
      --sweep_dir=runs/studies/warmup_stability --parallel=2 \
      --reuse_runs_from=runs/studies/lr_sensitivity

Post, pre, DeepNorm and Admin (the placements the claim names) x {no warm-up, warm-up} x the
LR grid x 3 seeds. The runs with warm-up are lr_sensitivity's (same config): with
`--reuse_runs_from` they are linked, not trained again. The report's learning-rate table gives,
per placement and warm-up, the largest LR up to which every seed trained (not diverged, not
collapsed to the unigram entropy), counted up from the best LR.
"""

from experiments.presets import LRS, TRAINING_SIZES, WARMUP, training
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020; Liu et al. 2020 (Admin); Wang et al. 2022 (DeepNet): post-norm "
         "needs learning-rate warm-up to train at usual learning rates; pre-norm, Admin and "
         "DeepNorm train without it.")
PLACEMENTS = ["post", "pre", "deepnorm", "admin"]
LOSS_MARGIN = 0.05  # nats/token: a loss cost of dropping warm-up worth naming


def get_sweep(size: str = "cpu"):
  base = preset(TRAINING_SIZES, size)
  return product(base, [training(size)], {"model.norm_placement": PLACEMENTS},
                 {"optim.warmup_steps": [0, WARMUP[size]]},
                 {"optim.learning_rate": LRS[size]}, {"seed": [0, 1, 2]})


def analyze(runs):
  """Per placement, with and without warm-up: the largest LR at which every seed trained
  healthily, how the runs ended, and the final-loss cost of dropping warm-up at each LR
  (no warm-up minus warm-up, paired by seed, mean ± 95% CI)."""
  from experiments import analysis as a  # noqa: PLC0415
  lrs = sorted({r.overrides[a.LR] for r in runs})
  warmups = sorted({r.overrides["optim.warmup_steps"] for r in runs})
  none, some = warmups[0], warmups[-1]
  rows, needs, costly = [], {}, {}
  for p in PLACEMENTS:
    largest = {}
    for w in warmups:
      mine = a.select(runs, model__norm_placement=p, optim__warmup_steps=w)
      largest[w] = a.largest_stable_lr(mine)
    gaps = []
    for lr in lrs:
      pairs = {}
      for r in a.select(runs, model__norm_placement=p, optim__learning_rate=lr):
        v = a.clipped_final_loss(r)
        if v is not None:
          pairs.setdefault(r.overrides["seed"], {})[r.overrides["optim.warmup_steps"]] = v
      gaps.append([d[none] - d[some] for d in pairs.values() if none in d and some in d])
    fmt_lr = lambda lr: "none" if lr is None else f"{lr:g}"  # noqa: E731
    rows.append([p, fmt_lr(largest[none]), fmt_lr(largest[some]), *(a.ci(g) for g in gaps),
                 a.status_counts(a.select(runs, model__norm_placement=p,
                                          optim__warmup_steps=none))])
    needs[p] = (largest[none] or 0) < (largest[some] or 0)
    costly[p] = [lr for lr, g in zip(lrs, gaps)
                 if len(g) > 1 and a.mean_ci(g)[0] - a.mean_ci(g)[1] > LOSS_MARGIN]
  lines = ["Largest LR up to which every seed trained (neither diverged nor collapsed, at that "
           f"LR and every grid LR from the best one up to it), without warm-up and with {some} "
           "warm-up steps; and the cost of dropping warm-up: final eval loss (clipped at ln V) "
           "without minus with warm-up, paired by seed, mean ± 95% CI:", "",
           *a.table(["placement", "largest stable LR, no warm-up",
                     f"largest stable LR, warm-up {some}",
                     *(f"loss cost @ {lr:g}" for lr in lrs), "runs without warm-up"], rows), "",
           "The claim is about *training* at all: a placement *needs* warm-up here when dropping "
           "it lowers the largest LR at which it trains.", ""]
  said = {"post": True, "pre": False, "deepnorm": False, "admin": False}
  matches = {p: needs[p] == said[p] for p in PLACEMENTS if p in needs}
  summary = "; ".join(f"{p} {'needs' if needs[p] else 'does not need'} it" for p in needs)
  wrong = [p for p, ok in matches.items() if not ok]
  if not wrong:
    lines.append(a.verdict(True, f"{summary}, as the papers say."))
  elif matches.get("post"):
    lines.append(a.verdict("partly", f"{summary}. Post-norm needs it as the papers say; "
                           f"differs from the papers for: {', '.join(wrong)}."))
  else:
    lines.append(a.verdict(False, f"{summary}. Differs from the papers for: "
                           f"{', '.join(wrong)}."))
  hurt = [f"{p} (at {', '.join(f'{lr:g}' for lr in costly[p])})" for p in needs if costly[p]]
  lines += ["", "Final loss, a stricter test than the claim's: dropping warm-up costs more than "
            f"{LOSS_MARGIN} nats/token with 95% confidence for "
            + ("; ".join(hurt) if hurt else "no placement at any LR")
            + ". (Wortsman et al. 2023 find that warm-up lowers the LR sensitivity of pre-norm "
            "models too.)"]
  return lines
