"""The study contract (transformer/study.py): the hooks a study file may define, one loader."""

import os
import subprocess
import sys

import pytest

from configs.default import get_config
from transformer import REPO_ROOT, study
from transformer.errors import UserFileError
from transformer.sweep import points as sweep_points

EXPERIMENTS = os.path.join(REPO_ROOT, "experiments")
STUDIES = sorted(f for f in os.listdir(EXPERIMENTS) if f.endswith(".py") and "get_sweep" in
                 open(os.path.join(EXPERIMENTS, f), encoding="utf-8").read())
GOOD = "def get_sweep():\n  return [{'seed': 0}]\n"


def _write(tmp_path, text, name="s.py"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_and_the_template_load(name):
  s = study.load(os.path.join("experiments", name))
  assert callable(s.get_sweep) and s.module.__file__.endswith(name)
  if name != "norm_placement.py":  # a plain sweep: no claim, no verdict
    assert s.claim and callable(s.analyze)
  assert "template.py" in STUDIES and len(STUDIES) >= 25


def test_the_template_declares_every_hook_but_the_diagnostics_and_its_points_validate():
  s = study.load("experiments/template.py")
  assert s.claim and s.analyze and s.figures and s.summarize and s.thresholds_not_read
  assert list(s.registration) == ["post minus pre"]
  # The confidence level and the margin; its seeds are described, not left out (issue 68).
  assert [t.label for t in s.thresholds] == ["confidence level of the intervals",
                                             "loss margin (nats/token)"]
  assert s.report_diagnostics == ()
  points = sweep_points.load_sweep("experiments/template.py:tiny")
  assert len(points) == 2
  configs = sweep_points.validate_points(get_config(), points)
  assert [c.model.norm_placement for c in configs] == ["pre", "post"]


@pytest.mark.parametrize("text, phrase", [
    ("CLAIM = 3\n", "CLAIM is an int; it must be a str"),
    ("REPORT_DIAGNOSTICS = 'ff/grad_norm'\n", "REPORT_DIAGNOSTICS is a str; it must be a tuple "
     "of str"),
    ("analyze = ['**Agrees.**']\n", "analyze is a list; it must be a function analyze(runs)"),
    ("def figures(runs):\n  return []\n", "figures(runs) cannot be called as "
     "figures(runs, sweep_dir)"),
    ("THRESHOLDS = ('margin',)\n", "THRESHOLDS is a tuple; it must be a tuple of "
     "transformer.study.Threshold"),
    ("THRESHOLDS_NOT_READ = {'cutoff': 1}\n", "THRESHOLDS_NOT_READ is a dict; it must be a dict"),
    ("REGISTRATION = {'gap': 'fixed before the runs'}\n", "REGISTRATION is a dict; it must be a "
     "dict {call: 'pre-registered at <commit> ...' or 'post hoc: ...'}"),
    ("REGISTRATION = {'gap': 'pre-registered at HEAD'}\n", "REGISTRATION is a dict"),
    ("from transformer.study import Threshold\n"
     "THRESHOLDS = (Threshold('margin', None, 'MARGN', (0.1,)),)\n",
     "THRESHOLDS has 'margin', which moves MARGN, a name the file does not define"),
    ("def analyse(runs):\n  return []\n", "analyse looks like a misspelling of the hook analyze"),
    ("def summarise(runs):\n  return {}\n", "summarise looks like a misspelling of the hook "
     "summarize"),
    ("THRESHOLD = ()\n", "THRESHOLD looks like a misspelling of the hook THRESHOLDS"),
    ("claim = 'x'\n", "claim looks like a misspelling of the hook CLAIM"),
    ("def Figures(runs, sweep_dir):\n  return []\n", "Figures looks like a misspelling of the "
     "hook figures"),
    ("FOLLOWS = 'depth_lr'\n", "FOLLOWS is a str; it must be a tuple of str"),
    ("CONFIRMATORY_SEEDS = '3-5'\n", "CONFIRMATORY_SEEDS is a str; it must be a list of seeds"),
    ("CONFIRMATORY_SEEDS = [3, True]\n", "CONFIRMATORY_SEEDS is a list; it must be a list of "
     "seeds (ints, 0 or more)"),
    ("CONFIRMATORY_SEED = [3, 4]\n", "CONFIRMATORY_SEED looks like a misspelling of the hook "
     "CONFIRMATORY_SEEDS"),
], ids=["claim", "diagnostics", "analyze", "figures_arity", "thresholds", "not_read",
        "registration_word", "registration_commit", "threshold_name", "analyse", "summarise",
        "THRESHOLD", "claim_case", "Figures", "follows", "seeds_str", "seeds_bool",
        "seeds_singular"])
def test_a_hook_of_the_wrong_type_or_a_misspelled_one_is_one_line(tmp_path, text, phrase):
  path = _write(tmp_path, GOOD + text)
  with pytest.raises(UserFileError) as e:
    study.load(path)
  message = str(e.value)
  assert "\n" not in message and message.startswith(path), message
  assert "(the --sweep file)" in message and phrase in message, message


def test_helpers_and_values_near_a_hook_in_another_kind_are_not_misspellings(tmp_path):
  """`FIGURE` (a file name) is no `figures` function; `_analyse` is a helper; `measure` is
  far from every hook; a module imported under a hook-like name is no hook."""
  path = _write(tmp_path, GOOD + "import os as analysis\nFIGURE = 'f.webp'\n"
                "def _analyse(runs):\n  return []\ndef measure(runs):\n  return {}\n")
  s = study.load(path)
  assert s.analyze is None and s.figures is None and s.claim == ""


def test_a_file_without_get_sweep_is_refused(tmp_path):
  path = _write(tmp_path, "CLAIM = 'x'\n")
  with pytest.raises(UserFileError, match=r"defines no get_sweep\(\)"):
    study.load(path)


def test_the_file_runs_once_until_it_changes(tmp_path):
  counter = tmp_path / "ran.txt"
  text = GOOD + f"open({str(counter)!r}, 'a').write('x')\n"
  path = _write(tmp_path, text)
  first = study.load(path)
  assert study.load(path) is first and study.load(path + ":cpu") is first
  assert counter.read_text() == "x"
  _write(tmp_path, text + "CLAIM = 'changed'\n")
  assert study.load(path).claim == "changed" and counter.read_text() == "xx"


@pytest.mark.slow
def test_the_template_runs_end_to_end_as_the_readme_says(tmp_path):
  """`--mode=sweep` then `--mode=report` on the template's tiny preset (2 points, ~2 min on 2
  cores): a report with a verdict and its robustness section."""
  sweep_dir = str(tmp_path / "template")
  launch = [sys.executable, os.path.join(REPO_ROOT, "launch.py")]
  env = dict(os.environ, PYTHONPATH=REPO_ROOT)
  subprocess.run([*launch, "--mode=sweep", "--sweep=experiments/template.py:tiny",
                  f"--sweep_dir={sweep_dir}", "--parallel=2"], cwd=REPO_ROOT, env=env,
                 check=True, timeout=280, capture_output=True)
  os.remove(os.path.join(sweep_dir, "report.md"))
  subprocess.run([*launch, "--mode=report", f"--sweep_dir={sweep_dir}"], cwd=REPO_ROOT, env=env,
                 check=True, timeout=60, capture_output=True)
  text = open(os.path.join(sweep_dir, "report.md"), encoding="utf-8").read()
  assert "**Claim under test:** Xiong et al. 2020" in text
  assert "**Inconclusive.** post-norm minus pre-norm:" in text and "## Robustness" in text
  assert "loss_heatmap.webp" in text and "2 points: 2 finished" in text


def test_the_calls_section_counts_pre_registered_and_post_hoc_calls(tmp_path):
  from transformer.report import registration
  analyze = "def analyze(runs):\n  return ['**Agrees.**']\n"
  bare = study.load(_write(tmp_path, GOOD + analyze, "bare.py"))
  assert "read every call as post hoc" in registration.counts_line(bare)
  text = (GOOD + analyze + "REGISTRATION = {'gap': 'pre-registered at 378bd3f, before any run',"
          " 'halves': 'post hoc: replaces the relative gap; not yet confirmed on new seeds'}\n")
  lines = registration.section(study.load(_write(tmp_path, text, "declared.py")))
  assert lines[2] == "**Calls:** 1 pre-registered, 1 post hoc (halves)."
  assert "- **gap**: pre-registered at 378bd3f, before any run" in lines
  assert registration.section(study.load(_write(tmp_path, GOOD, "plain.py"))) == []


# Study files other issue-68 helpers own and declare REGISTRATION in on their branches; the
# lead removes each from this allowance after merging them (it must end empty).
RESULTS = os.path.join(EXPERIMENTS, "results")
REPORTED = sorted(d for d in os.listdir(RESULTS)
                  if os.path.isfile(os.path.join(RESULTS, d, "report.md")))


@pytest.mark.parametrize("name", REPORTED)
def test_every_study_with_a_committed_report_says_which_calls_were_fixed_before_their_data(
    name):
  """Issue 68 point 7: each call is "pre-registered at <commit>" or "post hoc: ..."."""
  path = os.path.join(EXPERIMENTS, f"{name}.py")
  assert os.path.isfile(path), f"results/{name}/report.md has no experiments/{name}.py"
  s = study.load(path)
  assert s.registration, f"experiments/{name}.py declares no REGISTRATION"
  assert all(call.strip() for call in s.registration)
