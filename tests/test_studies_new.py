"""The verdicts of depth, warmup_length, norms and long_training
(experiments/*.py) on constructed runs whose answer is known: "Agrees" when the data follow the
claim, not when they do not."""

import math

import pytest

from experiments import analysis as a
from experiments import depth, long_training, norms, warmup_length
from transformer.report import runs as report_runs
from transformer.sweep import points as sw

LN_V = math.log(259)


def _run(overrides, status="finished", final_loss=2.0, num_steps=200):
  metrics = {"train": [{"step": 1, "split": "train", "loss": LN_V}],
             "eval": [] if status == "diverged" else
             [{"step": num_steps, "split": "eval", "loss": final_loss}]}
  r = report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                 num_steps, "/nonexistent", metrics)
  r.status = status
  return r


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


# --- depth ------------------------------------------------------------------------------------

# One LR per placement, as the runs before the protocol had (their 6 placements).
OLD_DEPTH_LRS = {"post": 1e-3, "pre": 1e-2, "peri": 1e-2, "deepnorm": 3e-3, "admin": 3e-3,
                 "mix": 1e-2}


def _depth_runs(post_fails_at=None, pre_fails_at=None):
  runs = []
  for p in depth.SHOWN:
    for d in (3, 6, 12, 24):
      for w in (0, 20):
        for s in range(3):
          fails = {"post": post_fails_at, "pre": pre_fails_at}.get(p)
          bad = fails is not None and d >= fails
          runs.append(_run({a.PLACEMENT: p, a.LR: OLD_DEPTH_LRS[p], "model.num_layers": d,
                            "optim.warmup_steps": w, "seed": s},
                           status="diverged" if bad else "finished",
                           final_loss=2.0 - 0.01 * d + 0.01 * s))
  return runs


def test_depth_finds_where_post_norm_stops_training():
  lines = depth.analyze(_depth_runs(post_fails_at=12))
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  row = next(line for line in lines if line.startswith("| post | 6 / 6 |"))
  assert row.count("6 / 6") == len(a.TOLERANCES)  # trains up to 6 layers at every X
  assert "| pre | 24 / 24 |" in text
  # Every placement trains at every depth: post neither fails nor falls behind pre.
  lines = depth.analyze(_depth_runs())
  assert _verdict(lines).startswith("**Disagrees.**")
  assert "post-norm trains at every depth up to 24" in _verdict(lines)
  # Pre-norm failing too: only the post-norm half of the claim holds.
  lines = depth.analyze(_depth_runs(post_fails_at=12, pre_fails_at=24))
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert "pre also stop(s) training" in _verdict(lines)


def test_depth_states_each_placements_depth_cost_paired_by_seed():
  """Loss 2.0 - 0.01 depth + 0.01 seed: every deeper stack is 0.01 per layer cheaper, the same
  at every seed (so the interval has no width); a diverged run counts as ln V."""
  text = "\n".join(depth.analyze(_depth_runs(post_fails_at=12)))
  assert "- pre, 24 minus 3 layers: -0.210 ± 0.000 nats/token (3 seeds)" in text
  # post diverges from 12 layers: its cost there is a diverged run's clipped loss minus 1.97.
  cost = next(l for l in text.splitlines() if l.startswith("- post, 12 minus 3 layers: "))
  assert 3.4 < float(cost.split(": ")[1].split(" ")[0]) < LN_V - 1.97, cost


def test_depth_waits_for_runs_that_have_not_ended():
  """A sweep cut off midway: pre-norm's 24-layer runs have not run. A run that has not ended is
  not one that failed to train, so there is no call yet (not 'pre also stops training')."""
  runs = _depth_runs(post_fails_at=12)
  for r in runs:
    if r.overrides[a.PLACEMENT] == "pre" and r.overrides["model.num_layers"] == 24:
      r.status, r.metrics = "missing", {}
  said = _verdict(depth.analyze(runs))
  assert said.startswith("**Inconclusive.**") and "6 of the" in said, said
  assert _verdict(depth.analyze(_depth_runs(post_fails_at=12))).startswith("**Agrees.**")


