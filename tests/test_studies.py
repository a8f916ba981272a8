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
from transformer.errors import ConfigError
from transformer.report import write as report
from transformer.report import summary as report_summary
from transformer.report import runs as report_runs
from transformer.sweep import points as sweep_points
from transformer.report import figures as report_figures
from transformer.report import follow_ups
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
  r = report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
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


def test_the_lr_table_names_a_best_lr_at_the_grid_edge():
  """Issue 29: a report shows whether each optimum lies inside the grid. A setting whose best
  LR is its smallest or largest is named; one of two LRs is not judged (an edge by
  construction)."""
  from transformer.report import stats
  loss = {"inside": {1e-3: 3.0, 1e-2: 2.0, 1e-1: 2.5}, "low": {1e-3: 2.0, 1e-2: 2.5, 1e-1: 3.0},
          "pair": {1e-3: 2.0, 1e-2: 2.5}}
  runs = [_run({"w": w, a.LR: lr, "seed": s}, final_loss=v)
          for w, d in loss.items() for lr, v in d.items() for s in (0, 1)]
  text = "\n".join(stats.lr_sensitivity_table(runs, a.LR, ["w", a.LR]))
  assert "not located" in text and "low (0.001, its smallest)" in text
  assert "inside (" not in text and "pair (" not in text
  inside = [r for r in runs if r.overrides["w"] == "inside"]
  assert "Every best LR lies inside the LR values its setting ran (1 setting of" in "\n".join(
      stats.lr_sensitivity_table(inside, a.LR, ["w", a.LR]))


def test_a_best_lr_compares_the_seeds_every_lr_ran():
  """Seeds 3 and 4 run at one LR only (long_runs' pre-norm at 3e-3) must not choose the best
  LR: over seeds 0-2, 3e-3 (2.0) beats 5e-3 (2.1), but pooling seeds 3 and 4 (3.0) into
  3e-3's mean (2.4 over 5 seeds) would make 5e-3 the best, at the grid's edge, though every
  seed that ran both LRs is better at 3e-3. The table says which seeds it left out; the
  studies' `best_lr` and the diagnostics figures choose the same best LR, the figures drawing
  every seed run there."""
  from transformer.report import diagnostics_figures, stats
  runs = [_run({a.LR: lr, "seed": s}, final_loss=v)
          for lr, v in ((1e-3, 2.5), (3e-3, 2.0), (5e-3, 2.1)) for s in range(3)]
  runs += [_run({a.LR: 3e-3, "seed": s}, final_loss=3.0) for s in (3, 4)]
  kept, extra = stats.seeds_every_lr_ran(runs, a.LR)
  assert extra == [3, 4] and sorted({r.seed for r in kept}) == [0, 1, 2]
  text = "\n".join(stats.lr_sensitivity_table(runs, a.LR, [a.LR]))
  assert "| 0.003 | 2.0000 |" in text
  assert "Every best LR lies inside the LR values its setting ran" in text
  assert "every LR of the setting (a seed run at some of its LRs only would compare seed " \
      "sets, not LRs): all runs (seeds 3, 4 left out)." in text
  assert a.best_lr(runs) == 3e-3  # the studies' rule, the same
  drawn = diagnostics_figures.at_best_lr(runs)
  assert {r.overrides[a.LR] for r in drawn} == {3e-3} and len(drawn) == 5
  even = [r for r in runs if r.seed < 3]
  assert stats.seeds_every_lr_ran(even, a.LR) == (even, [])
  assert "left out" not in "\n".join(stats.lr_sensitivity_table(even, a.LR, [a.LR]))


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
  assert _verdict(lines).startswith("**Agrees.**") and "Both fitted" not in _verdict(lines)
  assert ("whose interval contains the theorem's 0; pre-norm -0.5 ± " in _verdict(lines)
          and "whose interval contains the theorem's -1/2 and lies wholly below post-norm's."
          in _verdict(lines))  # issue 68: what the fits found, with the numbers
  text = "\n".join(lines)
  post = float(text.split("post b = ")[1].split(" ")[0].strip("*"))
  pre = float(text.split("pre b = ")[1].split(" ")[0].strip("*"))
  assert post == pytest.approx(0.0, abs=1e-3) and pre == pytest.approx(-0.5, abs=1e-3)
  lines = grad_scale_depth.analyze(_depth_runs(-0.25, -0.3))
  assert _verdict(lines).startswith("**Partly agrees.** Fitted exponent b")  # not in the rates
  assert ("post-norm -0.25 ± " in _verdict(lines) and "misses the theorem's 0" in _verdict(lines)
          and "misses the theorem's -1/2 and lies wholly below post-norm's." in _verdict(lines))
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
                    diagnostics=[{**_layers("residual_rms", np.ones(24)),
                                  **_layers("feed_forward/out_rms", np.full(24, 0.7 + 0.01 * s))}])
               for s in range(3)])
  layers = np.arange(24)
  lines = residual_growth.analyze(runs(1 + 0.8 * layers))
  assert _verdict(lines).startswith("**Agrees.**") and "**0.8" in "\n".join(lines)
  # Issue 68: the verdict says what the tests found, with the numbers: per seed the slope is
  # 0.8 (1 + 0.01 s)^2 (float64 NumPy here), post-norm's estimated sum 1 + r^2 is flat.
  slopes = np.array([0.8 * (1 + 0.01 * s) ** 2 for s in range(3)])
  half = 4.302652729911275 * slopes.std(ddof=1) / np.sqrt(3)
  assert _verdict(lines).startswith(
      f"**Agrees.** Pre-norm's ||x_l||^2/d against l: slope {slopes.mean():.3g} ± {half:.2g} "
      "per layer, R^2 1.000..1.000: linear by the test; post-norm's sum before the norm")
  assert "constant by the test (inside ±0.05 and below pre-norm's)." in _verdict(lines)
  assert "grows linearly with depth" not in _verdict(lines)  # the claim's words
  assert _verdict(residual_growth.analyze(runs(np.exp(0.3 * layers)))).startswith(
      "**Disagrees.**")
  # Post-norm runs that recorded only the post-block RMS (1 by construction): not testable.
  only_rms = [r for r in runs(1 + 0.8 * layers) if r.overrides[a.PLACEMENT] == "pre"] + [
      _run({a.PLACEMENT: "post", "seed": s}, diagnostics=[_layers("residual_rms", np.ones(24))])
      for s in range(3)]
  assert _verdict(residual_growth.analyze(only_rms)).startswith("**Partly agrees.**")


