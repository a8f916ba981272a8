"""Issue 68 point 8: seeds 3 and 4 for the calls a left-out-seed row flipped with 3 seeds
(lr_sensitivity, warmup_stability, hybrid_norm, clipping, long_runs' DyT half): the new points
come after every committed one, the runs two studies share have one config (so
`--reuse_runs_from` links them), the calls read 5 seeds where they have them and pair only the
seeds both sides have, and the reports say the new seeds are not run yet."""

import dataclasses
import os

import pytest

from experiments import analysis as a
from experiments import (clipping, hybrid_norm, long_runs, lr_sensitivity, paired,
                         warmup_stability)
from experiments.presets import PROTOCOL_LRS
from transformer import REPO_ROOT, packed_runs
from transformer.report import runs as report_runs
from transformer.sweep import points as sweep_points

GRID = PROTOCOL_LRS["cpu"]
WARMUP = "optim.warmup_steps"
CLIP = "optim.clip_norm"
STEPS = "train.num_steps"


def _settings(points, *fields):
  return sorted((tuple(p.get(f) for f in (*fields, a.LR, "seed")) for p in points), key=repr)


# study -> (points committed, the new points' (fields..., LR, seed))
ADDED = {
    "lr_sensitivity": (lr_sensitivity, 90, (a.PLACEMENT,),
                       [(p, lr, s) for p in ("pre", "post") for lr in GRID for s in (3, 4)]),
    "warmup_stability": (warmup_stability, 120, (a.PLACEMENT, WARMUP),
                         [(p, w, lr, s) for p in ("post", "pre") for w in (60, 0) for lr in GRID
                          for s in (3, 4)]),
    "hybrid_norm": (hybrid_norm, 45, (a.PLACEMENT,),
                    [(p, lr, s) for p in ("hybrid", "pre") for lr in GRID for s in (3, 4)]),
    "clipping": (clipping, 96, (CLIP, a.PLACEMENT, WARMUP),
                 [(c, p, w, lr, s) for c in (0.0, 1.0) for p in ("post", "pre")
                  for w in (0, 60) for lr in clipping.LRS["cpu"] for s in (3, 4)]),
    "long_runs": (long_runs, 39, (a.PLACEMENT, "model.norm", STEPS),
                  [("pre", n, steps, 3e-3, s) for n in (None, "dyt") for steps in (600, 2400, 9600)
                   for s in (3, 4)]),
}


@pytest.mark.parametrize("study", ADDED)
def test_the_added_seeds_come_after_every_committed_point(study):
  """The committed manifest's points are the sweep's first points, with the same names; the
  rest are seeds 3 and 4 of the settings the call reads, seed 3 whole before seed 4."""
  module, committed, fields, new = ADDED[study]
  points = module.get_sweep("cpu")
  manifest = sweep_points.read_manifest(os.path.join(REPO_ROOT, "experiments", "results", study))
  assert [p["overrides"] for p in manifest["points"]] == points[:len(manifest["points"])]
  assert [p["name"] for p in manifest["points"]] == (
      sweep_points.point_names(points)[:len(manifest["points"])])
  assert len(points) == committed + len(new)
  assert all(p["seed"] in (0, 1, 2) for p in points[:committed])
  assert _settings(points[committed:], *fields) == sorted(new, key=repr)
  assert [p["seed"] for p in points[committed:]] == sorted(p["seed"] for p in points[committed:])


def _identities(points):
  from configs.default import get_config
  return [sweep_points.run_identity(c.to_dict())
          for c in sweep_points.validate_points(get_config(), points)]


def test_the_added_seeds_two_studies_share_are_one_run():
  """warmup_stability's seeds 3-4 with warm-up are lr_sensitivity's; clipping's with the
  protocol's clipping are warmup_stability's; hybrid_norm's pre-norm ones and long_runs'
  600-step LayerNorm ones are lr_sensitivity's; the others are new runs."""
  new = {s: ADDED[s][0].get_sweep("cpu")[ADDED[s][1]:] for s in ADDED}
  ids = {s: _identities(points) for s, points in new.items()}
  lr_sens, warm = set(ids["lr_sensitivity"]), set(ids["warmup_stability"])

  def split(study, linked):
    pairs = list(zip(new[study], ids[study]))
    return [p for p, i in pairs if linked(p)], [i for p, i in pairs if linked(p)], [
        i for p, i in pairs if not linked(p)]
  _, shared, rest = split("warmup_stability", lambda p: p[WARMUP] == 60)
  assert len(shared) == 20 and set(shared) <= lr_sens and not set(rest) & lr_sens
  _, shared, rest = split("clipping", lambda p: p[CLIP] == 1.0)
  assert len(shared) == 32 and set(shared) <= warm and not set(rest) & (warm | lr_sens)
  _, shared, rest = split("hybrid_norm", lambda p: p[a.PLACEMENT] == "pre")
  assert len(shared) == 10 and set(shared) <= lr_sens and not set(rest) & lr_sens
  _, shared, rest = split("long_runs", lambda p: p[STEPS] == 600 and "model.norm" not in p)
  assert len(shared) == 2 and set(shared) <= lr_sens and not set(rest) & lr_sens
  assert len(set(ids["lr_sensitivity"]) - set().union(
      *(ids[s] for s in ADDED if s != "lr_sensitivity"))) == 0  # all its new runs are read


