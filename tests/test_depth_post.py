"""depth_post (experiments/depth_post.py): post-norm at depth with small LRs and long warm-up,
judged against the bigram level each run recorded, on constructed runs with a known answer."""

import json
import math
import os

from configs.default import get_config
from experiments import analysis as a
from experiments import depth_post
from transformer.report import runs as report_runs
from transformer.sweep import points as sw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIGRAM = 2.43


def _runs(tmp_path, loss_at, seeds=depth_post.SEEDS):
  """Every point of the cpu sweep on `seeds` (by default the exploratory ones alone, as before
  the confirmatory seeds ran), ending at `loss_at(depth, lr, warmup, seed)`."""
  workdir = tmp_path / "run"
  workdir.mkdir(exist_ok=True)
  (workdir / "baselines.json").write_text(json.dumps(
      {"unigram_nats": 3.36, "bigram_nats": BIGRAM, "train_tokens": 1, "params": 1}))
  runs = []
  for p in depth_post.get_sweep("cpu"):
    if p["seed"] not in seeds:
      continue
    o = {k: p[k] for k in (depth_post.DEPTH, a.LR, depth_post.WARM, "seed")}
    loss = loss_at(o[depth_post.DEPTH], o[a.LR], o[depth_post.WARM], o["seed"])
    r = report_runs.Run(sw.point_name(p, [p]), o, p["train.num_steps"], str(workdir),
                   {"train": [{"step": 1, "split": "train", "loss": math.log(259)}],
                    "eval": [{"step": p["train.num_steps"], "split": "eval", "loss": loss}]})
    r.status = "finished"
    runs.append(r)
  return runs


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def test_the_sweep_is_post_norm_at_three_depths_with_small_lrs_and_long_warmup():
  points = depth_post.get_sweep("cpu")
  assert len(points) == 3 * 3 * 2 * 6  # depths x LRs x warm-ups x (exploratory + confirmatory)
  assert [p["seed"] for p in points[:54]].count(2) == 18  # the first 54 as they ran
  assert {p["seed"] for p in points[54:]} == set(depth_post.CONFIRMATORY_SEEDS) == {3, 4, 5}
  assert sw.point_names(points)[:54] == sw.point_names(points[:54])  # the committed runs' names
  assert {p["model.norm_placement"] for p in points} == {"post"}
  assert {p[depth_post.WARM] for p in points} == {20, 300}  # short, and half of 600 steps
  assert {p[a.LR] for p in points} == {1e-4, 3e-4, 1e-3}
  sw.validate_points(get_config(), points)
  assert sw.sweep_report_settings(os.path.join(ROOT, "experiments", "depth_post.py"))["claim"]


def test_depth_post_agrees_when_every_deeper_stack_costs_more_than_the_margin(tmp_path):
  lines = depth_post.analyze(_runs(tmp_path, lambda d, lr, w, s: 1.9 if d == 6 else 2.5))
  assert _verdict(lines) == (
      "**Agrees.** Post-norm's depth cost, each deeper stack at its best LR and warm-up minus 6 "
      "layers at its own (nats/token, paired by seed, against ±0.3): 12 layers loses (+0.600 ± "
      "0.000); 24 layers loses (+0.600 ± 0.000).")
  assert ("- 12 layers' best: LR 0.0001, warm-up 20. 12 layers at its best setting minus 6 "
          "layers at its best (LR 0.0001, warm-up 20): +0.600 ± 0.000 nats/token (3 seeds); "
          "its 95% interval lies above the margin 0.3") in lines
  assert "- 12 layers trains: no setting." in lines  # the earlier rule, described


def test_depth_post_disagrees_when_the_long_warmup_rescues_every_depth(tmp_path):
  def loss(d, lr, w, s):
    return 1.9 + 0.01 * s if d == 6 or (lr == 1e-4 and w == 300) else 3.3
  lines = depth_post.analyze(_runs(tmp_path, loss))
  assert _verdict(lines).startswith("**Disagrees.** Post-norm's depth cost, each deeper stack")
  assert _verdict(lines).endswith(": 12 layers neither gains nor loses 0.3 (+0.000 ± 0.000); 24 "
                                  "layers neither gains nor loses 0.3 (+0.000 ± 0.000).")
  assert any(line.startswith("- 24 layers' best: LR 0.0001, warm-up 300.") for line in lines)
  assert "- 24 layers trains: LR 0.0001 warm-up 300." in lines


def test_depth_post_is_partly_right_when_only_the_deepest_stack_fails(tmp_path):
  lines = depth_post.analyze(_runs(tmp_path, lambda d, lr, w, s: {6: 1.9, 12: 2.0}.get(d, 2.5)))
  assert _verdict(lines).startswith("**Partly agrees.** ")
  assert _verdict(lines).endswith(": 12 layers neither gains nor loses 0.3 (+0.100 ± 0.000); 24 "
                                  "layers loses (+0.600 ± 0.000).")