def _warmup_runs(gap, lrs=(1e-3, 1e-2), seeds=3):
  """Post/pre/deepnorm/admin with and without warm-up: every run ends at 2.0 (+0.01 per seed)
  except `gap[(placement, warmup)]` nats higher at the largest LR."""
  runs = []
  for p in warmup_stability.PLACEMENTS:
    for w in (0, 24):
      for lr in lrs:
        for s in range(seeds):
          extra = gap.get((p, w), 0.0) if lr == lrs[-1] else 0.0
          runs.append(_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
                           final_loss=2.0 + 0.01 * s + extra))
  return runs


def test_stability_is_a_curve_over_the_tolerance_and_flips_at_a_known_x():
  """Post without warm-up ends 0.4 nats above its best at the top LR, with warm-up 0.1: it
  needs warm-up for 0.1 <= X < 0.4 and not outside; the breakpoints are found exactly."""
  runs = _warmup_runs({("post", 0): 0.4, ("post", 24): 0.1})
  m = warmup_stability.measure(runs)
  assert m["largest"][("post", 0)][0.3] == 1e-3 and m["largest"][("post", 24)][0.3] == 1e-2
  assert m["largest"][("post", 0)][0.5] == 1e-2  # within 0.5 of the best: trained
  assert m["needs"]["post"] and not m["needs"]["pre"]
  (lo, hi), = m["flips"]["post"]
  assert lo == pytest.approx(0.1) and hi == pytest.approx(0.4)
  lines = warmup_stability.analyze(runs)
  text = "\n".join(lines)
  assert "X in [0.1, 0.4)" in text
  # 3/3 against 0/3 seeds: Fisher p = 0.1, described only (a count test is never the call).
  assert "0/3 seeds trained without warm-up vs 3/3 with, Fisher p = 0.10" in text
  # The calls read each setting at its best LR (1e-3 here), where dropping warm-up costs 0 for
  # every placement: both intervals [0, 0] lie below the margin, post's on the other side.
  assert _verdict(lines).startswith("**Partly agrees.** Post-norm does not need warm-up: its "
                                    "cost of dropping it lies below the margin 0.05 (+0.000 ± "
                                    "0.000); pre-norm does not need warm-up")
  assert "post-norm's cost minus pre-norm's +0.000 ± 0.000 nats/token" in _verdict(lines)
  # At a tolerance above the gap both settings train: the description flips to "does not need".
  m5 = warmup_stability.measure(_warmup_runs({("post", 0): 0.4, ("post", 24): 0.1}))
  assert not warmup_stability._needs(m5["sets"], "post", 0, 24, 0.45)


def _costly_runs(cost, lrs=(1e-3, 3e-3, 1e-2)):
  """Every setting's loss is 2.0 + 0.1 per LR step + 0.01 per seed; without warm-up a
  placement pays `cost[p](seed)` more at every LR."""
  return [_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
               final_loss=2.0 + 0.1 * i + 0.01 * s + (cost.get(p, lambda s: 0.0)(s) if w == 0
                                                      else 0.0))
          for p in warmup_stability.PLACEMENTS for w in (0, 24)
          for i, lr in enumerate(lrs) for s in range(3)]


T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


@pytest.mark.parametrize("post, pre, word", [
    ((0.3, 0.31, 0.32), (0.02,) * 3, "**Agrees.**"),  # post above the margin, pre below
    ((0.3, 0.31, 0.32), (0.3, 0.31, 0.32), "**Partly agrees.**"),  # both pay: pre above
    ((0.3, 0.31, 0.32), (0.0, 0.05, 0.1), "**Partly agrees.**"),  # pre across the margin
    ((0.0, 0.05, 0.1), (0.02,) * 3, "**Partly agrees.**"),  # post across, pre below
    ((0.02,) * 3, (0.3, 0.31, 0.32), "**Disagrees.**"),  # each on the other side
    ((0.0, 0.05, 0.1), (0.0, 0.05, 0.1), "**Inconclusive.**")])  # neither resolved
def test_warmup_call_is_two_halves_each_against_the_margin(post, pre, word):
  """Issue 68: post-norm's cost of dropping warm-up above 0.05 and pre-norm's below it, each
  its own call. Post and pre both paying 0.3 gave post-minus-pre 0 (below the margin:
  Disagrees) under the old relative call; now post's half holds and pre's does not."""
  lines = warmup_stability.analyze(_costly_runs({"post": lambda s: post[s],
                                                 "pre": lambda s: pre[s]}))
  assert _verdict(lines).startswith(word)


