"""The studies' verdicts (`analyze` in experiments/*.py) on synthetic runs whose answer is
known: each says "Agrees" when the data follow the paper and not when they do not; the report
shows the verdict, or why there is none."""

import json
import math
import os

import numpy as np
import pytest

from experiments import analysis as a
from experiments import (grad_profile, grad_scale_depth, lr_sensitivity, qk_norm_logits,
                         residual_growth, warmup_stability)
from transformer.sweep import report
from transformer.sweep.points import MANIFEST

LN_V = math.log(259)


def _run(overrides, status="finished", final_loss=2.0, diagnostics=(), num_steps=100):
  """A Run as the report loads it; `diagnostics` is a list of diagnostics rows (dicts)."""
  metrics = {"train": [{"step": 1, "split": "train", "loss": LN_V}],
             "eval": [{"step": num_steps, "split": "eval", "loss": final_loss}],
             "diagnostics": [dict(row, step=i, split="diagnostics")
                             for i, row in enumerate(diagnostics)]}
  if status == "diverged":
    metrics["eval"] = []
  r = report.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                 num_steps, "/nonexistent", metrics)
  r.status = status
  return r


def _layers(metric, values):
  return {f"decoder/layer_{i}/{metric}": v for i, v in enumerate(values)}


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def test_lr_sensitivity_is_wortsmans_formula():
  # Grid means: 1e-3 -> 3.0, 1e-2 -> 2.0 (best), 1e-1 -> mean(ln V clipped diverged, 4.0).
  runs = [_run({a.LR: 1e-3, "seed": s}, final_loss=3.0) for s in (0, 1)]
  runs += [_run({a.LR: 1e-2, "seed": s}, final_loss=2.0) for s in (0, 1)]
  runs += [_run({a.LR: 1e-1, "seed": 0}, status="diverged"),
           _run({a.LR: 1e-1, "seed": 1}, status="collapsed", final_loss=9.0)]  # clipped at ln V
  expected = np.mean([3.0 - 2.0, 0.0, LN_V - 2.0])
  assert a.lr_sensitivity(runs) == pytest.approx(expected)
  assert a.per_seed(runs, a.lr_sensitivity) == pytest.approx([expected, expected])
  assert a.largest_stable_lr(runs) == 1e-2


def test_largest_stable_lr_counts_up_from_the_best_lr():
  """Best at 1e-3 (loss 2.0), one seed collapsed at 1e-2, every seed fine at 1e-1: stable up
  to 1e-3, not 'up to 1e-1'. A slow, collapsed-looking run below the best LR (1e-4) is not
  instability; nothing is stable when the best LR's own runs fail."""
  def run(lr, s):
    bad = (lr == 1e-2 and s == 1) or (lr == 1e-4 and s == 0)
    return _run({a.LR: lr, "seed": s}, status="collapsed" if bad else "finished",
                final_loss={1e-4: 3.3, 1e-3: 2.0, 1e-2: 3.3, 1e-1: 2.5}[lr])
  runs = [run(lr, s) for lr in (1e-4, 1e-3, 1e-2, 1e-1) for s in range(3)]
  assert a.largest_stable_lr(runs) == 1e-3
  runs = [r for r in runs if r.overrides[a.LR] != 1e-3]  # now 1e-1 is best: all fine there
  assert a.largest_stable_lr(runs) == 1e-1
  runs = [_run({a.LR: lr, "seed": s}, status="collapsed" if lr == 1e-2 else "finished",
               final_loss=2.0 if lr == 1e-2 else 3.0) for lr in (1e-3, 1e-2) for s in range(2)]
  assert a.largest_stable_lr(runs) is None  # the best LR (lowest loss) collapsed


def _depth_runs(post_exponent, pre_exponent, activation="relu"):
  """Last-layer gradients 1.7 L^b, seeds at factors e^0.02, e^-0.02, 1 (the fit is exact)."""
  act = {"model.activation": activation} if activation else {}
  runs = []
  for p, b in (("post", post_exponent), ("pre", pre_exponent)):
    for depth in (2, 4, 8, 16, 32):
      for seed in range(3):
        g = 1.7 * depth ** b * math.exp((0.02, -0.02, 0.0)[seed])
        values = [1.0] * (depth - 1) + [g]
        runs.append(_run({a.PLACEMENT: p, "model.num_layers": depth, **act, "seed": seed},
                         diagnostics=[_layers("feed_forward/wo/grad_norm", values)]))
  return runs


