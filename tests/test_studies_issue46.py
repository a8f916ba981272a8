"""The studies issue 46 added: clipping (warmup_stability's paired call without gradient
clipping), prose_corpus and warmup_long, on hand-made runs whose answers are known
(massive_activations, whose call issue 68 replaced: tests/test_massive_activations.py)."""

import math
import os

from experiments import analysis as a
from experiments import clipping
from transformer import REPO_ROOT
from transformer.report import runs as report_runs

T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def _run(overrides, final_loss=2.0, diagnostics=()):
  metrics = {"train": [{"step": 1, "split": "train", "loss": 5.5}],
             "eval": [{"step": 600, "split": "eval", "loss": final_loss}],
             "diagnostics": list(diagnostics)}
  return report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                         600, "/nonexistent", metrics, "finished")


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def _clipping_runs(cost):
  """Loss 2.0 + 0.1 per LR step + 0.01 per seed; without warm-up a placement pays
  `cost(clip, placement, seed)` more at every LR."""
  return [_run({"optim.clip_norm": clip, a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr,
                "seed": s},
               2.0 + 0.1 * i + 0.01 * s + (cost(clip, p, s) if w == 0 else 0.0))
          for clip in clipping.CLIPS for p in clipping.PLACEMENTS for w in (0, 60)
          for i, lr in enumerate(clipping.LRS["cpu"]) for s in range(3)]


def test_clipping_agrees_when_post_still_pays_more_for_no_warmup_without_clipping():
  lines = clipping.analyze(_clipping_runs(
      lambda clip, p, s: (0.3 + 0.01 * s) if p == "post" else 0.02))
  half = T_975_2 * 0.01 / math.sqrt(3)
  assert _verdict(lines).startswith("**Agrees.**")
  assert (f"Without clipping (the papers' recipe): post-norm needs warm-up: its cost of dropping "
          f"it lies above the margin 0.05 (+0.310 ± {half:.3f}); pre-norm does not need warm-up: "
          "its cost of dropping it lies below the margin 0.05 (+0.020 ± 0.000) (nats/token, "
          "mean ± 95% CI over seeds; each half its own call, chosen after the runs). With the "
          "protocol's clipping the same halves give the same call (agrees)") in _verdict(lines)
  assert (f"Described, not called: post-norm's cost minus pre-norm's +0.290 ± {half:.3f} "
          f"without clipping, +0.290 ± {half:.3f} with it.") in _verdict(lines)
  assert len(clipping.REGISTRATION) == 2 and all(
      v.startswith("post hoc:") for v in clipping.REGISTRATION.values())


def test_clipping_says_when_clipping_changes_the_call():
  """With clipping post pays 0.3, pre nothing: both halves hold. Without it both pay 0.3:
  post's half holds, pre's does not (its cost lies above the margin), so the call without
  clipping partly agrees; post minus pre, 0, would have disagreed (issue 68)."""
  lines = clipping.analyze(_clipping_runs(
      lambda clip, p, s: 0.3 + 0.01 * s if (p == "post" or not clip) else 0.0))
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert "pre-norm needs warm-up: its cost of dropping it lies above the margin" in (
      _verdict(lines))
  assert "the same halves give a different call (agrees)" in _verdict(lines)


def _prose_runs(post_cliff, post_warmup_cost, pre_warmup_cost=0.02, seeds=range(3),
                settings=(("post", 60), ("pre", 60), ("post", 0), ("pre", 0), ("peri", 60))):
  """Loss 2.0 at 3e-3 (+0.1 per LR step below); above it pre and peri rise 0.05 per step,
  post `post_cliff` (+0.01 s); without warm-up pre pays `pre_warmup_cost` at every LR, post
  `post_warmup_cost` (+0.01 s)."""
  from experiments.presets import PROTOCOL_LRS
  runs = []
  for p, w in settings:
    for i, lr in enumerate(PROTOCOL_LRS["cpu"]):
      for s in seeds:
        rise = (post_cliff + 0.01 * s) if p == "post" else 0.05
        loss = 2.0 + (0.1 * (2 - i) if i < 2 else rise * (i - 2))
        if w == 0:
          loss += (post_warmup_cost + 0.01 * s) if p == "post" else pre_warmup_cost
        runs.append(_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s}, loss))
  return runs


