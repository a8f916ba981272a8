"""Issue 68 point 7: residual_growth's, grad_scale_depth's, grad_profile's, qk_norm_post's,
qk_norm_logits' and qk_norm_depth's post hoc calls are checked on confirmatory seeds fixed
before their runs. The committed confirmatory runs are the sweep file's new points; each one the
study trained itself ran at the clean commit the study's REGISTRATION names (the one that fixed
the seeds with the call unchanged), each other one links to the run of the same config in the
study named below, and the report reads them alone."""

import os
import re

import pytest

from experiments import (grad_profile, grad_scale_depth, qk_norm_depth, qk_norm_logits,
                         qk_norm_post, residual_growth)
from transformer import REPO_ROOT, packed_runs, provenance

RESULTS = os.path.join(REPO_ROOT, "experiments", "results")
# study -> (points committed before issue 68 added the confirmatory seeds, the new points, the
# new points the study trained itself; the others link to lr_sensitivity's runs, or to
# qk_norm_post's for qk_norm_depth: its post-norm with qk-norm at 6 layers, seeds 3 and 4)
STUDIES = {residual_growth: (6, 6, 6), grad_scale_depth: (60, 30, 30), grad_profile: (52, 20, 20),
           qk_norm_post: (45, 30, 10), qk_norm_logits: (30, 30, 20), qk_norm_depth: (60, 30, 20)}
LINKED = {qk_norm_depth: "qk_norm_post"}
SEEDS = r"confirmatory seeds ([0-9][0-9, -]*?)"


def _name(module) -> str:
  return module.__name__.rsplit(".", 1)[1]


@pytest.mark.parametrize("module", list(STUDIES), ids=_name)
def test_the_confirmatory_points_come_after_every_earlier_one(module):
  earlier, new, _ = STUDIES[module]
  points = module.get_sweep("cpu")
  assert len(points) == earlier + new
  assert {p["seed"] for p in points[earlier:]} == set(module.CONFIRMATORY_SEEDS)
  assert not {p["seed"] for p in points[:earlier]} & set(module.CONFIRMATORY_SEEDS)


@pytest.mark.parametrize("module", list(STUDIES), ids=_name)
def test_each_confirmatory_run_ran_at_the_commit_its_registration_names(module):
  study = os.path.join(RESULTS, _name(module))
  text = " ".join(module.REGISTRATION.values())  # each call names the same seeds and commit
  fixed = re.search(SEEDS + r", fixed at ([0-9a-f]{7,40}) ", text)
  assert fixed, f"{_name(module)}'s REGISTRATION names no commit fixing its confirmatory seeds"
  confirm = {n: e for n, e in packed_runs.entries(study).items()
             if int(n.rsplit("seed=", 1)[1]) in module.CONFIRMATORY_SEEDS}
  own = [n for n, e in confirm.items() if "link" not in e]
  assert (len(confirm), len(own)) == STUDIES[module][1:]
  linked = f"../{LINKED.get(module, 'lr_sensitivity')}/"
  assert all(e["link"].startswith(linked) for e in confirm.values() if "link" in e)
  for name in own:
    (record, *_) = provenance.read_records(os.path.join(study, name))
    assert record["git"]["commit"].startswith(fixed.group(2)) and not record["git"]["dirty"]
  with open(os.path.join(study, "report.md"), encoding="utf-8") as f:
    report = f.read()
  assert f"The verdict reads the confirmatory seeds {fixed.group(1)} alone" in report
  assert "On the exploratory seeds " in report