def test_depth_judges_training_over_the_tolerance():
  runs = _depth_runs()
  for r in runs:  # post ends 0.4 nats higher from 12 layers on, never diverges
    if r.overrides[a.PLACEMENT] == "post" and r.overrides["model.num_layers"] >= 12:
      r.metrics["eval"][-1]["loss"] += 0.4
  lines = depth.analyze(runs)
  text = "\n".join(lines)
  row = next(line for line in lines if line.startswith("| post |") and "/" in line)
  cells = [c.strip() for c in row.split("|")[2:-1]]
  # Judged against post's own best at 6 layers or fewer (1.94 + 0.01 seed): 12 layers end
  # 0.34 above it.
  assert cells == ["6 / 6" if t < 0.34 else "24 / 24" for t in a.TOLERANCES]
  assert "stops training at some depth for X in [0, 0.34)" in text
  assert _verdict(lines).startswith("**Agrees.**")  # at X = 0.3
  # A placement judged against itself: one that is worse than the others at every depth by
  # the same amount (a smaller best LR converging slower) still trains at every depth.
  runs = _depth_runs()
  for r in runs:
    if r.overrides[a.PLACEMENT] == "post":
      r.metrics["eval"][-1]["loss"] += 0.5
  row = next(line for line in depth.analyze(runs) if line.startswith("| post |") and "/" in line)
  assert row.count("24 / 24") == len(a.TOLERANCES)


def test_depth_other_rule_counts_every_healthy_run_as_trained(monkeypatch):
  """The robustness section's "other rule for trained" (finished healthily) reaches the depth
  study: post ending 0.4 above its 6-layer best at 12 layers (and level with pre at 24) fails
  at X = 0.3 under the study's rule and trains under the other; a diverged run fails under
  both."""
  runs = _depth_runs()
  for r in runs:
    if r.overrides[a.PLACEMENT] == "post" and r.overrides["model.num_layers"] == 12:
      r.metrics["eval"][-1]["loss"] += 0.4
  assert _verdict(depth.analyze(runs)).startswith("**Agrees.**")
  monkeypatch.setattr(a, "SWAP_RULE", True)
  assert _verdict(depth.analyze(runs)).startswith("**Disagrees.**")
  assert _verdict(depth.analyze(_depth_runs(post_fails_at=12))).startswith("**Agrees.**")


def test_depth_counts_collapse_as_not_trained():
  runs = _depth_runs()
  for r in runs:
    if r.overrides[a.PLACEMENT] == "post" and r.overrides["model.num_layers"] == 24:
      r.status = "collapsed"
  row = next(line for line in depth.analyze(runs) if line.startswith("| post |") and "/" in line)
  assert row.count("12 / 12") == len(a.TOLERANCES)


def test_protocol_names_one_lr_per_placement_not_a_grid(tmp_path):
  import json
  from configs import default
  (tmp_path / "config.json").write_text(json.dumps(default.get_config().to_dict(), default=str))
  runs = _depth_runs()
  for r in runs:
    r.workdir = str(tmp_path)
  protocol = depth.analyze(runs)[0]
  assert protocol.startswith("Protocol:") and "config.json files are missing" not in protocol
  assert "one LR per placement: post 0.001, pre 0.01, peri 0.01" in protocol
  assert "LR grid" not in protocol and "decoder of 3, 6, 12, 24 layers" in protocol
  grid = _warmup_runs()
  for r in grid:
    r.workdir = str(tmp_path)
  assert "LR grid 0.001, 0.003, 0.01, 0.03." in a.protocol(grid)  # a grid stays a grid


