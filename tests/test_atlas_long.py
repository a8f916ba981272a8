"""experiments/atlas_long.py (issue 69): each atlas answer followed to 2,400 steps, on hand-made
runs whose answers are known; its points (order, count, the ones other studies ran) and the
600-step numbers it quotes from the committed reports."""

import dataclasses
import math
import os

import pytest

from configs.default import get_config
from experiments import analysis as a
from experiments import atlas_long, long_runs, long_training
from tests.test_studies_issue46 import T_975_2, _run, _verdict
from transformer import REPO_ROOT, study
from transformer.errors import ConfigError
from transformer.report import follow_ups
from transformer.sweep import points as sweep_points

# Offsets (nats/token, over 2.0) under which every answer resolved at 600 steps holds.
HOLDING = {"pre dyt": 0.14, "peri dyt": 0.15, "post dyt": 1.4, "post dyt alpha_0 1": 0.27,
           "hybrid": 0.07, "post 12 layers": 0.45}


def _runs(offsets=None, spread=None, best=None, cliff_trains=False):
  """Every setting's runs at its LRs (the cliff LR for post and post qk-norm too), 3 seeds:
  2.0 + `offsets[setting]` + `spread[setting]` x (seed - 1), 0.1 more per LR step away from
  index `best[setting]` (0 unless given). At the cliff LR post-norm collapses, and post-norm
  with qk-norm too unless `cliff_trains`."""
  offsets, spread, best = dict(HOLDING, **(offsets or {})), spread or {}, best or {}
  runs = []
  for name, (fields, lrs, _) in atlas_long.SETTINGS.items():
    cliff = name in ("post", "post qk-norm")
    for i, lr in enumerate(lrs + ((atlas_long.CLIFF_LR,) if cliff else ())):
      for s in range(3):
        point = {**fields, a.LR: lr, "seed": s}
        if cliff and lr == atlas_long.CLIFF_LR:
          trains = cliff_trains and name == "post qk-norm"
          runs.append(dataclasses.replace(_run(point, 2.5 if trains else 3.4),
                                          status="finished" if trains else "collapsed"))
          continue
        loss = (2.0 + offsets.get(name, 0.0) + spread.get(name, 0.0) * (s - 1)
                + 0.1 * abs(i - best.get(name, 0)))
        runs.append(_run(point, loss))
  return runs


def _words(runs):
  return {n: v["word"] for n, v in atlas_long.measure(runs).items()}


def test_every_resolved_answer_holding_agrees():
  words = _words(_runs())
  assert words["DyT in pre-norm"] == words["HybridNorm against pre-norm"] == "holds"
  assert words["RMSNorm in post-norm"] == "holds"  # inside the margin again
  assert words["qk-norm on post-norm"] == "holds"
  assert words["post-norm, 12 against 6 layers"] == "holds"
  verdict = _verdict(atlas_long.analyze(_runs()))
  assert verdict.startswith("**Agrees.**")
  assert "DyT in pre-norm: holds (600 steps: +0.142 ± 0.053; 2400: +0.140 ± 0.000)" in verdict


def test_a_cost_inside_the_margin_shrinks_and_one_beyond_the_other_side_flips():
  words = _words(_runs({"pre dyt": 0.02, "hybrid": -0.05}))
  assert words["DyT in pre-norm"] == "shrinks under the margin"
  # pre minus HybridNorm was below -0.01 at 600 steps; +0.05 here lies above +0.01.
  assert words["HybridNorm against pre-norm"] == "flips"
  verdict = _verdict(atlas_long.analyze(_runs({"pre dyt": 0.02, "hybrid": -0.05})))
  assert verdict.startswith("**Partly agrees.**")


def test_an_interval_across_the_margin_is_not_resolved():
  """DyT in post-norm costs 0.05 + 0.02 (s - 1): mean 0.05, the margin, half-width
  t * 0.02 / sqrt(3)."""
  runs = _runs({"post dyt": 0.05}, spread={"post dyt": 0.02})
  m = atlas_long.measure(runs)["DyT in post-norm"]
  mean, half = m["difference"].interval
  assert mean == pytest.approx(0.05) and half == pytest.approx(T_975_2 * 0.02 / math.sqrt(3))
  assert m["word"] == "not resolved"