def _run(overrides, final_loss, status="finished", steps=600):
  metrics = {"train": [{"step": 1, "split": "train", "loss": 5.5}],
             "eval": [{"step": steps, "split": "eval", "loss": final_loss}]}
  if status == "missing":
    metrics = {}
  return report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                         steps, "/nonexistent", metrics, status)


def _missing(runs, seeds):
  """`runs` with those of `seeds` listed but not run (no metrics), as the report loads them."""
  return [dataclasses.replace(r, metrics={}, status="missing") if r.seed in seeds else r
          for r in runs]


def test_added_seeds_note_says_not_run_yet_partly_or_read():
  runs = [_run({"seed": s}, 2.0) for s in range(5)]
  say = lambda rs: paired.added_seeds_note(rs, "post- and pre-norm")
  lead = "Issue 68 point 8 (5 seeds, the two more added after the 3-seed runs were seen): "
  assert say(runs) == f"{lead}seeds 3 and 4 of post- and pre-norm read, so the call rests on 5 " \
                      "seeds there."
  assert say(runs[:3]) == (f"{lead}seeds 3 and 4 of post- and pre-norm not run yet (experiments/"
                           "README.md, \"Five seeds\"), so the call reads seeds 0, 1, 2 there.")
  assert say(_missing(runs, {4})) == (f"{lead}seed 4 of post- and pre-norm not run yet "
                                      "(experiments/README.md, \"Five seeds\"), so the call "
                                      "reads seeds 0, 1, 2, 3 there.")
  # A seed is read once all its runs have ended; a protocol seed is never left out.
  part = runs + [_run({"seed": 3, "x": 1}, 0.0, status="missing"),
                 _run({"seed": 0, "x": 1}, 0.0, status="incomplete")]
  assert {r.seed for r in paired.added_seeds_ended(part)} == {0, 1, 2, 4}


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def _note(lines):
  return next(line for line in lines if line.startswith("Issue 68 point 8"))


def _grid_runs(placements, seeds, loss, **fixed):
  """Every LR of the grid for each placement and seed: loss(placement, LR index, seed)."""
  return [_run({**fixed, a.PLACEMENT: p, a.LR: lr, "seed": s}, loss(p, i, s))
          for p in placements for i, lr in enumerate(GRID) for s in seeds[p]]


def test_lr_sensitivity_reads_post_and_pre_on_five_seeds():
  """Post's grid is 0.5 steeper than pre's per LR step; seed 4 makes post's sensitivity 0.3
  lower: the call's per-seed values, 5 of them, equal a hand computation."""
  seeds = {"pre": range(5), "post": range(5), "peri": range(3)}
  steep = {"pre": 0.1, "post": 0.6, "peri": 0.1}
  loss = lambda p, i, s: 2.0 + steep[p] * abs(i - 1) - (0.3 * (i != 1) if (p, s) == ("post", 4)
                                                        else 0.0)
  runs = _grid_runs(seeds, seeds, loss)
  m = lr_sensitivity.measure(runs)
  # Trimmed: LRs 3e-3, 1e-2, 3e-2 (index 2-4) against the best (index 1): steps 1, 2, 3.
  post = {s: (0.6 * 6 - (0.9 if s == 4 else 0.0)) / 3 for s in range(5)}
  assert m["call"].per_seed == pytest.approx({s: post[s] - 0.1 * 6 / 3 for s in range(5)})
  # Seed 4 listed but not run: the call reads seeds 0-3 and says seed 4 is not run yet.
  m = lr_sensitivity.measure(_missing(runs, {4}))
  assert sorted(m["call"].per_seed) == [0, 1, 2, 3]
  lines = lr_sensitivity.analyze(runs)
  assert _note(lines).endswith("seeds 3 and 4 of post- and pre-norm read, so the call rests on "
                               "5 seeds there.")
  assert "seed 4 of post- and pre-norm not run yet" in _note(
      lr_sensitivity.analyze(_missing(runs, {4})))