def test_depth_figures_and_summary(tmp_path):
  runs = _depth_runs(post_fails_at=12)
  written = depth.figures(runs, str(tmp_path))
  assert [f for _, f in written] == [depth.FIGURE, depth.TOLERANCE_FIGURE]
  assert all((tmp_path / f).stat().st_size > 1000 for _, f in written)
  s = depth.summarize(runs)
  assert s["verdict"] == "agrees" and s["figure"] == depth.FIGURE
  assert s["placements"]["post"] == {"deepest depth trained at X=0.3, no warm-up / warm-up 20":
                                     "6 / 6"}


def test_depth_counts_a_loss_gap_at_the_largest_depth():
  runs = _depth_runs()
  for r in runs:  # post ends 0.2 nats worse than pre at 24 layers (within X = 0.3): trains
    if r.overrides[a.PLACEMENT] == "post" and r.overrides["model.num_layers"] == 24:
      r.metrics["eval"][-1]["loss"] += 0.2
  lines = depth.analyze(runs)
  assert _verdict(lines).startswith("**Agrees.**") and "ends worse than pre-norm" in _verdict(lines)


def test_depth_sweep_is_the_protocols_at_each_best_and_the_matched_lr():
  from experiments import lr_sensitivity, warmup_stability
  points = depth.get_sweep("cpu")
  lrs = {(p[a.PLACEMENT], p[a.LR]) for p in points}
  assert lrs == set(depth.BEST_6["cpu"].items()) | {(q, depth.MATCHED["cpu"])
                                                    for q in depth.PLACEMENTS}
  per_setting = len(depth.DEPTHS["cpu"]) * 2 * 3  # depths x warm-ups x seeds
  assert len(points) == per_setting * len(lrs)
  assert [p["model.num_layers"] for p in points] == sorted(p["model.num_layers"] for p in points)
  # Deeper stacks are scanned; the 6-layer points are the runs lr_sensitivity (warm-up) and
  # warmup_stability (none) train, so --reuse_runs_from links them.
  assert all(p.get("model.scan_layers") == (p["model.num_layers"] > 6) or
             ("model.scan_layers" not in p and p["model.num_layers"] == 6) for p in points)
  others = lr_sensitivity.get_sweep("cpu") + warmup_stability.get_sweep("cpu")
  shallow = [p for p in points if p["model.num_layers"] == 6]
  assert shallow and all(p in others for p in shallow)


def _protocol_depth_runs(post_fails_at=12, post_matched_fails_at=12):
  """Post at its best LR (1e-3) and the matched one (3e-3), the others at 3e-3 only; at 6
  layers post's 3e-3 ends 0.1 nats worse than its 1e-3 (deeper, as well as it)."""
  runs = []
  for p in depth.PLACEMENTS:
    for lr in sorted({depth.BEST_6["cpu"][p], depth.MATCHED["cpu"]}):
      fails = {1e-3: post_fails_at, 3e-3: post_matched_fails_at}[lr] if p == "post" else None
      for d in (6, 12, 24):
        for w in (0, 60):
          for s in range(3):
            bad = fails is not None and d >= fails
            loss = 2.0 - 0.01 * d + 0.01 * s + (0.1 if p == "post" and lr == 3e-3 and d == 6
                                                 else 0)
            runs.append(_run({a.PLACEMENT: p, a.LR: lr, "model.num_layers": d,
                              "optim.warmup_steps": w, "seed": s},
                             status="diverged" if bad else "finished", final_loss=loss,
                             num_steps=600))
  return runs


def test_depth_judges_each_best_lr_and_again_at_the_matched_one():
  runs = _protocol_depth_runs()
  assert depth.judged_lrs(runs) == {"post": 1e-3, "pre": 3e-3, "deepnorm": 3e-3, "admin": 3e-3}
  assert depth.matched_lr(runs) == 3e-3
  lines = depth.analyze(runs)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "each placement at its best LR (post 0.001, pre 0.003" in "\n".join(lines)
  matched = next(line for line in lines if line.startswith("Matched LR 0.003"))
  assert matched.endswith("judged there, the data agrees.")
  # Post trains at every depth at the matched LR: the call there flips, the verdict does not.
  lines = depth.analyze(_protocol_depth_runs(post_matched_fails_at=None))
  assert _verdict(lines).startswith("**Agrees.**")
  matched = next(line for line in lines if line.startswith("Matched LR 0.003"))
  assert "post-norm trains at every depth up to 24" in matched
  assert matched.endswith("judged there, the data disagrees.")
  # The runs from before the protocol (one LR per placement) have no matched LR.
  assert any(line.startswith("Matched LR: none") for line in depth.analyze(_depth_runs(12)))