def test_warmup_halves_state_each_interval_and_keep_the_old_statistic_described():
  lines = warmup_stability.analyze(_costly_runs({"post": lambda s: 0.3 + 0.01 * s,
                                                 "pre": lambda s: (0.0, 0.05, 0.1)[s]}))
  post = T_975_2 * 0.01 / 3 ** 0.5  # sd 0.01 over 3 seeds
  pre = T_975_2 * 0.05 / 3 ** 0.5
  mixed = T_975_2 * float(np.std([0.3, 0.26, 0.22], ddof=1)) / 3 ** 0.5
  assert _verdict(lines).startswith(
      f"**Partly agrees.** Post-norm needs warm-up: its cost of dropping it lies above the "
      f"margin 0.05 (+0.310 ± {post:.3f}); pre-norm is not resolved: its cost of dropping it "
      f"lies across the margin 0.05 (+0.050 ± {pre:.3f}) (nats/token")
  assert (f"Described, not called: post-norm's cost minus pre-norm's +0.260 ± {mixed:.3f} "
          "nats/token;") in _verdict(lines)
  study = warmup_stability
  assert set(study.REGISTRATION) == {"post-norm's cost of dropping warm-up above the margin",
                                     "pre-norm's cost of dropping warm-up below the margin"}
  assert all(v.startswith("post hoc: replaces issue 46's call") and
             v.endswith("its check on new data: seeds 3 and 4 read alone (a sign count over 2 "
                        "seeds, not a test), beside the verdict")
             for v in study.REGISTRATION.values())


def test_fisher_and_tiers():
  assert a.fisher_p(3, 3, 0, 3) == pytest.approx(0.1)
  assert a.best_possible_p(5) == pytest.approx(1 / 126)
  tiers = a.separated_tiers({"a": [1.0, 1.1, 0.9], "b": [1.05, 1.0, 1.1],
                             "c": [3.0, 3.1, 2.9], "d": [3.0, 2.95, 3.1]})
  assert tiers == [["a", "b"], ["c", "d"]] or tiers == [["b", "a"], ["c", "d"]]
  assert a.tiers_text([["a", "b"], ["c"]]) == "{a, b} < c"


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
  # The call is paired by seed against a margin: post's top LR 0.12 (+0.02 s) worse than
  # pre's gives a trimmed difference (over 1e-1 alone, LOW = 2 of 3 LRs) of 0.12 + 0.02 s.
  close = [r if not (r.overrides[a.PLACEMENT] == "post" and r.overrides[a.LR] == 1e-1) else
           _run(dict(r.overrides), final_loss=2.1 + 0.12 + 0.03 * r.seed)
           for r in runs(None)]
  half = 4.302652729911275 * 0.02 / math.sqrt(3)
  verdict = _verdict(lr_sensitivity.analyze(close))
  assert verdict.startswith("**Inconclusive.**"), verdict
  assert (f"post-norm's trimmed LR sensitivity minus pre-norm's: +0.140 ± {half:.3f} "
          "nats/token (3 seeds); its 95% interval lies across the margin 0.1") in verdict


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
  assert ("LR sensitivity without qk-norm minus with it: +0.050 ± 0.000 nats/token (3 seeds); "
          "its 95% interval lies above the margin 0") in "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")


def test_grad_profile_interval_is_over_seeds_not_layers():
  """Twelve layers of noise-free profiles: pooling layers x seeds gives a tight interval even
  when the seeds disagree; the per-seed fit's interval spans the seeds' spread."""
  layers = np.arange(12)
  slopes = (0.02, 0.10, 0.06)  # per seed
  profs = [{int(l): float(np.exp(s * l)) for l in layers} for s in slopes]
  lo, mid, hi = grad_profile._trend(profs)
  fits = [math.exp(s * 11) for s in slopes]
  assert mid == pytest.approx(math.exp(np.mean([math.log(f) for f in fits])))
  assert lo < min(fits) and hi > max(fits)  # 3 fits, t over 2 degrees of freedom


def test_residual_growth_post_check_can_fail():
  """The post-norm half reads the FFN branch's output RMS (the sum before the norm): growing
  branch outputs fail it, although the post-block residual RMS is 1 by construction."""
  def runs(post_ffn):
    pre = [_run({a.PLACEMENT: "pre", "seed": s},
                diagnostics=[_layers("residual_rms", np.sqrt(1 + 0.8 * np.arange(24))
                                     * (1 + 0.01 * s))]) for s in range(3)]
    post = [_run({a.PLACEMENT: "post", "seed": s},
                 diagnostics=[{**_layers("residual_rms", np.ones(24)),
                               **_layers("feed_forward/out_rms", post_ffn * (1 + 0.01 * s))}])
            for s in range(3)]
    return pre + post
  assert _verdict(residual_growth.analyze(runs(np.full(24, 0.7)))).startswith("**Agrees.**")
  lines = residual_growth.analyze(runs(np.linspace(0.5, 3.0, 24)))
  assert _verdict(lines).startswith("**Disagrees.**") and "not constant" in _verdict(lines)


def test_plots_draw_collapsed_and_diverged_runs_as_marks():
  runs = []
  for p in ("pre", "post"):
    for lr in (1e-3, 1e-2, 1e-1):
      for s in range(2):
        status = ("diverged" if (p, lr) == ("post", 1e-1) else
                  "collapsed" if (p, lr) == ("post", 1e-2) else "finished")
        r = _run({a.PLACEMENT: p, a.LR: lr, "seed": s}, status=status,
                 final_loss=3.3 if status == "collapsed" else 2.0 + s * 0.01)
        r.metrics["train"].append({"step": 50, "split": "train", "loss": 2.5})
        if status != "diverged":
          r.metrics["eval"][-1]["bits_per_byte"] = r.metrics["eval"][-1]["loss"] * 1.44
        runs.append(r)
  fields = [a.PLACEMENT, a.LR]
  fig = report_figures.final_vs_figure(runs, a.LR, fields, "loss")
  arts = [l for ax in fig.axes for l in ax.lines]
  collapsed = [l for l in arts if l.get_gid() == "collapsed"]
  diverged = [l for l in arts if l.get_gid() == "diverged"]
  assert collapsed and all(l.get_markerfacecolor() == "none" for l in collapsed)
  assert diverged and all(l.get_marker() == "x" for l in diverged)
  ax = next(ax for ax in fig.axes if any(l.get_gid() == "diverged" for l in ax.lines))
  d = next(l for l in ax.lines if l.get_gid() == "diverged")
  assert list(d.get_ydata()) == [ax.get_ylim()[1]] * 2 and not d.get_clip_on()
  assert len(fig.axes) >= 2  # one panel per placement
  legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend())
  assert legend.get_bbox_to_anchor().x0 > 0  # placed outside the axes, to the right
  fig = report_figures.curves_figure(runs, "loss")
  assert any(l.get_gid() == "collapsed" for ax in fig.axes for l in ax.lines)
  assert any(l.get_gid() == "diverged" for ax in fig.axes for l in ax.lines)


