"""Study 2: per-layer gradient norms at initialization, 12 layers (Xiong et al. 2020, Fig. 3).

  python launch.py --mode=sweep --sweep=experiments/grad_profile.py:cpu \
      --sweep_dir=runs/studies/grad_profile --parallel=2

Every placement, 12 layers, 3 seeds, one step at init; the report's per-layer diagnostics
profile is the figure.
"""

from experiments.presets import AT_INIT, PLACEMENTS, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Fig. 3: at initialization the per-layer gradient norm of "
         "post-norm grows toward the output layer; pre-norm's is nearly flat across layers.")


def get_sweep(size: str = "cpu"):
  return product(preset(SIZES, size), [AT_INIT], [{"model.num_layers": 12}],
                 {"model.norm_placement": PLACEMENTS}, {"seed": [0, 1, 2]})

# Xiong et al.'s Fig. 3(a,b) plots the gradient of each layer's second feed-forward matrix.
METRIC = "feed_forward/wo/grad_norm"
FLAT = 1.5  # "nearly flat": the last layer's gradient within a factor 1.5 of the first's


def analyze(runs):
  """Per placement: the per-layer profile of ||dL/dW_2|| at init (mean over seeds) and the
  last-to-first-layer ratio with its 95% CI over seeds."""
  from experiments import analysis as a  # noqa: PLC0415
  placements = list(dict.fromkeys(r.overrides["model.norm_placement"] for r in runs))
  rows, ratios = [], {}
  for p in placements:
    profs = [a.at_init(r, METRIC) for r in a.select(runs, model__norm_placement=p)]
    profs = [q for q in profs if q]
    if not profs:
      continue
    layers = sorted(set.intersection(*(set(q) for q in profs)))
    mean = {l: sum(q[l] for q in profs) / len(profs) for l in layers}
    ratios[p] = [q[layers[-1]] / q[layers[0]] for q in profs]
    shown = [layers[0], layers[len(layers) // 2], layers[-1]]
    rows.append([p] + [f"{mean[l]:.3g}" for l in shown] + [a.ci(ratios[p]), len(profs)])
  first_mid_last = ["layer 0", "middle layer", "last layer"]

  def lo_hi(p):
    m, h = a.mean_ci(ratios[p])
    return m - h, m + h
  post_grows = "post" in ratios and lo_hi("post")[0] > 1.0
  pre_flat = "pre" in ratios and 1 / FLAT <= lo_hi("pre")[0] and lo_hi("pre")[1] <= FLAT
  pre_ratio = a.ci(ratios.get("pre", []))
  if post_grows and pre_flat:
    agreement = a.verdict(True, "Post-norm's gradient grows toward the output (last/first > 1 "
                          f"with 95% confidence) and pre-norm's stays within a factor {FLAT}.")
  elif post_grows:
    agreement = a.verdict(
        None if "pre" not in ratios else False,
        "Post-norm's gradient grows toward the output as claimed, but pre-norm's profile is "
        f"not flat here: its last/first ratio is {pre_ratio} (flat means within a factor "
        f"{FLAT}).")
  else:
    agreement = a.verdict(False, "Post-norm's gradient does not grow toward the output "
                          f"(last/first {a.ci(ratios.get('post', []))}).")
  return [f"Gradient norm of each layer's second feed-forward matrix (`{METRIC}`) at "
          "initialization, mean over seeds, and the last-to-first-layer ratio (mean ± 95% CI "
          "over seeds):", "",
          *a.table(["placement", *first_mid_last, "last / first", "seeds"], rows), "",
          agreement]