def test_warmup_stability_pairs_five_seeds_of_post_and_pre_beside_three_of_the_others():
  seeds = {p: warmup_stability.SEEDS[p] for p in warmup_stability.PLACEMENTS}
  assert seeds == {"post": [0, 1, 2, 3, 4], "pre": [0, 1, 2, 3, 4], "deepnorm": [0, 1, 2],
                   "admin": [0, 1, 2]}
  cost = lambda p, s: {"post": 0.3 + 0.01 * s}.get(p, 0.0)
  runs = [r for w in (0, 60) for r in _grid_runs(
      seeds, seeds, lambda p, i, s, w=w: 2.0 + 0.1 * abs(i - 2) + (cost(p, s) if w == 0 else 0),
      **{WARMUP: w})]
  m = warmup_stability.measure(runs)
  assert m["costs"]["post"][0].per_seed == pytest.approx({s: 0.3 + 0.01 * s for s in range(5)})
  assert sorted(m["costs"]["deepnorm"][0].per_seed) == [0, 1, 2]
  lines = warmup_stability.analyze(runs)
  assert "- post's cost of dropping warm-up: +0.320 ± 0.020 nats/token (5 seeds) (best LR 0.003 " \
         "without warm-up, 0.003 with it)" in lines
  assert _verdict(lines).startswith("**Agrees.**")
  assert _note(lines).endswith("of post- and pre-norm (both warm-ups) read, so the call rests "
                               "on 5 seeds there.")
  assert all(paired.FIVE_SEEDS in v for v in warmup_stability.REGISTRATION.values())
  # The post hoc halves' check on new data: seeds 3 and 4 alone, a sign count against 0.05.
  assert "- post's cost of dropping warm-up on the added seeds alone (not used to choose the " \
         "call): seed 3 +0.330, seed 4 +0.340; 2 of 2 above the margin 0.05, 0 below." in lines
  assert "- pre's cost of dropping warm-up on the added seeds alone (not used to choose the " \
         "call): seed 3 +0.000, seed 4 +0.000; 0 of 2 above the margin 0.05, 2 below." in lines
  assert not any("added seeds alone" in line
                 for line in warmup_stability.analyze(_missing(runs, {3, 4})))


def test_hybrid_norm_reads_five_seeds_of_its_call_and_three_of_post():
  seeds = {"hybrid": range(5), "pre": range(5), "post": range(3)}
  offset = {"hybrid": 0.0, "pre": 0.05, "post": 0.2}
  runs = _grid_runs(seeds, seeds, lambda p, i, s: 2.0 + 0.1 * abs(i - 2) + offset[p] + 0.01 * s
                    * (p == "pre"))
  m = hybrid_norm.measure(runs)
  assert m["call"].per_seed == pytest.approx({s: 0.05 + 0.01 * s for s in range(5)})
  assert sorted(m["post"].per_seed) == [0, 1, 2]
  # Seeds 3 and 4 listed, not run: read on 0-2 (all seeds of a setting must have ended at an
  # LR for it to be the best, so a listed seed not left out would leave no best LR at all).
  m = hybrid_norm.measure(_missing(runs, {3, 4}))
  assert m["read"]["pre"][0] == 3e-3 and sorted(m["call"].per_seed) == [0, 1, 2]
  lines = hybrid_norm.analyze(runs)
  assert "- pre-norm minus HybridNorm: +0.070 ± 0.020 nats/token (5 seeds)" in lines
  assert _note(lines).endswith("seeds 3 and 4 of HybridNorm and pre-norm read, so the call "
                               "rests on 5 seeds there.")


def test_clipping_reads_its_halves_on_five_seeds():
  runs = [_run({CLIP: c, a.PLACEMENT: p, WARMUP: w, a.LR: lr, "seed": s},
               2.0 + 0.1 * i + (0.3 + 0.01 * s if (w == 0 and p == "post") else 0.0))
          for c in clipping.CLIPS for p in clipping.PLACEMENTS for w in (0, 60)
          for i, lr in enumerate(clipping.LRS["cpu"]) for s in range(5)]
  m = clipping.measure(runs)
  assert m["clips"][0.0]["costs"]["post"][0].per_seed == pytest.approx(
      {s: 0.3 + 0.01 * s for s in range(5)})
  lines = clipping.analyze(runs)
  assert _verdict(lines).startswith("**Agrees.**") and "(+0.320 ± 0.020)" in _verdict(lines)
  assert "seeds 3 and 4 of post- and pre-norm (both warm-ups, with and without clipping) " \
      "read" in _note(lines)
  said = clipping.analyze(_missing(runs, {3, 4}))
  assert "(+0.310 ± 0.025)" in _verdict(said) and "clipping) not run yet" in _note(said)
  # The check on new data reads the call's setting, without clipping, on seeds 3 and 4 alone.
  assert [line for line in lines if "added seeds alone" in line] == [
      "- post's cost of dropping warm-up on the added seeds alone (not used to choose the "
      "call): seed 3 +0.330, seed 4 +0.340; 2 of 2 above the margin 0.05, 0 below.",
      "- pre's cost of dropping warm-up on the added seeds alone (not used to choose the "
      "call): seed 3 +0.000, seed 4 +0.000; 0 of 2 above the margin 0.05, 2 below."]
  assert not any("added seeds alone" in line for line in said)