def test_a_no_difference_answer_that_grows_past_the_margin_says_so():
  assert _words(_runs({"post rmsnorm": -0.2}))["RMSNorm in post-norm"] == "grows past the margin"


def test_answers_unresolved_at_600_steps_are_described_not_judged():
  runs = _runs({"deepnorm 24 layers": -0.1})
  words = _words(runs)
  assert words["DeepNorm's depth cost"] == "resolved (below the margin)"
  assert words["Admin's depth cost"] == "resolved (inside the margin)"
  verdict = _verdict(atlas_long.analyze(runs))
  assert verdict.startswith("**Agrees.**")
  assert "Described (not resolved at 600 steps): DeepNorm's depth cost: resolved (below" in verdict


def test_qk_norm_training_at_the_cliff_lr_flips_and_no_answer_holding_disagrees():
  runs = _runs({"pre dyt": 0.0, "peri dyt": 0.0, "post dyt": 0.0, "post dyt alpha_0 1": 0.0,
                "hybrid": 0.0, "post 12 layers": 0.0, "post rmsnorm": 0.2, "pre rmsnorm": 0.2,
                "peri rmsnorm": 0.2}, cliff_trains=True)
  words = _words(runs)
  assert words["qk-norm on post-norm"] == "flips"
  assert words["post-norm, 12 against 6 layers"] == "shrinks under the margin"
  assert _verdict(atlas_long.analyze(runs)).startswith("**Disagrees.**")


def test_an_answer_whose_runs_are_missing_is_not_run_yet_and_not_judged_as_holding():
  """A sweep cut short after its first answer: the others say so, and the verdict is partly."""
  runs = [r for r in _runs() if atlas_long.setting_of(r) in ("pre dyt", "pre")]
  words = _words(runs)
  assert words["DyT in pre-norm"] == "holds"
  assert {w for n, w in words.items() if n != "DyT in pre-norm"} == {"not run yet"}
  assert _verdict(atlas_long.analyze(runs)).startswith("**Partly agrees.**")


def test_a_listed_run_that_has_not_ended_leaves_its_answer_not_run_yet():
  """The manifest lists every point: one HybridNorm seed missing (no metrics) or incomplete
  keeps its answer out, where its two ended seeds alone would have been read."""
  for status in ("missing", "incomplete"):
    runs = [dataclasses.replace(r, metrics={}, status=status)
            if atlas_long.setting_of(r) == "hybrid" and r.seed == 2 else r for r in _runs()]
    words = _words(runs)
    assert words["HybridNorm against pre-norm"] == "not run yet"
    assert words["DyT in pre-norm"] == "holds"


def test_each_setting_is_read_at_its_own_best_of_its_two_lrs():
  m = atlas_long.measure(_runs(best={"pre dyt": 1}))["DyT in pre-norm"]
  assert m["read"]["pre dyt"][0] == 1e-2 and m["read"]["pre"][0] == 3e-3
  assert m["text"] == "+0.140 ± 0.000"


def test_the_sweep_has_whole_answers_cheapest_first_and_links_24_runs():
  s = study.load("experiments/atlas_long.py:cpu")
  points = s.get_sweep("cpu")
  assert len(points) == 114 and len(set(map(repr, points))) == 114
  assert all(p["train.num_steps"] == 2400 for p in points)
  order = [atlas_long.setting_of(_run(p)) for p in points]
  assert order[:6] == ["pre dyt"] * 6  # pre-norm's LayerNorm points are long_training's
  assert order[-12:] == ["admin 24 layers"] * 6 + ["admin 6 layers"] * 6
  deep = [p for p in points if p["model.num_layers"] == 24]
  assert len(deep) == 12 and all(p["model.scan_layers"] for p in deep)
  assert {p["optim.warmup_steps"] for p in points if p["model.num_layers"] == 12} == {1200}
  configs = sweep_points.validate_points(get_config(), points)  # every point a valid config
  assert sum(c.model.qk_norm for c in configs) == 9
  others = long_training.get_sweep("cpu") + long_runs.get_sweep("cpu")
  assert sum(p in others for p in points) == 24
  with pytest.raises(ConfigError, match="no 'gpu' preset"):
    atlas_long.get_sweep("gpu")


@pytest.mark.parametrize("answer", [x for x in atlas_long.ANSWERS if not x.cliff],
                         ids=lambda x: x.name)