def test_a_field_only_some_runs_set_is_plotted_without_empty_panels_or_crowded_ticks():
  """norms: DyT's alpha_0 is swept over 0.05..0.5 only for DyT. Its figure has the DyT panel
  alone (LayerNorm's would be empty), with the swept values as the x tick labels and no
  labelled minor ticks (matplotlib labels them on a log axis spanning under two decades, and
  they overlapped)."""
  runs = []
  for norm, alphas in (("layernorm", [None]), ("dyt", [0.05, 0.1, 0.2, 0.5])):
    for alpha in alphas:
      for lr in (1e-3, 1e-2):
        for s in range(2):
          o = {"model.norm": norm, a.LR: lr, "seed": s}
          if alpha is not None:
            o["model.dyt_alpha_init"] = alpha
          runs.append(_run(o, final_loss=2.0 + 0.01 * s))
  fields = ["model.norm", a.LR, "model.dyt_alpha_init"]
  fig = report_figures.final_vs_figure(runs, "model.dyt_alpha_init", fields, "loss")
  shown = [ax for ax in fig.axes if ax.axison]
  assert [ax.get_title() for ax in shown] == ["norm=dyt"]
  ax = shown[0]
  assert ax.get_xscale() == "log"
  assert [t.get_text() for t in ax.get_xticklabels()] == ["0.05", "0.1", "0.2", "0.5"]
  fig.canvas.draw()
  assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
  # LayerNorm leaves alpha_0 unset, as every LayerNorm run does: no "dyt_alpha_init=config"
  # in its panel title or legend entry.
  fig = report_figures.curves_figure(runs, "loss")
  assert {ax.get_title() for ax in fig.axes if ax.axison} == {
      "norm=layernorm", *(f"norm=dyt, dyt_alpha_init={x:g}" for x in (0.05, 0.1, 0.2, 0.5))}
  fig = report_figures.final_vs_figure(runs, a.LR, fields, "loss")
  labels = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts}
  assert "mean over healthy seeds" in labels and not any("config" in t for t in labels)


def test_a_far_off_group_is_drawn_off_scale_not_flattening_the_others():
  """A placement ending at 150 nats (a model without any norm) beside ones near 2: the shared
  y stops at twice the median and the far-off runs are triangles on the top edge."""
  runs = []
  for p, loss in (("pre", 2.0), ("post", 2.2), ("none", 150.0)):
    for lr in (1e-3, 1e-2):
      for s in range(2):
        r = _run({a.PLACEMENT: p, a.LR: lr, "seed": s}, final_loss=loss + 0.01 * s)
        r.metrics["train"].append({"step": 50, "split": "train", "loss": loss + 0.5})
        runs.append(r)
  fig = report_figures.final_vs_figure(runs, a.LR, [a.PLACEMENT, a.LR], "loss")
  top = fig.axes[0].get_ylim()[1]
  finals = sorted(r.final["loss"] for r in runs)
  assert top == pytest.approx(2 * (finals[5] + finals[6]) / 2)
  off = [l for ax in fig.axes for l in ax.lines if l.get_gid() == "off_scale"]
  assert off and all(list(l.get_ydata()) == [top] * len(l.get_xdata()) for l in off)
  assert sum(len(l.get_xdata()) for l in off) == 4  # every "none" run, no other
  fig = report_figures.curves_figure(runs, "loss")
  assert fig.axes[0].get_ylim()[1] < 150  # the curves' shared y is capped too


def test_the_last_eval_over_the_whole_split_has_its_own_mark():
  """The last eval sees the whole eval split, the periodic ones its first batches: the
  curves draw the last one as a star at the last step, the others as dots, so a jump between
  them reads as what it is, in both figure layouts (with and without an LR field)."""
  for fields in ({a.LR: 1e-3}, {"model.d_model": 64}):
    runs = []
    for s in range(2):
      r = _run({**fields, "seed": s}, final_loss=1.4, num_steps=200)
      r.metrics["eval"][:0] = [{"step": t, "split": "eval", "loss": 1.7} for t in (50, 100, 150)]
      r.metrics["train"] += [{"step": t, "split": "train", "loss": 1.5} for t in (100, 200)]
      runs.append(r)
    fig = report_figures.curves_figure(runs, "loss")
    lines = [l for ax in fig.axes for l in ax.lines]
    stars = [l for l in lines if l.get_marker() == "*"]
    dots = [l for l in lines if l.get_marker() == "o" and len(l.get_xdata())]
    assert [(list(l.get_xdata()), list(l.get_ydata())) for l in stars] == [([200], [1.4])]
    assert [list(l.get_xdata()) for l in dots] == [[50, 100, 150]]
    legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend())
    assert any(t.get_text().startswith("last eval, whole split") for t in legend.get_texts())


