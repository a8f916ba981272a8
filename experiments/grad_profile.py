"""Study 2: per-layer gradient norms at initialization, 12 layers (Xiong et al. 2020, Fig. 3).

  python launch.py --mode=sweep --sweep=experiments/grad_profile.py:cpu \
      --sweep_dir=runs/studies/grad_profile --parallel=2

Every placement, 12 layers, 3 seeds (10 for post and pre), one step at init; the report's
per-layer diagnostics profile is the figure.
"""

import math

from experiments.presets import AT_INIT, PLACEMENTS, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Fig. 3: at initialization the per-layer gradient norm of "
         "post-norm grows toward the output layer; pre-norm's is nearly flat across layers.")


def get_sweep(size: str = "cpu"):
  """Every placement with 3 seeds, and post and pre with 7 more (one batch per seed makes
  the per-layer profile noisy; Xiong et al. average 10 seeds)."""
  base = [preset(SIZES, size), [AT_INIT], [{"model.num_layers": 12}]]
  return (product(*base, {"model.norm_placement": PLACEMENTS}, {"seed": [0, 1, 2]})
          + product(*base, {"model.norm_placement": ["pre", "post"]},
                    {"seed": list(range(3, 10))}))

# Xiong et al.'s Fig. 3(a,b) plots the gradient of each layer's second feed-forward matrix.
METRIC = "feed_forward/wo/grad_norm"
FLAT = 1.5  # "nearly flat": the last layer's gradient within a factor 1.5 of the first's


def analyze(runs):
  """Per placement: the per-layer profile of ||dL/dW_2|| at init (mean over seeds), the
  last-to-first-layer ratio per seed, and the trend fitted to every layer of every seed:
  log ||dL/dW_2|| = c + s * l, reported as the fitted last/first ratio exp(s (L - 1))."""
  from experiments import analysis as a  # noqa: PLC0415
  placements = list(dict.fromkeys(r.overrides["model.norm_placement"] for r in runs))
  rows, trend = [], {}
  for p in placements:
    profs = [a.at_init(r, METRIC) for r in a.select(runs, model__norm_placement=p)]
    profs = [q for q in profs if q]
    if not profs:
      continue
    layers = sorted(set.intersection(*(set(q) for q in profs)))
    mean = {l: sum(q[l] for q in profs) / len(profs) for l in layers}
    ratios = [q[layers[-1]] / q[layers[0]] for q in profs]
    slope, half = a.slope_ci([l for q in profs for l in layers],
                             [math.log(q[l]) for q in profs for l in layers])
    span = layers[-1] - layers[0]
    trend[p] = (math.exp((slope - half) * span), math.exp(slope * span),
                math.exp((slope + half) * span))
    shown = [layers[0], layers[len(layers) // 2], layers[-1]]
    rows.append([p] + [f"{mean[l]:.3g}" for l in shown] + [a.ci(ratios)]
                + [f"{trend[p][1]:.3g} [{trend[p][0]:.3g}, {trend[p][2]:.3g}]", len(profs)])
  post_grows = "post" in trend and trend["post"][0] > 1.0
  pre_flat = "pre" in trend and 1 / FLAT <= trend["pre"][0] and trend["pre"][2] <= FLAT
  if "post" not in trend or "pre" not in trend:
    agreement = a.verdict(None, "Post-norm or pre-norm runs are missing.")
  elif post_grows and pre_flat:
    agreement = a.verdict(True, "Post-norm's gradient grows toward the output and pre-norm's "
                          f"stays within a factor {FLAT} across the layers (fitted trend, 95%).")
  elif post_grows:
    agreement = a.verdict(
        "partly", "Post-norm's gradient grows toward the output as claimed, but pre-norm's is "
        f"not flat here: its fitted last/first ratio is {trend['pre'][1]:.3g} "
        f"[{trend['pre'][0]:.3g}, {trend['pre'][2]:.3g}] (flat: within a factor {FLAT}).")
  else:
    agreement = a.verdict(False, "Post-norm's gradient does not grow toward the output with "
                          f"95% confidence (fitted last/first ratio {trend['post'][1]:.3g} "
                          f"[{trend['post'][0]:.3g}, {trend['post'][2]:.3g}]).")
  return [f"Gradient norm of each layer's second feed-forward matrix (`{METRIC}`) at "
          "initialization: mean over seeds at the first, middle and last layer; the last/first "
          "ratio per seed (mean ± 95% CI); and the trend fitted to every layer of every seed "
          "(log-linear in the layer index; fitted last/first ratio with its 95% interval):", "",
          *a.table(["placement", "layer 0", "middle layer", "last layer", "last / first",
                    "fitted last / first", "seeds"], rows), "",
          agreement]