def test_prose_corpus_makes_both_headline_calls_at_the_code_corpus_margins():
  from experiments import prose_corpus
  points = prose_corpus.get_sweep("cpu")
  assert len(points) == 135 and all(p["data.suffixes"] == ".bzz" for p in points)
  assert points[:75] == prose_corpus.headline_points("cpu")
  assert {p["data.source_dir"] for p in points} == {"/usr/share/sword/modules/texts/ztext"}
  # Post's trimmed sensitivity (0 + c + 2c) / 3 = c against pre's 0.05: 0.3 + 0.01 s - 0.05.
  lines = prose_corpus.analyze(_prose_runs(0.3, 0.3))
  assert _verdict(lines).startswith("**Agrees.**")
  half = T_975_2 * 0.01 / math.sqrt(3)
  assert (f"post-norm's trimmed LR sensitivity minus pre-norm's: +0.260 ± {half:.3f} nats/token "
          "(3 seeds); its 95% interval lies above the margin 0.1") in "\n".join(lines)
  # Issue 68: the warm-up claim's two halves, each its own call; post minus pre described.
  assert (f"post-norm needs warm-up: its cost of dropping it lies above the margin 0.05 (+0.310 "
          f"± {half:.3f}); pre-norm does not need warm-up: its cost of dropping it lies below "
          "the margin 0.05 (+0.020 ± 0.000)") in _verdict(lines)
  assert (f"- described, not called: post-norm's cost minus pre-norm's: +0.290 ± {half:.3f} "
          "nats/token (3 seeds)") in lines
  # Post flat like pre, but still paying for no warm-up: two of the three calls hold.
  assert _verdict(prose_corpus.analyze(_prose_runs(0.05, 0.3))).startswith("**Partly agrees.**")
  # Post flat and paying 0.03 ± 0.025 (across 0.05), pre paying 0.02: pre's half alone holds.
  assert _verdict(prose_corpus.analyze(_prose_runs(0.05, 0.02))).startswith("**Partly agrees.**")
  # Post pays 0.5, pre 0.2: post minus pre (0.3) clears the margin, as the old call read it,
  # but pre-norm pays more than the margin too: its half fails on its own.
  assert _verdict(prose_corpus.analyze(_prose_runs(0.3, 0.5, 0.2))).startswith(
      "**Partly agrees.**")
  assert _verdict(prose_corpus.analyze(_prose_runs(0.05, 0.0, 0.3))).startswith("**Disagrees.**")
  assert [v[:22] for v in prose_corpus.REGISTRATION.values()] == [
      "pre-registered at 942c", "post hoc: replaces the", "post hoc: replaces the"]
  no_warmup_yet = [r for r in _prose_runs(0.3, 0.3) if r.overrides["optim.warmup_steps"]]
  assert _verdict(prose_corpus.analyze(no_warmup_yet)).startswith("**Inconclusive.**")


def test_prose_corpus_reads_its_warmup_halves_on_the_confirmatory_seeds_alone():
  """Issue 68: the halves were chosen on seeds 0-2; seeds 3-5 (post and pre, with warm-up and
  without) are fixed before their runs, and once they have run the halves read them alone,
  while the LR sensitivity call keeps the seeds it was pre-registered on. Here seeds 0-2 find
  post-norm's cost of 0.02 below the margin (partly agrees), seeds 3-5 a cost of 0.3 above it
  and a post-norm as flat as pre-norm (which would sink the sensitivity call if it read them)."""
  from experiments import prose_corpus
  from transformer import study
  from transformer.report import robustness
  from transformer.sweep import points as sweep_points
  every = prose_corpus.get_sweep("cpu")
  manifest = sweep_points.read_manifest(os.path.join(REPO_ROOT, "experiments", "results",
                                                     "prose_corpus"))["points"]
  assert [m["overrides"] for m in manifest] == every  # the committed points, the first 75's
  assert [m["name"] for m in manifest] == [  # names as before the confirmatory seeds
      *sweep_points.point_names(every[:75]), *sweep_points.point_names(every)[75:]]
  points = every[75:]
  assert len(points) == 60 and {p["seed"] for p in points} == {3, 4, 5}
  assert {(p[a.PLACEMENT], p["optim.warmup_steps"]) for p in points} == {
      ("post", 60), ("pre", 60), ("post", 0), ("pre", 0)}
  explored = _prose_runs(0.3, 0.02)
  before = prose_corpus.analyze(explored)
  assert "The warm-up halves' confirmatory seeds 3-5 (fixed before their runs" in "\n".join(before)
  confirm = _prose_runs(0.05, 0.3, seeds=range(3, 6), settings=(
      ("post", 60), ("pre", 60), ("post", 0), ("pre", 0)))
  lines = prose_corpus.analyze(explored + confirm)
  half = T_975_2 * 0.01 / math.sqrt(3)
  assert _verdict(lines).startswith(
      f"**Agrees.** On English prose, post-norm's larger LR sensitivity holds (+0.260 ± "
      f"{half:.3f} against the margin 0.1); post-norm needs warm-up: its cost of dropping it "
      f"lies above the margin 0.05 (+0.340 ± {half:.3f})")
  assert "Seeds 0-2, the LR sensitivity call, with warm-up 60: " in "\n".join(lines)
  assert "Seeds 3-5, the warm-up halves:" in lines
  assert lines[-1].startswith(
      "On the exploratory seeds 0-2 (the runs the call was chosen on; described, not the call) "
      "the same test partly agrees: post-norm is not resolved: its cost of dropping it lies "
      f"across the margin 0.05 (+0.030 ± {half:.3f})")
  _, described = robustness.reported_verdict(study.load("experiments/prose_corpus.py"),
                                             explored + confirm)
  assert [d.split(":")[0] for d in described] == [
      "post-norm's trimmed LR sensitivity minus pre-norm's", "post's cost of dropping warm-up",
      "pre's cost of dropping warm-up"]
  assert "seed 3 +0.330" in described[1] and "seed 0" not in described[1]