# --- warmup_length -----------------------------------------------------------------------------

def _warmup_runs(post_grows=True, pre_moves=False):
  lrs = [1e-3, 3e-3, 1e-2, 3e-2]
  runs = []
  for p in ("post", "pre"):
    for i, w in enumerate((0, 20, 50, 100, 200)):
      # The largest stable LR's grid index at this warm-up length.
      top = (min(i, 3) if post_grows else 0) if p == "post" else (min(i, 3) if pre_moves else 2)
      for j, lr in enumerate(lrs):
        for s in range(3):
          bad = j > top
          runs.append(_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
                           status="diverged" if bad else "finished",
                           final_loss=2.0 - 0.1 * j + 0.01 * s))
  return runs


def test_warmup_length_sees_post_norm_gain_stable_lr():
  """The calls (issue 68): post's cost of no warm-up against each fixed length (2.0 without,
  1.9 / 1.8 / 1.7 / 1.7 at each length's best LR) above 0.05 at every length; pre's (0: its
  best LR is the same at every length) below it. Post's minus pre's against its best length
  is described."""
  lines = warmup_length.analyze(_warmup_runs())
  assert _verdict(lines).startswith(
      "**Agrees.** Post-norm needs warm-up: its cost of dropping it lies above the margin 0.05 "
      "against warm-up 20 (+0.100 ± 0.000), 50 (+0.200 ± 0.000), 100 (+0.300 ± 0.000), 200 "
      "(+0.300 ± 0.000); pre-norm does not need warm-up: its cost of dropping it lies below the "
      "margin 0.05 against warm-up 20 (+0.000 ± 0.000), 50")
  assert ("Described, not called: post-norm's cost minus pre-norm's: +0.300 ± 0.000 nats/token "
          "(3 seeds), each against its own best warm-up length") in _verdict(lines)
  assert "0.001 -> 0.003 -> 0.01 -> 0.03 -> 0.03" in _verdict(lines)  # described beside it
  # The matched-LR section: every setting at 3e-3; post without warm-up diverged there (clipped
  # at its initial loss), every other setting ends 2.0 - 0.1 + 0.01 per seed.
  assert "| post | 5.56 ± 0 | 1.91 ± 0.025 | 1.91 ± 0.025 | 1.91 ± 0.025 | 1.91 ± 0.025 |" in lines
  assert _verdict(warmup_length.analyze(_warmup_runs(post_grows=False))).startswith(
      "**Partly agrees.** Post-norm does not need warm-up")  # neither pays: pre's half holds
  assert _verdict(warmup_length.analyze(_warmup_runs(post_grows=False, pre_moves=True))
                  ).startswith("**Disagrees.**")