def test_the_summary_counts_runs_on_the_old_decay_mask_whether_saved_before_it_or_set(tmp_path):
  """A run saved before `optim.decay_mask` existed and one made since with
  `optim.decay_mask=ndim` both decayed every 2+-dim parameter; a `role` run did not."""
  runs = []
  for name, optim in (("old", {}), ("matched", {"decay_mask": "ndim"}),
                      ("new", {"decay_mask": "role"})):
    os.makedirs(tmp_path / name)
    (tmp_path / name / "config.json").write_text(json.dumps(
        {"optim": optim, "model": {"norm_placement": "pre"}}))
    runs.append(report_runs.Run(name, {}, 200, str(tmp_path / name), {}))
  [note] = report_summary.recipe_changes_since(runs)
  assert note.startswith("2 of 3 runs used the weight-decay mask of runs made before the mask "
                         "by parameter role (1 saved before it and 1 set `optim.decay_mask=ndim`")
  assert report_summary.recipe_changes_since(runs[2:]) == []


def _one_run_study(tmp_path, results, name: str, summary: str, num_steps: int = 5,
                   source: str = ""):
  """A study folder `results/name` of one finished run (seed=0) of `num_steps`, whose sweep
  file (`tmp_path/name.py`, `source` first) returns `summary` (Python source) from
  `summarize`. Returns the folder."""
  d = results / name
  os.makedirs(d / "seed=0")
  (d / "seed=0" / "metrics.jsonl").write_text(
      json.dumps({"step": num_steps, "split": "eval", "loss": 1.5}) + "\n")
  (tmp_path / f"{name}.py").write_text(
      f"{source}def get_sweep():\n  return [{{'seed': 0}}]\ndef summarize(runs):\n"
      f"  return {summary}\n")
  with open(d / MANIFEST, "w") as f:
    json.dump({"sweep_file": str(tmp_path / f"{name}.py"), "config": "c.py", "claim": "C",
               "overrides": [], "points": [{"name": "seed=0", "overrides": {"seed": 0},
                                            "num_steps": num_steps}]}, f)
  return d


def test_summary_collects_every_study(tmp_path, monkeypatch):
  """A folder of studies: --mode=report writes README.md with each study's verdict, numbers,
  figure and regenerate command, and a per-placement table."""
  results = tmp_path / "results"
  for name, verdict in (("one", "agrees"), ("two", "disagrees")):
    d = _one_run_study(tmp_path, results, name,
                       f"{{'verdict': '{verdict}', 'numbers': ['x = 1 ± 0.1'], 'figure': 'f.webp',"
                       f" 'placements': {{'pre': {{'q_{name}': '{name}-value'}}}}}}")
    (d / "f.webp").write_bytes(b"")
  assert (sweep_points.holds_studies(str(results))
          and not sweep_points.holds_studies(str(results / "one")))
  path, verdicts = report_summary.write_summary(str(results))
  text = open(path).read()
  assert verdicts == ["one: agrees", "two: disagrees"]
  assert "## one" in text and "the data disagrees" in text and "- x = 1 ± 0.1" in text
  assert "![one](one/f.webp)" in text and f"--sweep_dir={results}/two`" in text
  assert "| q_one | one-value (one) |" in text and "| q_two | two-value (two) |" in text
  # Runs without provenance: the data table says so, and no mixed-corpus warning.
  assert "| one | 1 run(s) not recorded | - |" in text
  assert "different corpora" not in text and "The runs of one, two (all or some)" in text
  # Runs that recorded different corpora are flagged; a recorded corpus is described.
  from transformer import provenance
  for name, digest in (("one", "aaaa"), ("two", "bbbb")):
    record = {"data": {"name": "local_text", "digest": digest,
                       "source": {"folder": "python-stdlib", "python": name, "files": 1,
                                  "bytes": 10}}}
    (results / name / "seed=0" / provenance.FILE).write_text(json.dumps(record) + "\n")
    (results / name / "unigram_entropy.json").write_text(json.dumps({"k": 3.3194484}))
  text = open(report_summary.write_summary(str(results))[0]).read()
  assert "**The runs recorded 2 different corpora**" in text
  assert "| two | local_text, python-stdlib two, 1 files, 10 bytes (digest bbbb) | 3.3194 |" in text


def test_the_summary_atlas_has_one_line_per_atlas_study(tmp_path):
  """A study whose summary names an atlas question gets a line in `## The placement atlas`:
  its report's verdict line and whether the robustness line says the call holds; a study
  without one gets no line, and a summary without any has no section."""
  results = tmp_path / "results"
  reports = {"q1": ("**Agrees.** It does.", '**Robustness:** the call ("agrees") holds under '
                    "every neighbouring threshold (4 settings, one moved at a time)."),
             "q2": ("**Disagrees.** It does not.", "**Robustness:** the call does not hold "
                    "under every neighbouring threshold (1 of 4 settings change it): x."),
             "plain": ("**Agrees.** Old claim.", "")}
  for name, (verdict, robust) in reports.items():
    atlas = f", 'atlas': 'Question {name}?'" if name != "plain" else ""
    d = _one_run_study(tmp_path, results, name, f"{{'verdict': 'agrees'{atlas}}}")
    (d / "report.md").write_text(f"**Warning:** mixed.\n\n{verdict}\n\n{robust}\n")
  text = open(report_summary.write_summary(str(results))[0]).read()
  atlas = text.split("## The placement atlas")[1].split("\n## ")[0]
  assert [l for l in atlas.splitlines() if l.startswith("- ")] == [
      "- **Question q1?** ([q1](q1/report.md)) **Agrees.** It does. At the neighbouring "
      "thresholds the call holds.",
      "- **Question q2?** ([q2](q2/report.md)) **Disagrees.** It does not. At the neighbouring "
      "thresholds the call does not hold."]
  for name in ("q1", "q2"):
    os.remove(results / name / MANIFEST)
  assert "placement atlas" not in open(report_summary.write_summary(str(results))[0]).read()


