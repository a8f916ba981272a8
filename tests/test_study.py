"""The study contract (transformer/study.py): the hooks a study file may define, one loader."""

import os

import pytest

from transformer import REPO_ROOT, study
from transformer.errors import UserFileError

EXPERIMENTS = os.path.join(REPO_ROOT, "experiments")
STUDIES = sorted(f for f in os.listdir(EXPERIMENTS) if f.endswith(".py") and "get_sweep" in
                 open(os.path.join(EXPERIMENTS, f), encoding="utf-8").read())
GOOD = "def get_sweep():\n  return [{'seed': 0}]\n"


def _write(tmp_path, text, name="s.py"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_loads(name):
  s = study.load(os.path.join("experiments", name))
  assert callable(s.get_sweep) and s.module.__file__.endswith(name)
  if name != "norm_placement.py":  # a plain sweep: no claim, no verdict
    assert s.claim and callable(s.analyze)
  assert len(STUDIES) >= 24


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
], ids=["claim", "diagnostics", "analyze", "figures_arity", "thresholds", "not_read",
        "threshold_name", "analyse", "summarise", "THRESHOLD", "claim_case", "Figures"])
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
  path = _write(tmp_path, GOOD + "import os as analysis\nFIGURE = 'f.png'\n"
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