def test_warmup_length_judges_training_over_the_tolerance(tmp_path):
  runs = _warmup_runs(post_grows=False)
  for r in runs:  # post at the longest warm-up: the LRs above the best end 0.5 worse, finite
    if (r.overrides[a.PLACEMENT] == "post" and r.overrides["optim.warmup_steps"] == 200
        and r.status == "diverged"):
      r.status = "finished"
      r.metrics["eval"] = [{"step": 200, "split": "eval", "loss": 2.5 + 0.01 * r.seed}]
  lines = warmup_length.analyze(runs)
  text = "\n".join(lines)
  row = next(line for line in lines if line.startswith("| post | 200 |"))
  cells = [c.strip() for c in row.split("|")[3:3 + len(a.TOLERANCES)]]
  assert cells == ["0.001" if t < 0.5 else "0.03" for t in a.TOLERANCES]
  assert "grows with the warm-up length for X in [0.5, 1]" in text
  # Post's best LR is 1e-3 at every length: no cost, so only pre's half holds.
  assert _verdict(lines).startswith("**Partly agrees.** Post-norm does not need warm-up")
  written = warmup_length.figures(runs, str(tmp_path))
  assert (tmp_path / written[0][1]).stat().st_size > 1000
  s = warmup_length.summarize(runs)
  assert s["verdict"] == "partly agrees"
  assert s["placements"]["post"] == {"largest LR trained at X=0.3 over warm-up 0/20/50/100/200":
                                     "0.001 / 0.001 / 0.001 / 0.001 / 0.001"}


def _length_runs(gain, seeds=range(3)):
  """Post and pre at warm-ups 0, 20, 50: loss 2.0 + 0.1 per LR step from 3e-3 + 0.01 s, less
  `gain(placement, warmup, seed)` (0 at warm-up 0)."""
  lrs = [1e-3, 3e-3, 1e-2]
  return [_run({a.PLACEMENT: p, "optim.warmup_steps": w, a.LR: lr, "seed": s},
               final_loss=2.0 + 0.1 * abs(i - 1) + 0.01 * s - (gain(p, w, s) if w else 0.0))
          for p in ("post", "pre") for w in (0, 20, 50) for i, lr in enumerate(lrs)
          for s in seeds]


def test_warmup_length_confirmatory_seeds_come_after_the_150_points_and_are_new():
  points = warmup_length.get_sweep("cpu")
  assert len(points) == 300 and {p["seed"] for p in points[:150]} == {0, 1, 2}
  assert {p["seed"] for p in points[150:]} == set(warmup_length.CONFIRMATORY_SEEDS) == {6, 7, 8}
  assert sw.point_names(points)[:150] == sw.point_names(points[:150])  # the committed names


def test_warmup_length_reads_the_confirmatory_seeds_alone_once_they_have_run():
  """Seeds 0-2: pre gains 0.01 from warm-up (its half holds, agrees); seeds 6-8: pre gains
  0.2 (its half fails): the verdict is theirs, seeds 0-2's reading is described below it."""
  gain = lambda p, w, s: 0.5 if p == "post" else (0.2 if s >= 6 else 0.01)
  runs = _length_runs(gain, seeds=[0, 1, 2, 6, 7, 8])
  lines = warmup_length.analyze(runs)
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert "pre-norm needs warm-up" in _verdict(lines)
  assert "The verdict reads the confirmatory seeds 6-8 alone" in lines[2]
  assert "Seeds 6-8, the verdict's:" in lines and "Seeds 0-2, exploratory (described):" in lines
  assert lines[-1].startswith("On the exploratory seeds 0-2 (the runs the call was chosen on; "
                              "described, not the call) the same test agrees: ")
  assert warmup_length.summarize(runs)["verdict"] == "partly agrees"
  before = warmup_length.analyze(_length_runs(gain))  # the confirmatory seeds not run yet
  assert _verdict(before).startswith("**Agrees.**")
  assert "The confirmatory seeds 6-8 have not run yet" in before[2]


@pytest.mark.parametrize("post, pre, word, found", [
    # Post gains 0.5 and pre 0.2 at every length: post minus pre (0.3) cleared the margin (the
    # old call agreed), but pre pays more than the margin too.
    ({20: 0.5, 50: 0.5}, {20: 0.2, 50: 0.2}, "**Partly agrees.**", "pre-norm needs warm-up"),
    # Pre's cost above the margin against 20, below it against 50: not resolved.
    ({20: 0.5, 50: 0.5}, {20: 0.2, 50: -0.1}, "**Partly agrees.**",
     "pre-norm is not resolved: its cost of dropping it lies above the margin 0.05 against "
     "warm-up 20 (+0.200 ± 0.000); below it against warm-up 50 (-0.100 ± 0.000)"),
    ({20: 0.5, 50: 0.5}, {20: 0.01, 50: 0.0}, "**Agrees.**", "pre-norm does not need"),
    # Post's cost clears the margin against 50 only, pre's as above: neither half resolved.
    ({20: 0.02, 50: 0.5}, {20: 0.2, 50: -0.1}, "**Inconclusive.**",
     "Post-norm is not resolved: its cost of dropping it lies above the margin 0.05 against "
     "warm-up 50 (+0.510 ± 0.025); across it against warm-up 20 (+0.030 ± 0.025)")])
