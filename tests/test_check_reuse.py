"""scripts/check_reuse.py: the check that a run linked by `--reuse_runs_from` (trained at an
older commit) is what the present code computes."""

import math

import pytest

from scripts import check_reuse


def test_compare_reports_the_largest_difference_and_a_missing_step(capsys):
  assert check_reuse.compare({100: 2.5, 200: 2.0}, {100: 2.5, 200: 2.003}) == pytest.approx(0.003)
  assert math.isinf(check_reuse.compare({100: 2.5, 200: 2.0}, {100: 2.5}))
  assert "| 200 | 2.000000 | missing | - |" in capsys.readouterr().out


def test_an_unknown_point_is_a_short_error_before_any_training(tmp_path):
  with pytest.raises(SystemExit, match="has no point 'nope'"):
    check_reuse.retrain(check_reuse.DEFAULT_STUDY, "nope", str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_lr_sensitivitys_oldest_run_retrains_to_its_committed_losses():
  """The pre-norm 3e-3 seed-0 run was trained at 5a70723; every study since links runs like it.
  About 2 minutes on one core."""
  assert check_reuse.main([]) == 0