def test_grad_scale_depth_fits_the_exponents():
  lines = grad_scale_depth.analyze(_depth_runs(0.0, -0.5))
  assert _verdict(lines).startswith("**Agrees.**") and "Both fitted" in _verdict(lines)
  text = "\n".join(lines)
  post = float(text.split("post b = ")[1].split(" ")[0].strip("*"))
  pre = float(text.split("pre b = ")[1].split(" ")[0].strip("*"))
  assert post == pytest.approx(0.0, abs=1e-3) and pre == pytest.approx(-0.5, abs=1e-3)
  lines = grad_scale_depth.analyze(_depth_runs(-0.25, -0.3))
  assert _verdict(lines).startswith("**Partly agrees.** In direction")  # not in the rates
  lines = grad_scale_depth.analyze(_depth_runs(-0.5, 0.0))  # the other way round
  assert _verdict(lines).startswith("**Disagrees.**")


def test_grad_scale_depth_judges_relu_and_states_gelu():
  lines = grad_scale_depth.analyze(_depth_runs(0.0, -0.5)
                                   + _depth_runs(0.1, -0.25, activation=None))
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "- GELU: **post b = 0.1" in text and "**pre b = -0.25" in text
  assert "With our default GELU feed-forward net the same test partly agrees." in text
  lines = grad_scale_depth.analyze(_depth_runs(0.0, -0.5, activation=None))
  assert _verdict(lines).startswith("**Inconclusive.**")  # the paper's ReLU not measured


def _profile_runs(post_profile, pre_profile, activation="relu"):
  act = {"model.activation": activation} if activation else {}
  return [_run({a.PLACEMENT: p, **act, "seed": s},
               diagnostics=[_layers("feed_forward/wo/grad_norm",
                                    np.asarray(prof) * (1 + 0.01 * s))])
          for p, prof in (("post", post_profile), ("pre", pre_profile)) for s in range(3)]


def test_grad_profile_checks_growth_and_flatness():
  grows, flat, falls = np.linspace(1, 3, 12), np.full(12, 2.0), np.linspace(3, 1, 12)
  assert _verdict(grad_profile.analyze(_profile_runs(grows, flat))).startswith("**Agrees.**")
  assert _verdict(grad_profile.analyze(_profile_runs(grows, falls))).startswith(
      "**Partly agrees.**")
  assert _verdict(grad_profile.analyze(_profile_runs(flat, flat))).startswith("**Disagrees.**")


def test_grad_profile_judges_the_papers_relu_and_states_gelu():
  """The verdict is the ReLU runs' (Xiong et al.'s FFN); runs without an activation override
  are the default GELU, judged in a sentence of their own."""
  grows, flat = np.linspace(1, 3, 12), np.full(12, 2.0)
  runs = _profile_runs(grows, flat) + _profile_runs(flat, flat, activation=None)
  lines = grad_profile.analyze(runs)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "With our default GELU feed-forward net the same test disagrees" in "\n".join(lines)
  assert _verdict(grad_profile.analyze(_profile_runs(grows, flat, activation=None))).startswith(
      "**Inconclusive.**")  # no ReLU runs: nothing to judge the paper's claim on


def test_residual_growth_checks_linearity_and_constancy():
  def runs(pre_sq):
    return ([_run({a.PLACEMENT: "pre", "seed": s},
                  diagnostics=[_layers("residual_rms", np.sqrt(pre_sq) * (1 + 0.01 * s))])
             for s in range(3)]
            + [_run({a.PLACEMENT: "post", "seed": s},
                    diagnostics=[_layers("residual_rms", np.ones(24))]) for s in range(3)])
  layers = np.arange(24)
  lines = residual_growth.analyze(runs(1 + 0.8 * layers))
  assert _verdict(lines).startswith("**Agrees.**") and "**0.8" in "\n".join(lines)
  assert _verdict(residual_growth.analyze(runs(np.exp(0.3 * layers)))).startswith(
      "**Disagrees.**")


def _warmup_runs(needs_warmup):
  runs = []
  for p in warmup_stability.PLACEMENTS:
    for w in (0, 24):
      for lr in (1e-3, 1e-2):
        for s in range(3):
          bad = w == 0 and lr == 1e-2 and p in needs_warmup
          runs.append(_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
                           status="collapsed" if bad else "finished",
                           final_loss=(LN_V - 0.01) if bad else 2.0 + 0.01 * s))
  return runs