def test_warmup_length_halves_hold_against_every_fixed_length(post, pre, word, found):
  gain = lambda p, w, s: ((post if p == "post" else pre)[w] + (0.01 * s if p == "post" else 0))
  lines = warmup_length.analyze(_length_runs(gain))
  assert _verdict(lines).startswith(word) and found in _verdict(lines)
  assert set(warmup_length.REGISTRATION) == {
      "post-norm's cost of no warm-up above the margin against every length",
      "pre-norm's cost of no warm-up below the margin against every length"}


# --- norms -----------------------------------------------------------------------------------

def _norm_runs(dyt_gap=0.0, rms_gap=0.0, none_gap=0.5):
  runs = []
  for v in norms.VARIANTS:
    name = v["model.norm"]
    gap = {"dyt": dyt_gap, "rmsnorm": rms_gap, "none": none_gap}.get(name, 0.0)
    if isinstance(gap, dict):  # DyT's gap by alpha_0
      gap = gap[v["model.dyt_alpha_init"]]
    for lr, base in ((1e-3, 2.5), (1e-2, 2.0)):
      for s in range(3):
        runs.append(_run({"model.norm_placement": "pre", **v, a.LR: lr, "seed": s},
                         final_loss=base + gap + 0.01 * s + 0.001 * (s * s)))
  return runs


def test_norms_verdict_reads_the_gap_to_layernorm():
  lines = norms.analyze(_norm_runs())
  text = "\n".join(lines)
  assert _verdict(lines).startswith("**Agrees.**")
  assert "| dyt a0=0.05 | 0.01 |" in text and "| none | 0.01 |" in text
  row = next(line for line in lines if line.startswith("| none |"))
  assert "0.5" in row.split("|")[4]  # minus LayerNorm, paired by seed
  lines = norms.analyze(_norm_runs(dyt_gap=0.2))
  assert _verdict(lines).startswith("**Partly agrees.**")
  assert "DyT at alpha_0 = 0.5 does not match" in _verdict(lines)
  assert _verdict(norms.analyze(_norm_runs(dyt_gap=0.2, rms_gap=0.2, none_gap=0.0))
                  ).startswith("**Disagrees.**")


def test_norms_verdict_says_what_the_other_alphas_gave():
  """DyT at the paper's alpha_0 decides the call; the other alphas are named: the one that
  matches LayerNorm ("with tuning"), or, when none does, the closest and its gap."""
  said = _verdict(norms.analyze(_norm_runs(dyt_gap={0.05: 0.3, 0.1: 0.2, 0.2: 0.1, 0.5: 0.15})))
  assert said.startswith("**Partly agrees.**")
  assert "nor at any other alpha_0 tried (the closest, dyt a0=0.2: 0.1 ± " in said, said
  said = _verdict(norms.analyze(_norm_runs(dyt_gap={0.05: 0.3, 0.1: 0.2, 0.2: 0.0, 0.5: 0.15})))
  assert "with tuning it does (dyt a0=0.2)" in said and "nor at" not in said, said


