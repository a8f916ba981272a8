"""dyt_alpha (issue 68): is DyT's cost in post-norm an init fact? The sweep (new points and
the committed ones it links), and the call on hand-made runs whose answers are known."""

import math
import os

import numpy as np

from experiments import analysis as a
from experiments import dyt_alpha as da
from transformer import REPO_ROOT
from transformer.report import runs as report_runs
from transformer.sweep import points as sweep_points

LRS = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def _run(overrides, final_loss):
  metrics = {"train": [{"step": 1, "split": "train", "loss": 5.5}],
             "eval": [{"step": 600, "split": "eval", "loss": final_loss}]}
  return report_runs.Run(",".join(f"{k}={v}" for k, v in overrides.items()), dict(overrides),
                         600, "/nonexistent", metrics, "finished")


def _runs(cost, alphas=(0.5, 1.0, 2.0)):
  """Loss 2.0 + 0.1 per LR step away from 3e-3 + 0.01 per seed, plus `cost(placement, alpha,
  seed)` for DyT (alpha None: LayerNorm, no cost); DyT in pre-norm at 0.5 only."""
  runs = []
  for p, x in [(p, None) for p in da.PLACEMENTS] + [("pre", 0.5)] + [
      (p, x) for p in da.SWEPT for x in alphas]:
    fields = {a.PLACEMENT: p} if x is None else {a.PLACEMENT: p, "model.norm": "dyt",
                                                 da.ALPHA: x}
    runs += [_run({**fields, a.LR: lr, "seed": s}, 2.0 + 0.1 * abs(i - 2) + 0.01 * s
                  + (0.0 if x is None else cost(p, x, s)))
             for i, lr in enumerate(LRS) for s in range(3)]
  return runs


def _verdict(lines):
  return next(line for line in lines if line.startswith("**"))


def test_the_sweep_adds_alpha_1_and_2_in_post_and_peri_and_links_the_rest():
  """60 new points; the other 90 are norm_type_placement's points as committed (same
  overrides), which --reuse_runs_from links instead of training."""
  points = da.get_sweep("cpu")
  assert len(points) == 150 and len(set(sweep_points.point_names(points))) == 150
  new = [p for p in points if p.get(da.ALPHA) in (1.0, 2.0)]
  assert len(new) == 60 and {p[a.PLACEMENT] for p in new} == {"post", "peri"}
  assert points[:60] == new and [p[a.PLACEMENT] for p in new] == ["post"] * 30 + ["peri"] * 30
  committed = sweep_points.read_manifest(
      os.path.join(REPO_ROOT, "experiments", "results", "norm_type_placement"))["points"]
  old = [p for p in points if p not in new]
  known = [c["overrides"] for c in committed]
  assert len(old) == 90 and all(p in known for p in old)


def test_the_sweep_validates():
  points = sweep_points.load_sweep("experiments/dyt_alpha.py:cpu")
  assert {p.get(da.ALPHA) for p in points} == {None, 0.5, 1.0, 2.0}


def test_agrees_when_dyt_post_at_its_best_alpha_costs_what_pre_norm_does():
  """DyT collapses in post-norm at 0.5 (cost 1.4) and 1 (0.5); at 2 it costs 0.14 + 0.01 s,
  pre-norm's DyT 0.14 + 0.02 s: the interaction at alpha_0 2 is -0.01 s per seed."""
  post = {0.5: 1.4, 1.0: 0.5, 2.0: 0.14}
  runs = _runs(lambda p, x, s: post[x] + 0.01 * s if p == "post" else 0.14 + 0.02 * s)
  m = da.measure(runs)
  assert m["best"]["post"] == 2.0
  per_seed = np.array([-0.01 * s for s in range(3)], dtype=np.float64)
  mean, half = m["inter"]["post"].interval
  assert math.isclose(mean, per_seed.mean(), abs_tol=1e-12)
  assert math.isclose(half, T_975_2 * per_seed.std(ddof=1) / math.sqrt(3), rel_tol=1e-6)
  verdict = _verdict(da.analyze(runs))
  assert verdict.startswith("**Agrees.** DyT's cost in post-norm at its best alpha_0 (2) minus "
                            f"in pre-norm: -0.010 ± {half:.3f} nats/token (3 seeds); its 95% "
                            "interval lies below the margin 0.05: at its best init DyT costs "
                            "no more in post-norm than in pre-norm")
  assert (f"in post-norm: alpha_0 0.5 +1.410 ± {half:.3f}; alpha_0 1 +0.510 ± {half:.3f}; "
          f"alpha_0 2 +0.150 ± {half:.3f} nats/token).") in verdict  # each + 0.01 s


def test_disagrees_when_every_alpha_still_costs_more_in_post_norm():
  runs = _runs(lambda p, x, s: 0.14 + (0.3 + 0.01 * s + 0.1 * (x == 0.5)) * (p == "post"))
  m = da.measure(runs)
  assert m["best"]["post"] == 1.0  # 1 and 2 tie: the smaller
  assert _verdict(da.analyze(runs)).startswith(
      "**Disagrees.** DyT's cost in post-norm at its best alpha_0 (1) minus in pre-norm: "
      "+0.310 ± ")