# A study that follows q1's and q3's answers further: before its runs (summarize([])) each
# later text is None and its word "not run yet"; with runs, q1's are measured, q3's not.
FOLLOWER = """FOLLOWS = ('q1', 'q3')
def get_sweep():
  return [{'seed': 0}]
def summarize(runs):
  later = (lambda text: text if runs else None)
  word = (lambda w: w if runs else 'not run yet')
  return {'verdict': 'agrees', 'follow_ups': {
      'q1': [('A', '+0.100 ± 0.030', later('+0.090 ± 0.020'), word('holds')),
             ('B', '-0.200 ± 0.010', later('+0.300 ± 0.040'), word('flips'))],
      'q3': [('C', '+0.450 ± 0.058', None, 'not run yet')]}}
"""


def _atlas_table(results) -> list[str]:
  """The rows of the summary's atlas table (its two header lines left out)."""
  text = open(report_summary.write_summary(str(results))[0]).read()
  atlas = text.split("## The placement atlas")[1].split("\n## ")[0]
  return [l for l in atlas.splitlines() if l.startswith("| ")][1:]


def test_the_summary_atlas_sets_each_answer_beside_its_follow_up(tmp_path):
  """Issue 69: per atlas question, its answers at the study's steps beside the same answers at
  2,400 steps. Before the follower (FOLLOWS) is committed, its answers come from its
  `summarize([])` and are marked early-training only; a 600-step study no one follows says
  "not followed"; a study whose own runs reach 2,400 steps is not early-training only; a
  followed study without an atlas question gets rows too. Once the follower is committed, its
  `summarize(runs)["follow_ups"]` fills the 2,400-step cells in."""
  results = tmp_path / "results"
  _one_run_study(tmp_path, results, "q1", "{'verdict': 'disagrees', 'atlas': 'Q1?'}")
  _one_run_study(tmp_path, results, "q2", "{'verdict': 'agrees', 'atlas': 'Q2?'}")
  _one_run_study(tmp_path, results, "q3", "{'verdict': 'agrees'}")
  _one_run_study(tmp_path, results, "long", "{'verdict': 'agrees', 'atlas': 'L?'}",
                 num_steps=2400)
  (tmp_path / "follower.py").write_text(FOLLOWER)
  wait = "not followed yet: early-training only (follower.py, not run)"
  assert _atlas_table(results) == [
      "| L? | [long](long/report.md) | 2,400 | its verdict | the data agrees (above) | its own "
      "runs reach 2,400 steps | no |",
      f"| Q1? | [q1](q1/report.md) | 5 | A | +0.100 ± 0.030 | {wait} | yes |",
      f"|  |  |  | B | -0.200 ± 0.010 | {wait} | yes |",
      "| Q2? | [q2](q2/report.md) | 5 | its verdict | the data agrees (above) | not followed | "
      "yes |",
      f"| (not an atlas question) | [q3](q3/report.md) | 5 | C | +0.450 ± 0.058 | {wait} | yes |"]
  os.makedirs(tmp_path / "in_progress" / "follower")  # its runs so far, packed: still waiting
  assert _atlas_table(results)[1].endswith("(follower.py, runs in progress) | yes |")
  os.remove(tmp_path / "follower.py")  # committed: its summary with its runs says
  _one_run_study(tmp_path, results, "follower", "{'verdict': 'agrees', 'follow_ups': {'q1': "
                 "[('A', '+0.100 ± 0.030', '+0.090 ± 0.020', 'holds'), ('B', '-0.200 ± 0.010', "
                 "'+0.300 ± 0.040', 'flips')], 'q3': [('C', '+0.450 ± 0.058', None, "
                 "'not run yet')]}}", num_steps=2400, source="FOLLOWS = ('q1', 'q3')\n")
  link = "([follower](follower/report.md))"
  assert _atlas_table(results)[1:4] == [
      f"| Q1? | [q1](q1/report.md) | 5 | A | +0.100 ± 0.030 | +0.090 ± 0.020: **holds** {link} "
      "| no |",
      f"|  |  |  | B | -0.200 ± 0.010 | +0.300 ± 0.040: **flips** {link} | yes: it does not "
      "hold at 2,400 steps |",
      "| Q2? | [q2](q2/report.md) | 5 | its verdict | the data agrees (above) | not followed | "
      "yes |"]
  assert _atlas_table(results)[4] == (
      "| (not an atlas question) | [q3](q3/report.md) | 5 | C | +0.450 ± 0.058 | not followed "
      "yet: early-training only ([follower](follower/report.md): not run yet) | yes |")


@pytest.mark.parametrize("word, cell", [
    ("holds", "no"),
    ("shrinks under the margin", "yes: it does not hold at 2,400 steps"),
    ("flips", "yes: it does not hold at 2,400 steps"),
    ("grows past the margin", "yes: it does not hold at 2,400 steps"),
    ("not resolved", "not settled: not resolved at 2,400 steps"),
    ("resolved (below the margin)", "no answer at the study's steps to test"),
    ("a word no follower writes", "see the follow-up's report")])
def test_an_answer_that_does_not_hold_past_early_training_is_early_training_only(word, cell):
  """Issue 69: "which answers are early-training only" is asked of the answer, not of whether
  a run measured it: one that shrinks, flips or grows past its margin at 2,400 steps held only
  early; one not resolved there is not settled; atlas_long's words are the table's keys."""
  assert follow_ups.early_only(word, 2400) == cell