def test_norms_does_not_judge_a_norm_whose_runs_have_not_run():
  """A study cut off midway: DyT at 0.5 and no norm have no finished runs yet. They are named
  as not judged, not called 'does not match' or 'not clearly worse'."""
  def not_run(r):
    return r.overrides["model.norm"] == "none" or r.overrides.get("model.dyt_alpha_init") == 0.5
  runs = _norm_runs(dyt_gap=0.2)
  for r in filter(not_run, runs):
    r.status, r.metrics = "missing", {}
  said = _verdict(norms.analyze(runs))
  assert "does not match" not in said and "not clearly worse" not in said, said
  assert "not judged, no finished runs to compare: dyt a0=0.5, none" in said
  assert said.startswith("**Inconclusive.**")  # RMSNorm matches, but it is one part of three


def test_norms_sweep_sets_alpha_only_for_dyt():
  points = norms.get_sweep("cpu")
  assert len(points) == 7 * 5 * 3  # LayerNorm, RMSNorm, 4 DyT alphas, none; the protocol's grid
  assert all(("model.dyt_alpha_init" in p) == (p["model.norm"] == "dyt") for p in points)
  assert {p.get("model.dyt_alpha_init") for p in points} == {None, 0.05, 0.1, 0.2, 0.5}


# --- long_training ---------------------------------------------------------------------------

def _long_runs(short, long, long_best=None):
  """`short`, `long`: final loss by placement at its best LR after 600 and 2400 steps; the
  other LRs of its window end 0.1 worse. `long_best`: {placement: index in its window of the
  long runs' best LR} (default: the middle one)."""
  runs = []
  for steps, losses in ((600, short), (2400, long)):
    for p, loss in losses.items():
      window = long_training.WINDOW["cpu"][p]
      best = window[1 if steps == 600 else (long_best or {}).get(p, 1)]
      for lr in window:
        for s in range(3):
          runs.append(_run({a.PLACEMENT: p, a.LR: lr, "seed": s, "train.num_steps": steps},
                           final_loss=loss + 0.01 * s + (0 if lr == best else 0.1),
                           num_steps=steps))
  return runs


def test_long_training_checks_the_short_run_ordering():
  same = _long_runs({"peri": 2.0, "pre": 2.1, "post": 2.3}, {"peri": 1.5, "pre": 1.6, "post": 1.7})
  lines = long_training.analyze(same)
  assert _verdict(lines).startswith("**Agrees.**")
  swap = _long_runs({"peri": 2.0, "pre": 2.1, "post": 2.3}, {"peri": 1.5, "pre": 1.7, "post": 1.6})
  assert _verdict(long_training.analyze(swap)).startswith("**Partly agrees.**")
  flip = _long_runs({"peri": 2.0, "pre": 2.1, "post": 2.3}, {"peri": 1.6, "pre": 1.7, "post": 1.4})
  assert _verdict(long_training.analyze(flip)).startswith("**Disagrees.**")
  tie = _long_runs({"peri": 2.0, "pre": 2.0, "post": 2.0}, {"peri": 1.5, "pre": 1.6, "post": 1.7})
  assert _verdict(long_training.analyze(tie)).startswith("**Inconclusive.**")
  # The long runs keep every sign but the gaps (0.01 nats) fall under the 0.02 margin.
  shrink = _long_runs({"peri": 2.0, "pre": 2.1, "post": 2.3},
                      {"peri": 1.50, "pre": 1.51, "post": 1.52})
  said = _verdict(long_training.analyze(shrink))
  assert said.startswith("**Partly agrees.**") and "reversed" not in said
  assert "sign kept (95% CI above 0), no longer resolved above the margin: peri < pre" in said
  # Every pair, not only neighbours in the mean order: pre < post is resolved here although
  # peri sits between them.
  assert "after 600 steps: peri < pre, peri < post, pre < post;" in "\n".join(lines)
  s = long_training.summarize(swap)
  assert s["verdict"] == "partly agrees" and s["figure"] == "curves.webp"
  assert "pre: 2.11 ± 0.025 after 600 steps (LR 0.003); 1.71 ± 0.025 after 2400 steps (LR 0.003)" \
      in s["numbers"]