def test_warmup_stability_names_who_needs_warmup():
  lines = warmup_stability.analyze(_warmup_runs({"post"}))
  assert _verdict(lines).startswith("**Agrees.**")
  assert "| post | 0.001 | 0.01 |" in "\n".join(lines)
  assert "costs more than 0.05 nats/token with 95% confidence for post (at 0.01)" in "\n".join(
      lines)  # the collapsed runs' loss: ln V - 0.01 against 2.0
  lines = warmup_stability.analyze(_warmup_runs({"post", "pre"}))
  assert _verdict(lines).startswith("**Partly agrees.**") and "for: pre." in _verdict(lines)
  lines = warmup_stability.analyze(_warmup_runs(set()))
  assert _verdict(lines).startswith("**Disagrees.**")


def test_lr_sensitivity_verdict_compares_post_with_pre():
  def runs(unstable):
    out = []
    for p in ("pre", "post"):
      for lr in (1e-3, 1e-2, 1e-1):
        for s in range(3):
          diverged = p == unstable and lr == 1e-1
          out.append(_run({a.PLACEMENT: p, a.LR: lr, "seed": s},
                          status="diverged" if diverged else "finished",
                          final_loss=2.0 + abs(math.log10(lr) + 2) * 0.1 + 0.01 * s))
    return out
  assert _verdict(lr_sensitivity.analyze(runs("post"))).startswith("**Agrees.**")
  assert _verdict(lr_sensitivity.analyze(runs("pre"))).startswith("**Disagrees.**")


def test_qk_norm_verdict_reads_the_max_attention_logit():
  def runs(logit_off_at_high):
    out = []
    for qk in (False, True):
      for lr in (1e-3, 1e-1):
        for s in range(3):
          logit = (logit_off_at_high if (not qk and lr == 1e-1) else 5.0) + 0.1 * s
          diverged = not qk and lr == 1e-1 and logit_off_at_high > 50
          rows = [_layers("self_attention/attn_max_logit", [1.0, logit]),
                  _layers("self_attention/attn_max_logit", [1.0, logit / 2])]
          out.append(_run({"model.qk_norm": qk, a.LR: lr, "seed": s}, diagnostics=rows,
                          status="diverged" if diverged else "finished",
                          final_loss=2.0 + 0.01 * s))
    return out
  lines = qk_norm_logits.analyze(runs(100.0))
  assert _verdict(lines).startswith("**Agrees.**"), lines
  assert "100 ± " in "\n".join(lines)  # the max over layers and steps, mean over seeds
  assert _verdict(qk_norm_logits.analyze(runs(5.0))).startswith("**Disagrees.**")


def test_report_shows_the_sweep_files_verdict_or_why_not(tmp_path):
  run_dir = tmp_path / "sweep" / "seed=0"
  os.makedirs(run_dir)
  with open(run_dir / "metrics.jsonl", "w") as f:
    f.write(json.dumps({"step": 5, "split": "eval", "loss": 1.5}) + "\n")
  for body, expected in (
      ("def analyze(runs):\n  return [f'{len(runs)} run, loss {runs[0].final[\"loss\"]}']\n",
       "## Verdict\n\n1 run, loss 1.5"),
      ("def analyze(runs):\n  raise ValueError('no rows')\n",
       "The analysis failed (ValueError: no rows)")):
    (tmp_path / "study.py").write_text("def get_sweep():\n  return [{'seed': 0}]\n" + body)
    with open(tmp_path / "sweep" / MANIFEST, "w") as f:
      json.dump({"sweep_file": str(tmp_path / "study.py") + ":cpu", "config": "c.py",
                 "overrides": [], "points": [{"name": "seed=0", "overrides": {"seed": 0},
                                              "num_steps": 5}]}, f)
    text = open(report.write_report(str(tmp_path / "sweep"))).read()
    assert expected in text


def test_qk_norm_sensitivity_is_compared_paired_by_seed():
  """Seeds that spread the LR sensitivity widely (unpaired intervals overlap) but lower it by
  0.05 with qk-norm in every seed: the paired comparison sees it."""
  out = []
  for qk in (False, True):
    for lr in (1e-3, 1e-1):
      for s in range(3):
        logit = 100.0 if (not qk and lr == 1e-1) else 5.0
        loss = 2.0 if lr == 1e-3 else 2.0 + (0.2 if qk else 0.3) + 0.2 * s
        out.append(_run({"model.qk_norm": qk, a.LR: lr, "seed": s}, final_loss=loss,
                        diagnostics=[_layers("self_attention/attn_max_logit", [1.0, logit])]))
  lines = qk_norm_logits.analyze(out)
  assert "without minus with qk-norm 0.05 ± 0" in "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
