"""Study 1: gradient scale at initialization against depth (Xiong et al. 2020, Theorem 1).

  python launch.py --mode=sweep --sweep=experiments/grad_scale_depth.py:cpu \
      --sweep_dir=runs/studies/grad_scale_depth --parallel=2

Post vs pre, depths 2..32, 3 seeds; one step at init with per-layer diagnostics. The report's
"feed_forward/wo/grad_norm vs model.num_layers" plot (last layer, log-log) is the figure to
compare with the theorem.
"""

import math

from experiments.presets import AT_INIT, SIZES
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020, Theorem 1: at initialization the gradient norm of the last "
         "layer's second feed-forward matrix is roughly independent of depth L for post-norm "
         "and shrinks like 1/sqrt(L) for pre-norm.")
# Plotted (last layer, at init) against depth: the gradient norm of the second feed-forward
# matrix W_2 (the diagnostics name it `decoder/layer_<i>/feed_forward/wo/grad_norm`).
REPORT_DIAGNOSTICS = ("feed_forward/wo/grad_norm",)


def get_sweep(size: str = "cpu"):
  return product(preset(SIZES, size), [AT_INIT],
                 {"model.norm_placement": ["post", "pre"]},
                 {"model.num_layers": [2, 4, 8, 16, 32]},
                 {"seed": [0, 1, 2]})


def analyze(runs):
  """Fits ||dL/dW_2|| of the last layer ~ L^b on log-log over every seed and depth, per
  placement; the theorem's exponents are b = 0 (post) and b = -1/2 (pre)."""
  from experiments import analysis as a  # noqa: PLC0415
  metric = REPORT_DIAGNOSTICS[0]
  depths = sorted({r.overrides["model.num_layers"] for r in runs})
  grads, fits = {}, {}
  for placement in ("post", "pre"):
    xs, ys = [], []
    for r in a.select(runs, model__norm_placement=placement):
      prof = a.at_init(r, metric)
      if prof:
        g = prof[max(prof)]
        grads.setdefault((placement, r.overrides["model.num_layers"]), []).append(g)
        xs.append(math.log(r.overrides["model.num_layers"]))
        ys.append(math.log(g))
    fits[placement] = a.slope_ci(xs, ys)
  # Lemma 3's mechanism: the final norm divides the gradient by the norm of its input, the
  # last residual state x_L; if that is the whole story, ||dL/dW_2|| * rms(x_L) is flat in L.
  xs, rms_ys, prod_ys = [], [], []
  for r in a.select(runs, model__norm_placement="pre"):
    g, rms = a.at_init(r, metric), a.at_init(r, "residual_rms")
    if g and rms:
      xs.append(math.log(r.overrides["model.num_layers"]))
      rms_ys.append(math.log(rms[max(rms)]))
      prod_ys.append(math.log(g[max(g)] * rms[max(rms)]))
  rms_fit, prod_fit = a.slope_ci(xs, rms_ys), a.slope_ci(xs, prod_ys)
  rows = [[L] + [a.ci(grads.get((p, L), [])) for p in ("post", "pre")] for L in depths]
  (bp, hp), (bq, hq) = fits["post"], fits["pre"]
  exact = a.contains(bp, hp, 0.0) and a.contains(bq, hq, -0.5)
  separated = bq + hq < bp - hp
  if not (math.isfinite(bp) and math.isfinite(bq)):
    agreement = a.verdict(None, "Too few finished runs to fit both exponents.")
  elif exact:
    agreement = a.verdict(True, "Both fitted exponents' 95% intervals contain the theorem's.")
  elif separated:
    agreement = a.verdict(
        "partly", "In direction: pre-norm's last-layer gradient falls with depth and post-norm's "
        "does not fall as fast (the exponents' intervals do not overlap), but at least one "
        "interval misses the theorem's exponent (0 or -1/2); see the numbers.")
  else:
    agreement = a.verdict(False, "Pre-norm's exponent is not below post-norm's.")
  return [
      f"Gradient norm of the last layer's second feed-forward matrix (`{metric}`) at "
      "initialization, mean ± 95% CI over seeds:", "",
      *a.table(["layers", "post", "pre"], rows), "",
      "Fitted exponent b in ||dL/dW_2|| ∝ L^b (least squares on log-log over every seed and "
      f"depth, 95% CI): **post b = {a.fmt(bp, hp)}** (theorem: 0), "
      f"**pre b = {a.fmt(bq, hq)}** (theorem: -0.5).", "",
      "Pre-norm, Lemma 3's mechanism (the final norm divides the gradient by the norm of its "
      f"input x_L): rms(x_L) grows like L^{a.fmt(*rms_fit)}; if that division were the only "
      "depth dependence, ||dL/dW_2|| * rms(x_L) would be flat in L; it goes like "
      f"L^{a.fmt(*prod_fit)} ("
      + ("flat" if a.contains(*prod_fit, 0.0) else "not flat") + " at 95%).", "", agreement]