def test_a_follower_without_early_answers_and_a_malformed_one(tmp_path):
  """A follower whose summarize needs runs still marks the studies it FOLLOWS early-training
  only (one row, the study's verdict); a committed summary whose follow_ups has the wrong shape
  is a one-line error naming the study."""
  results = tmp_path / "results"
  _one_run_study(tmp_path, results, "q1", "{'verdict': 'disagrees', 'atlas': 'Q1?'}")
  (tmp_path / "needs_runs.py").write_text(
      "FOLLOWS = ('q1',)\ndef get_sweep():\n  return [{'seed': 0}]\n"
      "def summarize(runs):\n  return {'verdict': runs[0]}\n")
  assert _atlas_table(results) == [
      "| Q1? | [q1](q1/report.md) | 5 | its verdict | the data disagrees (above) | not followed "
      "yet: early-training only (needs_runs.py, not run) | yes |"]
  _one_run_study(tmp_path, results, "bad", "{'verdict': 'agrees', 'follow_ups': {'q1': "
                 "[('A', '+0.1', 0.2, 'holds')]}}")
  with pytest.raises(ConfigError) as e:
    report_summary.write_summary(str(results))
  assert str(e.value).startswith(f"{tmp_path / 'bad.py'}: summarize(runs)['follow_ups'] must "
                                 "be {followed study: [(answer, ") and "\n" not in str(e.value)


def test_the_summary_waits_like_the_report_for_a_sweep_not_complete(tmp_path):
  """A study whose `summarize` reads only the runs that ended would call a sweep cut short as
  if it were whole; its report says "not complete", so the summary's verdict is inconclusive
  and says how many points are left, whatever `summarize` made of the rest."""
  results, d = tmp_path / "results", tmp_path / "results" / "cut"
  os.makedirs(d / "seed=0")
  (d / "seed=0" / "metrics.jsonl").write_text(
      json.dumps({"step": 5, "split": "eval", "loss": 1.5}) + "\n")
  (tmp_path / "cut.py").write_text(
      "def get_sweep():\n  return [{'seed': 0}, {'seed': 1}]\n"
      "def summarize(runs):\n  return {'verdict': 'agrees', 'numbers': ['x = 1']}\n")
  points = [{"name": f"seed={s}", "overrides": {"seed": s}, "num_steps": 5} for s in (0, 1)]
  with open(d / MANIFEST, "w") as f:
    json.dump({"sweep_file": str(tmp_path / "cut.py"), "config": "c.py", "claim": "C",
               "overrides": [], "points": points}, f)
  path, verdicts = report_summary.write_summary(str(results))
  text = open(path).read()
  assert verdicts == ["cut: is inconclusive"]
  assert "**Verdict:** the data is inconclusive (" in text
  assert "- The sweep is not complete: 1 of 2 points have not finished" in text
  assert "- x = 1" in text  # summarize's numbers stay, flagged by the line above them
  os.makedirs(d / "seed=1")  # the last point ends: summarize's own verdict again
  (d / "seed=1" / "metrics.jsonl").write_text(
      json.dumps({"step": 5, "split": "eval", "loss": 1.4}) + "\n")
  path, verdicts = report_summary.write_summary(str(results))
  assert verdicts == ["cut: agrees"] and "not complete" not in open(path).read()


def test_qk_norm_logits_that_grow_with_the_lr_fail_the_bounded_check():
  """The check that replaced 'qk-norm's logits are lower than the unnormalised ones' (true by
  construction here) can fail: qk-norm's own logits growing across the LR grid."""
  def runs(qk_high):
    out = []
    for qk in (False, True):
      for lr in (1e-3, 1e-1):
        for s in range(3):
          logit = (100.0 if not qk else qk_high) if lr == 1e-1 else 5.0
          loss = 2.0 if lr == 1e-3 else 2.0 + (0.2 if qk else 0.3) + 0.01 * s
          out.append(_run({"model.qk_norm": qk, a.LR: lr, "seed": s}, final_loss=loss,
                          diagnostics=[_layers("self_attention/attn_max_logit",
                                               [1.0, logit + 0.1 * s])]))
    return out
  assert _verdict(qk_norm_logits.analyze(runs(5.0))).startswith("**Agrees.**")
  # Growth paired by seed, ln(high / low) against ln 2: 9/5 stays below, 20/5 lies above.
  assert _verdict(qk_norm_logits.analyze(runs(9.0))).startswith("**Agrees.**")
  lines = qk_norm_logits.analyze(runs(20.0))
  assert _verdict(lines).startswith("**Partly agrees.**"), lines
  assert "; with qk-norm the max logit does not grow with the LR: no (" in _verdict(lines)
  grown = [math.log((20.0 + 0.1 * s) / (5.0 + 0.1 * s)) for s in range(3)]
  assert (f"- with qk-norm the max logit does not grow with the LR: no (ln(peak logit at LR 0.1 "
          f"/ at 0.001) with qk-norm: +{np.mean(grown):.3f} ± ") in "\n".join(lines)


def test_qk_norm_logits_verdict_says_what_each_check_found():
  """Issue 68: each check with its finding and interval, not the claim's wording. Without
  qk-norm the peak logit goes 5 -> 100 (+0.1 s), with it 5 -> 5 (+0.1 s); the sensitivity
  0.3 vs 0.2 (+0.2 s): +0.050 ± 0 nats/token."""
  out = []
  for qk in (False, True):
    for lr in (1e-3, 1e-1):
      for s in range(3):
        logit = (100.0 if not qk and lr == 1e-1 else 5.0) + 0.1 * s
        loss = 2.0 if lr == 1e-3 else 2.0 + (0.2 if qk else 0.3) + 0.2 * s
        out.append(_run({"model.qk_norm": qk, a.LR: lr, "seed": s}, final_loss=loss,
                        diagnostics=[_layers("self_attention/attn_max_logit", [1.0, logit])]))
  x = np.log(np.array([100.0, 100.1, 100.2]) / np.array([5.0, 5.1, 5.2]))  # float64 NumPy
  half = 4.302652729911275 * x.std(ddof=1) / np.sqrt(3)
  assert _verdict(qk_norm_logits.analyze(out)) == (
      f"**Agrees.** Without qk-norm the max logit grows with the LR: yes ({x.mean():+.3f} ± "
      f"{half:.3f} against ln 2); with qk-norm the max logit does not grow with the LR: yes "
      "(+0.000 ± 0.000 against ln 2); qk-norm lowers the LR sensitivity: yes (+0.050 ± 0.000 "
      "nats/token against 0), paired by seed.")