def test_long_runs_reads_dyts_half_on_five_seeds_and_the_first_call_on_three():
  """Pre-norm's 9,600-step LayerNorm runs at 3e-3 have seeds 3 and 4 (the DyT half's); its
  best LR, 1e-3 on seeds 0-2, must not move to 3e-3 for lack of seeds 3 and 4 there."""
  runs = []
  for p in ("post", "pre", "peri"):
    for lr, loss in ((3e-3, 1.6), (1e-3, 1.5)):
      runs += [_run({a.PLACEMENT: p, a.LR: lr, STEPS: 9600, "seed": s}, loss, steps=9600)
               for s in range(3)]
  for steps, cost in ((600, 0.01), (2400, 0.05), (9600, 0.1)):
    for dyt in (False, True):
      more = {"model.norm": "dyt", "model.dyt_alpha_init": 0.5} if dyt else {}
      seeds = range(3, 5) if steps == 9600 and not dyt else range(5)
      runs += [_run({a.PLACEMENT: "pre", **more, a.LR: 3e-3, STEPS: steps, "seed": s},
                    1.6 + (cost + 0.01 * s if dyt else 0.0), steps=steps) for s in seeds]
  m = long_runs.measure(runs)
  assert m["read"]["pre"][0] == 1e-3 and sorted(m["final"].per_seed) == [0, 1, 2]
  assert m["dyt_call"].per_seed == pytest.approx({s: 0.09 for s in range(5)})
  lines = long_runs.analyze(runs)
  assert "seeds 3 and 4 of pre-norm DyT and LayerNorm at LR 3e-3 at each budget (the DyT " \
      "call; the first keeps 3 seeds) read, so the call rests on 5 seeds there." in _note(lines)
  assert any("DyT's cost at 9600 steps minus at 600: +0.090" in l and "(5 seeds)" in l
             for l in lines)


@pytest.mark.parametrize("study", ADDED)
def test_the_committed_report_says_whether_seeds_3_and_4_are_read(study):
  """A study whose committed runs lack some of the added seeds' points (its manifest stops
  before them, or long_runs' landed its LR 5e-3 points before its DyT seeds of 9,600 steps)
  says seeds 3 and 4 are not run yet; one that holds a run of every added point says the
  call rests on 5."""
  module, committed, _, new = ADDED[study]
  study_dir = os.path.join(REPO_ROOT, "experiments", "results", study)
  landed = len(sweep_points.read_manifest(study_dir)["points"])
  assert landed <= committed or landed == committed + len(new)
  added = sweep_points.point_names(module.get_sweep("cpu"))[committed:]
  held = packed_runs.entries(study_dir)
  with open(os.path.join(study_dir, "report.md"), encoding="utf-8") as f:
    text = f.read()
  note = next(line for line in text.splitlines() if line.startswith("Issue 68 point 8"))
  assert ": seeds 3 and 4 of " in note
  if not all(name in held for name in added):
    assert note.endswith("not run yet (experiments/README.md, \"Five seeds\"), so the call "
                         "reads seeds 0, 1, 2 there.")
  else:
    assert note.endswith("read, so the call rests on 5 seeds there.")
  assert all(paired.FIVE_SEEDS in v for k, v in module.REGISTRATION.items()
             if study != "long_runs" or k.startswith("DyT"))


def test_the_protocol_line_counts_seeds_per_placement():
  """Seeds 3 and 4 of post and pre beside 3 seeds of the others read "3 seeds (5 for post,
  pre)", not "5 seeds"; one count for every placement reads as before."""
  grid = lambda seeds: _grid_runs(list(seeds), seeds, lambda p, i, s: 2.0)
  five = {"post": range(5), "pre": range(5), "peri": range(3), "mix": range(3)}
  assert a.seeds_text(grid(five)) == "3 seeds (5 for post, pre)"
  assert a.seeds_text(grid({"post": range(3), "pre": range(3)})) == "3 seeds"
  assert a.seeds_text(grid({"post": range(3), "pre": range(6), "peri": range(6)})) == \
      "6 seeds (3 for post)"
