"""A study's verdict recomputed at its neighbouring thresholds
(transformer/report/robustness.py)."""

import types

from experiments import analysis as a
from transformer.report import robustness
from transformer.report import runs as sweep_runs
from transformer.report.robustness import Threshold
from transformer.study import check


def _study(margin=0.1):
  """A study whose call is "agrees" when the gap (0.07) is above its MARGIN."""
  module = types.SimpleNamespace(MARGIN=margin, get_sweep=lambda: [{"seed": 0}])

  def analyze(runs):
    if module.MARGIN == 0.5:
      raise ZeroDivisionError("a failing analysis")
    return ["a table", a.verdict(0.07 > module.MARGIN, "the gap is 0.07.")]

  module.analyze = analyze
  module.THRESHOLDS = (Threshold("margin", None, "MARGIN", (0.05, 0.2, 0.5)),)
  return module


def test_each_neighbour_is_recomputed_and_the_threshold_restored():
  module = _study()
  lines = robustness.section(check(module), [], lambda runs: None)
  text = "\n".join(lines)
  assert "| as reported | - | disagrees |" in text
  assert "| margin | 0.05 | agrees |" in text and "| margin | 0.2 | disagrees |" in text
  assert "| margin | 0.5 | analysis failed (ZeroDivisionError) |" in text
  assert lines[-2] == ('**Robustness:** the call does not hold under every neighbouring '
                       'threshold (2 of 3 settings change it): margin 0.05 gives "agrees"; '
                       'margin 0.5 gives "analysis failed (ZeroDivisionError)" (reported: '
                       '"disagrees").')
  assert module.MARGIN == 0.1  # restored, also after the failing value


def test_a_call_that_survives_says_so():
  module = _study(margin=0.01)
  module.THRESHOLDS = (Threshold("margin", None, "MARGIN", (0.02, 0.05)),)
  assert robustness.section(check(module), [], lambda runs: None)[-2] == (
      '**Robustness:** the call ("agrees") holds under every neighbouring threshold '
      '(2 settings, one moved at a time).')
  del module.THRESHOLDS
  assert robustness.section(check(module), [], lambda runs: None) == []


def test_the_collapse_cutoff_reclassifies_the_runs_and_the_rule_swaps():
  """COLLAPSE moves `runs.COLLAPSE_TOLERANCE` and reclassifies under it; RULE swaps "within X"
  for "finished healthily" in `analysis.trained_at`; both are restored."""
  seen = []
  module = types.SimpleNamespace(
      get_sweep=lambda: [{"seed": 0}],
      analyze=lambda runs: [a.verdict(a.SWAP_RULE, f"cutoff {sweep_runs.COLLAPSE_TOLERANCE}")],
      THRESHOLDS=(a.COLLAPSE, a.RULE))
  lines = robustness.section(check(module), ["run"],
                             lambda runs: seen.append(sweep_runs.COLLAPSE_TOLERANCE))
  assert seen == [0.01, 0.02, 0.05, 0.02]  # classified under each value, then back
  assert "| rule for trained | the other rule (within X <-> finished healthily) | agrees |" in (
      "\n".join(lines))
  assert sweep_runs.COLLAPSE_TOLERANCE == 0.02 and a.SWAP_RULE is False


def test_the_two_rules_for_trained():
  run = sweep_runs.Run("r", {a.LR: 1e-2, "seed": 0}, 10, "",
                       {"eval": [{"step": 10, "loss": 2.05}]}, "collapsed")
  best = {0: 2.0}
  assert a.trained_at(run, best, 0.1) is True  # within X: collapse does not matter
  assert a.trained_at(run, best, 0.1, rule=a.HEALTHY) is False
  a.SWAP_RULE = True
  try:
    assert a.trained_at(run, best, 0.1) is False and a.trained_at(run, best, 0.1, a.HEALTHY)
  finally:
    a.SWAP_RULE = False


def test_a_threshold_the_call_does_not_read_is_named_not_moved():
  module = _study(margin=0.01)
  module.THRESHOLDS = (Threshold("margin", None, "MARGIN", (0.02, 0.05)),)
  module.THRESHOLDS_NOT_READ = {"collapse cutoff": "the call reads no run's status"}
  text = "\n".join(robustness.section(check(module), [], lambda runs: None))
  assert ("Not moved, because the call does not read them: collapse cutoff (the call reads no "
          "run's status).") in text
  assert "| collapse cutoff |" not in text


def test_every_study_moves_or_names_the_collapse_cutoff():
  """A study's robustness either moves the collapse cutoff or says its call does not read it
  (a row for a threshold the call never reads would be a check that cannot fail)."""
  import os
  from transformer import study
  root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments")
  checked = 0
  for name in sorted(f[:-3] for f in os.listdir(root) if f.endswith(".py")):
    with open(os.path.join(root, name + ".py"), encoding="utf-8") as f:
      if "get_sweep" not in f.read():  # a helper module (analysis, paired, ...), no study
        continue
    s = study.load(os.path.join(root, name + ".py"))
    varied = {t.label for t in s.thresholds}
    not_read = set(s.thresholds_not_read)
    assert not varied & not_read, name
    if varied and name not in (
        "grad_profile", "grad_scale_depth", "residual_growth", "depth_post"):  # no collapse
      assert a.COLLAPSE.label in varied | not_read, name
      checked += 1
  assert checked >= 8


def test_the_x_where_a_call_holds_reads_after_for():
  """Each study writes "... for {intervals_text(...)}": the empty case must read as a phrase
  there ("for no X in [0, 1]"), not "for at no X"."""
  assert a.intervals_where(lambda x: False, [0.2, 0.5]) == []
  assert "for " + a.intervals_text([]) == "for no X in [0, 1]"
  assert a.intervals_text([(0.2, 0.5), (0.7, 1.0)]) == "X in [0.2, 0.5), X in [0.7, 1]"