def test_not_run_yet_while_post_norm_dyt_lacks_an_alpha():
  """The committed runs have alpha_0 0.5 only: no call, and the new settings show 'not run'."""
  runs = _runs(lambda p, x, s: 1.4 if p == "post" else 0.14, alphas=(0.5,))
  lines = da.analyze(runs)
  assert _verdict(lines) == ("**Inconclusive.** The call is not run yet: DyT in post-norm lacks "
                             "finished runs of its grid and seeds at alpha_0 1, 2.")
  assert "| post | DyT, alpha_0 2 | none | - | - | not run |" in lines
  assert "| post | DyT, alpha_0 0.5 | 0.003 | 3.41 ± 0.025 | +1.400 ± 0.000 | 15 finished |" in (
      lines)


def test_an_alpha_run_over_part_of_the_grid_is_missing_not_read():
  """A sweep cut short leaves post-norm DyT at alpha_0 2 with all 3 seeds at its first two LRs
  only, where it looks best (cost 0): its best LR would be read from part of the grid, so no
  call is made and no best alpha_0 chosen until the rest has run."""
  runs = [r for r in _runs(lambda p, x, s: {0.5: 1.4, 1.0: 0.5, 2.0: -0.5}[x] if p == "post"
                           else 0.14)
          if not (r.overrides.get(da.ALPHA) == 2.0 and r.overrides[a.PLACEMENT] == "post"
                  and r.overrides[a.LR] > 1e-3)]
  m = da.measure(runs)
  assert m["best"]["post"] is None and m["best"]["peri"] == 0.5  # whole: peri ties, the smaller
  assert da.missing(m["ended"], "post") == [2.0]
  assert "| post | DyT, alpha_0 2 | none | - | - | 6 finished |" in da.analyze(runs)
  assert _verdict(da.analyze(runs)) == (
      "**Inconclusive.** The call is not run yet: DyT in post-norm lacks finished runs of its "
      "grid and seeds at alpha_0 2.")


def test_the_call_is_declared_pre_registered():
  from transformer import study
  s = study.load("experiments/dyt_alpha.py")
  assert list(s.registration) == ["DyT's cost in post-norm at its best alpha_0 minus in pre-norm"]
  assert study.PRE_REGISTERED.match(next(iter(s.registration.values())))


def _committed_rows():
  """The committed results.csv of dyt_alpha, one dict per run (linked runs included)."""
  import csv
  path = os.path.join(REPO_ROOT, "experiments", "results", "dyt_alpha", "results.csv")
  with open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def test_the_committed_call_recomputes_from_results_csv():
  """A transcription of the call, independent of experiments/: per setting, the clipped final
  loss min(loss, ln 259) (a diverged run counts as ln 259), the best LR (lowest mean among the
  LRs where all 3 seeds ended), DyT's cost against LayerNorm per seed, post-norm's best alpha_0
  and its cost minus pre-norm DyT's, a Student-t 95% interval; the report's verdict quotes it."""
  ln_v = math.log(259)
  loss: dict = {}
  for row in _committed_rows():
    if row["status"] not in ("finished", "collapsed", "diverged"):
      continue
    value = ln_v if row["status"] == "diverged" or not row["loss"] else min(float(row["loss"]),
                                                                            ln_v)
    alpha = float(row["model.dyt_alpha_init"] or 0.5) if row["model.norm"] == "dyt" else None
    key = (row["model.norm_placement"], alpha)
    loss.setdefault(key, {}).setdefault(float(row["optim.learning_rate"]), {})[
        int(row["seed"])] = value
  best = {}
  for key, by_lr in loss.items():
    full = {lr: v for lr, v in by_lr.items() if len(v) == 3}
    lr = min(full, key=lambda x: (np.mean(list(full[x].values())), x))
    best[key] = full[lr]
  cost = {k: np.array([best[k][s] - best[(k[0], None)][s] for s in range(3)])
          for k in best if k[1] is not None}
  alpha = min((0.5, 1.0, 2.0), key=lambda x: (np.mean(list(best[("post", x)].values())), x))
  inter = cost[("post", alpha)] - cost[("pre", 0.5)]
  half = T_975_2 * inter.std(ddof=1) / math.sqrt(3)
  with open(os.path.join(REPO_ROOT, "experiments", "results", "dyt_alpha", "report.md"),
            encoding="utf-8") as f:
    verdict = next(line for line in f
                   if line.startswith(("**Agrees.**", "**Disagrees.**", "**Inconclusive.**")))
  word = ("Disagrees" if inter.mean() - half > 0.05 else
          "Agrees" if inter.mean() + half < 0.05 else "Inconclusive")
  assert verdict.startswith(f"**{word}.** DyT's cost in post-norm at its best alpha_0 "
                            f"({alpha:g}) minus in pre-norm: {inter.mean():+.3f} ± {half:.3f}")
  for x in (0.5, 1.0, 2.0):
    c = cost[("post", x)]
    assert (f"alpha_0 {x:g} {c.mean():+.3f} ± {T_975_2 * c.std(ddof=1) / math.sqrt(3):.3f}"
            in verdict)