def test_warmup_long_follows_warmup_placements_answers_to_2400_steps():
  """The atlas's "Which placements need warm-up?" at 2,400 steps (issue 69): warmup_long's
  post and pre costs beside warmup_placement's 600-step costs against warm-up 60, quoted word
  for word from its committed report, each in its seed set's section (the confirmatory 6-8
  above "Seeds 0-2, exploratory", the exploratory 0-2 below it), worded by atlas_long's rule
  (side of each 95% interval against +-0.05, transcribed here); the placements warmup_long does
  not run say so."""
  from experiments import warmup_long
  with open(os.path.join(REPO_ROOT, "experiments", "results", "warmup_placement", "report.md"),
            encoding="utf-8") as f:
    confirmatory, exploratory = f.read().split("Seeds 0-2, exploratory (described):")
  for quotes, section in ((warmup_long.AT_600, exploratory),
                          (warmup_long.AT_600_CONFIRMATORY, confirmatory)):
    for p, (mean, half) in quotes.items():
      assert (f"- {p}'s cost of no warm-up against warm-up 60: {mean:+.3f} ± {half:.3f} "
              "nats/token (3 seeds)") in section, p
  assert "mix" not in warmup_long.AT_600_CONFIRMATORY and "- mix's" not in confirmatory
  assert warmup_long.FOLLOWS == ("warmup_placement",)

  def side(mean, half):
    lo, hi = mean - half, mean + half
    return ("above" if lo > 0.05 else "below" if hi < -0.05
            else "inside" if -0.05 < lo and hi < 0.05 else None)

  # Post pays 0.3 + 0.01 s (above), pre 0.02 flat (inside): post holds, pre (across 0.05 at
  # 600 steps on seeds 0-2, above it on seeds 6-8) is resolved inside the margin on seeds 0-2
  # and shrinks under it on the confirmatory seeds.
  def rows_of(seeds, confirmatory):
    runs = [_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
                 1.4 + 0.1 * abs(i - 1) + ((0.3 + 0.01 * s if p == "post" else 0.02)
                                           if w == 0 else 0.0))
            for p, window in warmup_long.WINDOW["cpu"].items() for w in (0, 240)
            for i, lr in enumerate(window) for s in seeds]
    return dict((r[0].split("'")[0], r[1:]) for r in warmup_long.follow_ups(
        warmup_long.measure(runs), confirmatory)["warmup_placement"])

  half = T_975_2 * 0.01 / math.sqrt(3)
  assert side(0.290, 0.040) == side(0.310, half) == side(0.266, 0.101) == "above"
  assert side(0.078, 0.064) is None and side(0.020, 0.0) == "inside"
  assert side(0.071, 0.005) == "above"
  rows = rows_of(range(3), False)
  assert rows["post"] == ("+0.290 ± 0.040 (seeds 0-2)", f"+0.310 ± {half:.3f} (seeds 0-2)",
                          "holds")
  assert rows["pre"] == ("+0.078 ± 0.064 (seeds 0-2)", "+0.020 ± 0.000 (seeds 0-2)",
                         "resolved (inside the margin)")
  for p in ("peri", "deepnorm", "mix", "admin"):
    assert rows[p][1:] == (None, warmup_long.NOT_FOLLOWED)
  rows = rows_of(range(3, 6), True)
  assert rows["post"] == ("+0.266 ± 0.101 (seeds 6-8)", f"+0.340 ± {half:.3f} (seeds 3-5)",
                          "holds")
  assert rows["pre"] == ("+0.071 ± 0.005 (seeds 6-8)", "+0.020 ± 0.000 (seeds 3-5)",
                         "shrinks under the margin")
  assert rows["mix"] == ("+0.129 ± 0.074 (seeds 0-2)", None, warmup_long.NOT_FOLLOWED)
  assert rows["admin"] == ("+0.148 ± 0.095 (seeds 6-8)", None, warmup_long.NOT_FOLLOWED)