def test_qk_norm_logits_reads_its_confirmatory_seeds_alone():
  """Issue 68 point 7: once seeds 3-5 have run the three checks read them alone; seeds 0-2 (the
  ones the checks were chosen on) are described. Here the logits grow without qk-norm in seeds
  0-2 (5 -> 100) and not in seeds 3-5 (5 -> 6): the verdict disagrees, the exploratory line
  agrees."""
  def runs(seeds, high):
    return [_run({"model.qk_norm": qk, a.LR: lr, "seed": s},
                 final_loss=2.0 if lr == 1e-3 else 2.0 + (0.2 if qk else 0.3) + 0.2 * s,
                 diagnostics=[_layers("self_attention/attn_max_logit",
                                      [1.0, (high if not qk and lr == 1e-1 else 5.0) + 0.1 * s])])
            for qk in (False, True) for lr in (1e-3, 1e-1) for s in seeds]
  explored = runs(range(3), 100.0)
  assert "The confirmatory seeds 3-5 have not run yet" in qk_norm_logits.analyze(explored)[2]
  lines = qk_norm_logits.analyze(explored + runs(qk_norm_logits.CONFIRMATORY_SEEDS, 6.0))
  assert lines[2].startswith("The verdict reads the confirmatory seeds 3-5 alone")
  grown = np.log(np.array([6.3, 6.4, 6.5]) / np.array([5.3, 5.4, 5.5]))  # float64 NumPy
  assert _verdict(lines).startswith(
      f"**Disagrees.** Without qk-norm the max logit grows with the LR: no ({grown.mean():+.3f} ± ")
  assert lines[-1].startswith(
      "On the exploratory seeds 0-2 (the runs the call was chosen on; described, not the call) "
      "the same test agrees: Without qk-norm the max logit grows with the LR: yes (")
  assert any(l.startswith("Seeds 0-2, exploratory (described): largest attention logit")
             for l in lines)


def test_holm_adjustment():
  """Holm's step-down: sorted p times (m - k + 1), monotone, capped at 1 (a hand computation)."""
  adjusted = a.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
  assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})
  assert a.holm({"x": 0.6, "y": 0.5}) == {"y": 1.0, "x": 1.0}
  assert a.holm({}) == {}


def _reseed(runs, offset):
  """The same runs with their seeds moved by `offset` (a new set of seeds)."""
  out = []
  for r in runs:
    moved = _run({**r.overrides, "seed": r.seed + offset}, status=r.status,
                 diagnostics=r.metrics["diagnostics"])
    out.append(moved)
  return out


def test_the_at_init_calls_read_their_confirmatory_seeds_alone():
  """Issue 68 point 7: residual_growth's, grad_scale_depth's and grad_profile's post hoc calls
  read the confirmatory seeds alone once they have run, and describe the exploratory seeds'
  reading (here the opposite answer) beside the verdict; before, they read what there is and
  say it is not confirmed."""
  layers = np.arange(24)
  def growth(pre_sq, seeds):
    return ([_run({a.PLACEMENT: "pre", "seed": s},
                  diagnostics=[_layers("residual_rms", np.sqrt(pre_sq) * (1 + 0.01 * s))])
             for s in seeds]
            + [_run({a.PLACEMENT: "post", "seed": s},
                    diagnostics=[{**_layers("residual_rms", np.ones(24)),
                                  **_layers("feed_forward/out_rms", np.full(24, 0.7))}])
               for s in seeds])
  explore = growth(np.exp(0.3 * layers), range(3))  # not linear: disagrees
  lines = residual_growth.analyze(explore)
  assert _verdict(lines).startswith("**Disagrees.**")
  assert "The confirmatory seeds 3-5 have not run yet" in "\n".join(lines)
  lines = residual_growth.analyze(explore + growth(1 + 0.8 * layers, (3, 4, 5)))
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "The verdict reads the confirmatory seeds 3-5 alone" in text
  assert ("On the exploratory seeds 0-2 (the runs the call was chosen on; described, not the "
          "call) the same test disagrees: Pre-norm's") in text
  assert residual_growth.summarize(explore + growth(1 + 0.8 * layers, (3, 4, 5)))[
      "numbers"][0].startswith("pre: slope of ||x_l||^2/d 0.8")  # the confirmatory seeds'

  lines = grad_scale_depth.analyze(_depth_runs(-0.5, 0.0) + _reseed(_depth_runs(0.0, -0.5), 3)
                                   + _depth_runs(0.1, -0.25, activation=None))
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "- ReLU, seeds 3-5: **post b = " in text and "**pre b = -0.5 ± " in text
  assert "- ReLU, seeds 0-2: **post b = -0.5 ± " in text
  assert "- GELU, seeds 0-2: **post b = 0.1" in text
  assert "On the exploratory seeds 0-2 (the runs the call was chosen on; described, not " in text
  assert "the same test disagrees: Fitted exponent" in text
  assert "With our default GELU feed-forward net the same test partly agrees." in text

  grows, flat = np.linspace(1, 3, 12), np.full(12, 2.0)
  new = [_run({**r.overrides, "seed": r.seed + 10}, diagnostics=r.metrics["diagnostics"])
         for r in _profile_runs(grows, flat)]
  lines = grad_profile.analyze(_profile_runs(flat, flat) + new)
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "| post | relu, seeds 10-12 |" in text and "| post | relu | " in text  # seeds that ran
  assert "On the exploratory seeds 0-2 (the runs the call was chosen on; described, not " in text
  assert "the same test disagrees" in text