def test_long_training_retunes_each_placement_and_compares_at_the_matched_lr():
  """Each placement is judged at its best LR of each length, found in its window (post's
  0.0003-0.01, pre's 0.001-0.01), and at the matched LR (0.003); a best LR at a window's edge
  is named in the verdict."""
  lines = long_training.analyze(_long_runs({"pre": 2.0, "post": 2.3}, {"pre": 1.5, "post": 1.7},
                                           long_best={"post": 0}))
  text = "\n".join(lines)
  assert ("| post | 0.0003, 0.001, 0.003, 0.01 → **0.001** | 0.0003, 0.001, 0.003, 0.01 → "
          "**0.0003** |") in text
  assert "| pre | 0.001, 0.003, 0.01 → **0.003** | 0.001, 0.003, 0.01 → **0.003** |" in text
  assert "gap @ 600 steps, LR 0.003" in text and "gap @ 2400 steps, LR 0.003" in text
  # At 0.003 post is 0.1 off its best (2.4, 1.8) and pre at its best (2.0, 1.5): -0.4, -0.3.
  assert "| pre − post | -0.3 ± 0 | -0.2 ± 0 | -0.4 ± 0 | -0.3 ± 0 |" in text
  said = _verdict(lines)
  assert said.startswith("**Agrees.**") and "Caveat: post's best LR after 2400 steps: 0.0003 " \
      "is the grid's smallest LR" in said


def test_long_training_sweep_reuses_the_protocol_runs_and_is_4x_longer():
  """The short points are lr_sensitivity's (the same run identity, so --reuse_runs_from links
  them); the long ones are 4x the steps and warm-up, over each placement's window."""
  from configs.default import get_config
  from experiments import lr_sensitivity
  from transformer.sweep import points as sw
  points = long_training.get_sweep("cpu")
  assert {(p["train.num_steps"], p["optim.warmup_steps"]) for p in points} == {(600, 60),
                                                                               (2400, 240)}
  assert {p["model.d_model"] for p in points} == {128}
  identity = lambda ps: [sw.run_identity(c.to_dict())
                         for c in sw.validate_points(get_config(), ps)]
  reused = set(identity(lr_sensitivity.get_sweep("cpu")))
  short = [p for p in points if p["train.num_steps"] == 600]
  long = [p for p in points if p["train.num_steps"] == 2400]
  assert len(short) == 45 and all(i in reused for i in identity(short))
  assert len(long) == 30 and not any(i in reused for i in identity(long))
  assert {(p["model.norm_placement"], p["optim.learning_rate"]) for p in long} == {
      (pl, lr) for pl, window in long_training.WINDOW["cpu"].items() for lr in window}
  assert all(long_training.MATCHED["cpu"] in w for w in long_training.WINDOW["cpu"].values())
  assert max(map(len, sw.point_names(points))) <= sw.MAX_NAME  # no hashed names


def test_protocol_names_each_optimizer_the_runs_used(tmp_path):
  """A study that varies `optim.name` (optimizer_gap) gets each optimizer named with the
  fields it reads; runs of AdamW alone keep the sentence every earlier report has."""
  import json
  from configs import default
  runs = _warmup_runs()
  for i, name in enumerate(("lion", "muon", "adamw")):
    cfg = default.get_config().to_dict()
    cfg["optim"].update(name=name)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg, default=str))
    for r in runs[i::3]:
      r.workdir = str(folder)
  text = a.protocol(runs)
  assert ("by `optim.name`: AdamW (b1 0.9, b2 0.98, eps 1e-09); Lion (b1 0.9, b2 0.98); "
          "Muon (momentum 0.95, 5 Newton-Schulz steps) on the hidden matrices and Adam (b1 0.9, "
          "b2 0.98, eps 1e-09) on the rest; with weight decay") in text
  for r in runs:
    r.workdir = str(tmp_path / "adamw")
  assert "; AdamW (b1 0.9, b2 0.98, eps 1e-09) with weight decay" in a.protocol(runs)