def test_warmup_long_makes_warmup_stabilitys_call_at_2400_steps():
  from experiments import warmup_long
  points = warmup_long.get_sweep("cpu")
  assert len(points) == 84 and {p["train.num_steps"] for p in points} == {2400}
  assert {p["optim.warmup_steps"] for p in points} == {0, 240}
  # The extension beyond post-norm's window edges comes last, 3 seeds per LR; then the same
  # 42 cells on the confirmatory seeds, none run before.
  assert [(p["optim.warmup_steps"], p["optim.learning_rate"]) for p in points[36:42]] == \
      [(0, 1e-4)] * 3 + [(240, 1e-2)] * 3
  assert {p["seed"] for p in points[:42]} == {0, 1, 2}
  assert [{k: v for k, v in p.items() if k != "seed"} for p in points[42:]] == [
      {k: v for k, v in p.items() if k != "seed"} for p in points[:42]]
  assert {p["seed"] for p in points[42:]} == set(warmup_long.CONFIRMATORY_SEEDS) == {3, 4, 5}

  def runs(post_cost):
    return [_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
                 1.4 + 0.1 * abs(i - 1) + 0.01 * s
                 + ((post_cost + 0.01 * s if p == "post" else 0.02) if w == 0 else 0.0))
            for p, window in warmup_long.WINDOW["cpu"].items() for w in (0, 240)
            for i, lr in enumerate(window) for s in range(3)]
  half = T_975_2 * 0.01 / math.sqrt(3)
  lines = runs(0.3)
  said = _verdict(warmup_long.analyze(lines))
  assert said.startswith("**Agrees.**") and f"+0.290 ± {half:.3f} nats/token" in said
  assert (f"post-norm needs warm-up: its cost of dropping it lies above the margin 0.05 (+0.310 "
          f"± {half:.3f})") in said
  assert "pre-norm does not need warm-up" in said
  # Post pays 0.01 s, under the margin: its half fails, pre's holds (the relative statistic,
  # -0.010, would have disagreed).
  said = _verdict(warmup_long.analyze(runs(0.0)))
  assert said.startswith("**Partly agrees.**") and "post-norm does not need warm-up" in said


def test_warmup_long_reads_the_confirmatory_seeds_alone_once_they_have_run():
  """Seeds 0-2: post pays 0.3, pre 0.02 (agrees); seeds 3-5: post pays 0.01 (its half fails):
  the verdict is seeds 3-5's, seeds 0-2's reading is described below it."""
  from experiments import warmup_long
  cost = lambda p, s: (0.3 if s < 3 else 0.01) if p == "post" else 0.02
  runs = [_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
               1.4 + 0.1 * abs(i - 1) + 0.01 * (s % 3) + (cost(p, s) if w == 0 else 0.0))
          for p, window in warmup_long.WINDOW["cpu"].items() for w in (0, 240)
          for i, lr in enumerate(window) for s in range(6)]
  lines = warmup_long.analyze(runs)
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert "post-norm does not need warm-up" in _verdict(lines)
  assert "The verdict reads the confirmatory seeds 3-5 alone" in lines[2]
  assert lines[-1].startswith("On the exploratory seeds 0-2 (the runs the call was chosen on; "
                              "described, not the call) the same test agrees: After 600 steps: "
                              "post-norm needs warm-up")
  summary = warmup_long.summarize(runs)
  assert summary["verdict"] == "partly agrees" and "post-norm does not need" in summary[
      "numbers"][0]
  before = warmup_long.analyze([r for r in runs if r.seed < 3])
  assert _verdict(before).startswith("**Agrees.**")
  assert "The confirmatory seeds 3-5 have not run yet" in before[2]