def test_the_600_step_numbers_are_the_committed_reports(answer):
  path = os.path.join(REPO_ROOT, "experiments", "results", answer.study, "report.md")
  with open(path, encoding="utf-8") as f:
    text = f.read()
  mean, half = answer.at_600
  assert f"{mean:+.3f} ± {half:.3f}" in text


def test_the_cliff_at_600_steps_is_qk_norm_posts():
  with open(os.path.join(REPO_ROOT, "experiments", "results", "qk_norm_post", "report.md"),
            encoding="utf-8") as f:
    text = f.read()
  assert "post-norm with qk-norm trained in 0 of 3 seeds at 0.01, 0 of 3 seeds at 0.03" in text


def test_the_call_is_pre_registered_at_the_commit_that_added_the_file():
  s = study.load("experiments/atlas_long.py:cpu")
  (when,) = s.registration.values()
  assert when.startswith("pre-registered at 04c1965")


def test_summarize_sets_each_followed_answer_beside_its_600_step_quote():
  """Issue 69: the summary's atlas reads `follow_ups`, per followed study (FOLLOWS, the studies
  ANSWERS quote) per answer: the name, the 600-step quote, the 2,400-step estimate (None while
  not run yet) and the word. HybridNorm holds at -0.070 (pre 2.0 minus hybrid 2.07, every seed);
  DeepNorm's note says its two budgets measure different depth pairs."""
  assert atlas_long.FOLLOWS == ("norm_type_placement", "hybrid_norm", "dyt_alpha",
                                "qk_norm_post", "depth_post", "depth_lr")
  assert study.load("experiments/atlas_long.py:cpu").follows == atlas_long.FOLLOWS
  before = atlas_long.summarize([])["follow_ups"]
  assert list(before) == list(atlas_long.FOLLOWS)
  assert before["hybrid_norm"] == [("HybridNorm against pre-norm", "-0.071 ± 0.022", None,
                                    "not run yet")]
  after = atlas_long.summarize(_runs())["follow_ups"]
  assert after["hybrid_norm"] == [("HybridNorm against pre-norm", "-0.071 ± 0.022",
                                   "-0.070 ± 0.000", "holds")]
  assert after["depth_lr"][0][0] == ("DeepNorm's depth cost (12 minus 6 layers at 600 steps, "
                                     "24 minus 6 at 2,400)")
  assert [len(after[s]) for s in atlas_long.FOLLOWS] == [6, 1, 1, 1, 1, 2]
  assert after["dyt_alpha"] == [("DyT in post-norm at alpha_0 1", "+0.272 ± 0.091",
                                 "+0.270 ± 0.000", "holds")]


def test_every_word_has_its_early_training_only_cell_in_the_summary():
  """Each word `atlas_long.word` can give is one the summary's atlas table reads (its
  "early-training only?" cell), never the fallback for a word it does not know."""
  sides = (None, "above", "below", "inside")
  words = {atlas_long.word(before, after) for before in sides for after in sides}
  assert {w: follow_ups.early_only(w, 2400) for w in words if w.startswith("resolved")} == {
      w: follow_ups.NO_EARLY_ANSWER for w in words if w.startswith("resolved")}
  assert [w for w in words if follow_ups.early_only(w, 2400).startswith("see")] == []


def test_the_report_says_which_lr_of_its_pair_each_setting_is_best_at():
  """Two LRs bracket no optimum: the report lists the settings best at the upper LR of their
  pair (they may do better above it) and those best at the lower (described, no call)."""
  line = atlas_long.analyze(_runs(best={"hybrid": 1}))[-1]
  pairs = {n: lrs for n, (_, lrs, _) in atlas_long.SETTINGS.items() if n != "post qk-norm"}
  best = {n: lrs[1] if n == "hybrid" else lrs[0] for n, lrs in pairs.items()}
  upper = [n for n in pairs if best[n] == max(pairs[n])]
  assert f"the upper LR, {len(upper)} of {len(pairs)} settings (" in line
  assert "hybrid 0.003" in line.split("the lower")[0]  # its best moved to its pair's upper LR
  assert f"the lower, {len(pairs) - len(upper)} (" in line and "pre 0.003" in line.split(
      "the lower")[1]
