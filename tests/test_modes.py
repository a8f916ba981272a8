"""The table of modes (transformer/cli/modes.py) is what launch.py, the flag checks and the
write preflight read: every mode runs something, every flag it names exists, and what the flag
checks refuse is exactly what the table says each mode does not read."""

import inspect
import json
import re
import subprocess
import sys

import pytest

from transformer.cli import flag_checks, launch, modes  # launch defines every flag
from transformer.errors import CommandLineError

# The first words of a flag's help that name its modes ("eval, export: ...", after an enum's
# "<a|b>: "), and the modes the words that are not mode names stand for.
_HELP_MODES = re.compile(r"^(?:<[^>]*>: )?([\w-]+(?:(?:, | / )\w+)*)(?: \([^)]*\)| --runs)?: ")
_ALIASES = {"slurm": ("sweep",),
            "Multi-host": tuple(m.name for m in modes.MODES if m.device)}
# The flags whose help names no mode: --config (read by every mode), --workdir (by most).
_NO_MODE_IN_HELP = {"config", "workdir"}


def project_flags() -> dict:
  return {f.name: f for module, fs in launch.flags.FLAGS.flags_by_module_dict().items()
          if module.startswith("transformer.") for f in fs}


@pytest.mark.parametrize("mode", modes.MODES, ids=lambda m: m.name)
def test_every_mode_runs_a_function_of_config_and_workdir(mode):
  function = modes.runner(mode)
  assert callable(function), mode.runs
  assert list(inspect.signature(function).parameters) == ["config", "workdir"], mode.runs


def test_every_flag_the_table_names_is_defined():
  defined = project_flags()
  named = {f for mode in modes.MODES for f in mode.flags()}
  assert named - set(defined) == set(), "a mode reads a flag nobody defines"
  for mode in modes.MODES:
    assert {flag for flag, _ in mode.writes} <= set(mode.flags()), mode.name
    assert not mode.reads_a_run or "workdir" in mode.reads, mode.name
    assert len(set(mode.flags())) == len(mode.flags()), f"{mode.name} names a flag twice"


def test_the_flag_checks_refuse_exactly_what_a_mode_does_not_read():
  assert flag_checks.READ_BY == modes.read_by()
  for flag, readers in flag_checks.READ_BY.items():
    assert readers == tuple(m for m in modes.NAMES if m in readers), "in the table's order"
    for mode in modes.MODES:
      if flag in mode.flags():
        flag_checks.check_read_by_mode(mode.name, {flag})
        continue
      with pytest.raises(CommandLineError, match=re.escape(
          f"--{flag} is not read by --mode={mode.name} (only by {', '.join(readers)})")):
        flag_checks.check_read_by_mode(mode.name, {flag})


def test_the_multi_host_flags_are_read_by_the_modes_that_start_devices():
  device = tuple(m.name for m in modes.MODES if m.device)
  assert device == ("train", "eval", "sample", "bench", "diagnose", "data_bench")
  for flag in modes.DEVICE_FLAGS:
    assert flag_checks.READ_BY[flag] == device


def test_a_flags_help_names_modes_that_read_it():
  """A flag whose help starts with modes ("bench, data_bench: ...") is read by those modes,
  and every flag's help but a few names them: a new flag of a mode left out of the table
  fails here."""
  unnamed = set()
  for name, flag in project_flags().items():
    if name == "mode":
      continue
    words = _HELP_MODES.match(flag.help or "")
    if not words:
      unnamed.add(name)
      continue
    said = [m for w in re.split(r", | / ", words.group(1)) for m in _ALIASES.get(w, (w,))]
    assert set(said) <= set(modes.NAMES), (name, flag.help)
    assert set(said) <= set(flag_checks.READ_BY.get(name, ())), (name, flag.help)
  assert unnamed == _NO_MODE_IN_HELP


def test_importing_the_table_imports_nothing_heavy():
  """launch.py reads it before the flags are defined (its --help header)."""
  code = ("import json, sys; from transformer.cli import modes; print(json.dumps(sorted("
          "m for m in sys.modules if m.split('.')[0] in ('jax', 'absl', 'transformer'))))")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                     check=True)
  assert json.loads(r.stdout) == ["transformer", "transformer.cli", "transformer.cli.modes"]