def test_depth_post_is_inconclusive_where_a_cost_straddles_the_margin(tmp_path):
  """12 layers costs 0.25, 0.35, 0.45 by seed: 0.35 ± 0.25, across the margin 0.3."""
  lines = depth_post.analyze(_runs(tmp_path, lambda d, lr, w, s: 1.9 + (
      {6: 0.0, 12: 0.25 + 0.1 * s}.get(d, 0.6))))
  half = 4.302652729911275 * 0.1 / math.sqrt(3)  # Student's t (2 dof) x sd 0.1 / sqrt 3
  assert _verdict(lines).startswith("**Inconclusive.** ")
  assert _verdict(lines).endswith(f": 12 layers not resolved (+0.350 ± {half:.3f}); 24 layers "
                                  "loses (+0.600 ± 0.000).")


def test_depth_post_reads_each_depth_at_its_own_best_setting_by_the_mean_over_seeds(tmp_path):
  """Seed 2 is bad at 12 layers' otherwise best setting: the mean over every seed decides."""
  def loss(d, lr, w, s):
    if d != 12:
      return 1.9
    return 2.0 + (1.0 if s == 2 else 0.0) if (lr, w) == (1e-3, 300) else 2.2
  runs = _runs(tmp_path, loss)
  assert depth_post.best_setting(runs, 12) == (  # 2.2 < mean(2.0, 2.0, 3.0)
      (1e-4, 20), {0: 2.2, 1: 2.2, 2: 2.2})


def test_depth_post_gives_depth_at_equal_settings_paired_by_seed(tmp_path):
  """12 layers ends 0.1 + 0.02 per seed above the 6-layer run at every setting: the paired
  differences are 0.10, 0.12 and 0.14, so 0.12 ± t(0.975, 2) x sd / sqrt(3)."""
  lines = depth_post.analyze(_runs(tmp_path, lambda d, lr, w, s: 1.9 + s * 0.05 + (
      {6: 0.0, 12: 0.1 + 0.02 * s}.get(d, 0.6))))
  half = 4.302652729911275 * 0.02 / math.sqrt(3)
  assert f"| 12 | 0.0003 | 300 | +0.120 ± {half:.3f} nats/token (3 seeds) |" in lines
  assert "| 24 | 0.0001 | 20 | +0.600 ± 0.000 nats/token (3 seeds) |" in lines


def test_depth_post_reads_the_confirmatory_seeds_alone_once_they_have_run(tmp_path):
  """Seeds 0-2 (chosen on): 12 layers costs 0.6, agrees; seeds 3-5: 12 layers costs nothing at
  the long warm-up, so the verdict (theirs) is partly; seeds 0-2's reading is described under
  it, and the note says which seeds the verdict reads."""
  def loss(d, lr, w, s):
    if d == 6 or (s >= 3 and d == 12 and w == 300):
      return 1.9
    return 2.5
  every = depth_post.SEEDS + depth_post.CONFIRMATORY_SEEDS
  lines = depth_post.analyze(_runs(tmp_path, loss, every))
  assert _verdict(lines).startswith("**Partly agrees.** ")
  assert _verdict(lines).endswith(": 12 layers neither gains nor loses 0.3 (+0.000 ± 0.000); 24 "
                                  "layers loses (+0.600 ± 0.000).")
  assert lines[-1] == (
      "On the exploratory seeds 0-2 (the runs the call was chosen on; described, not the "
      "call) the same test agrees: Post-norm's depth cost, each deeper stack at its best LR and "
      "warm-up minus 6 layers at its own (nats/token, paired by seed, against ±0.3): 12 layers "
      "loses (+0.600 ± 0.000); 24 layers loses (+0.600 ± 0.000).")
  assert "The verdict reads the confirmatory seeds 3-5 alone" in " ".join(lines)
  first, second = (lines.index("Seeds 3-5, the verdict's:"),
                   lines.index("Seeds 0-2, exploratory (described):"))
  assert first < second and lines[first + 2].startswith("Final loss per depth")
  assert lines[second + 2].startswith("Final loss per depth")
  summary = depth_post.summarize(_runs(tmp_path, loss, every))
  assert summary["verdict"] == "partly agrees"
  assert any("+0.000 ± 0.000" in n and n.startswith("12 layers' best") for n in summary["numbers"])


def test_depth_post_says_the_call_is_not_yet_confirmed_before_the_new_seeds_run(tmp_path):
  lines = depth_post.analyze(_runs(tmp_path, lambda d, lr, w, s: 1.9 if d == 6 else 2.5))
  assert ("The confirmatory seeds 3-5 have not run yet: the verdict reads the seeds the call was "
          "chosen on, so it is not yet confirmed on new data.") in lines
  assert not any(line.startswith("On the exploratory seeds") for line in lines)
