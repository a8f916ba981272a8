"""The study contract: what a study file (a `--sweep` file, `experiments/<study>.py`) may define,
and the one loader that reads it.

A study file is plain Python. `--mode=sweep` and `--mode=report` read eleven names from it:

  get_sweep([preset])        -> the points, each a dict 'section.field' -> value (required)
  CLAIM                      str: the claim the study tests, one or two sentences
  REPORT_DIAGNOSTICS         tuple of str: per-layer diagnostics to plot against swept fields
  analyze(runs)              -> the `## Verdict` lines (one starts **Agrees.** / **Disagrees.**
                                / **Partly agrees.** / **Inconclusive.**)
  figures(runs, sweep_dir)   -> [(caption, file name)] of figures it wrote into sweep_dir
  summarize(runs)            -> {"verdict": ..., "numbers": [...], ...} for results/README.md
  THRESHOLDS                 tuple of `Threshold`: the verdict recomputed at their neighbours
  THRESHOLDS_NOT_READ        {threshold label: why the call does not read it}
  REGISTRATION               {call: when it was fixed}: each value starts "pre-registered at
                                <commit>" (the commit that fixed the call before its first run)
                                or "post hoc:" (what it replaced, where it was confirmed on data
                                not used to choose it, or that it was not); the report's
                                `## Calls` section
  FOLLOWS                    tuple of str: the studies (results folder names) whose answers it
                                follows further; until it is committed, the summary's atlas
                                marks their answers "not followed yet" (`report.follow_ups`)
  CONFIRMATORY_SEEDS         list of int: the seeds the verdict reads alone, fixed before their
                                runs after the call was chosen on the others; once one of their
                                runs is in, the report's generic tables (final eval, LR sweep)
                                show them in rows apart from the exploratory seeds

`runs` is a list of `transformer.report.runs.Run`. `load(FILE[:PRESET])` runs the file once
(cached by path while the file is unchanged) and returns a `Study`; a hook of the wrong type,
or a public name that looks like a misspelled hook (`analyse`, `THRESHOLD`), is a one-line
error naming the file. Start a helper's name with `_` to keep it out of that check.
`experiments/template.py` is a study to copy.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import re
import types
from typing import Any, Callable, Iterable, Mapping, Optional

from transformer import REPO_ROOT, user_files

WHAT = "the --sweep file"
FIX = "Fix the file and run the command again (see experiments/template.py)."


@dataclasses.dataclass(frozen=True)
class Threshold:
  """A verdict threshold: `module.name` (module None: the study file) and its neighbours."""
  label: str
  module: Optional[str]
  name: str
  values: tuple
  reclassify: bool = False  # the runs' status (collapsed) depends on it
  shown: tuple = ()  # how the table writes `values` (and the reported value, last), if not as is


@dataclasses.dataclass(frozen=True)
class Study:
  """A loaded study file: its hooks, each with its default when the file leaves it out.

  `module` is the file's module (the robustness section moves its thresholds there)."""
  path: str
  module: Any
  get_sweep: Callable[..., Iterable[Mapping[str, Any]]]
  claim: str = ""
  report_diagnostics: tuple[str, ...] = ()
  analyze: Optional[Callable[[list], list[str]]] = None
  figures: Optional[Callable[[list, str], list[tuple[str, str]]]] = None
  summarize: Optional[Callable[[list], dict]] = None
  thresholds: tuple[Threshold, ...] = ()
  thresholds_not_read: Mapping[str, str] = dataclasses.field(default_factory=dict)
  registration: Mapping[str, str] = dataclasses.field(default_factory=dict)
  follows: tuple[str, ...] = ()
  confirmatory_seeds: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Hook:
  """One name a study file may define: the `Study` field it fills, what it must be (in words,
  for the error), and its check (functions: how many positional arguments it is called with)."""
  name: str
  field: str
  kind: str
  arguments: Optional[int] = None  # a function's arity (None: a value, or get_sweep's 0 or 1)
  check: Optional[Callable[[Any], bool]] = None  # a value's type check


def _strings(value) -> bool:
  return isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)


def _seeds(value) -> bool:
  return isinstance(value, (tuple, list)) and all(
      isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _thresholds(value) -> bool:
  return isinstance(value, (tuple, list)) and all(isinstance(t, Threshold) for t in value)


def _labels(value) -> bool:
  return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in value.items())


PRE_REGISTERED = re.compile(r"pre-registered at [0-9a-f]{7,40}\b")
POST_HOC = "post hoc:"


def _registration(value) -> bool:
  """`{call: "pre-registered at <commit> ..." or "post hoc: ..."}` (a commit: 7-40 hex)."""
  return _labels(value) and all(PRE_REGISTERED.match(v) or v.startswith(POST_HOC)
                                for v in value.values())


HOOKS = (
    Hook("get_sweep", "get_sweep", "a function get_sweep() or get_sweep(preset)"),
    Hook("CLAIM", "claim", "a str", check=lambda v: isinstance(v, str)),
    Hook("REPORT_DIAGNOSTICS", "report_diagnostics", "a tuple of str", check=_strings),
    Hook("analyze", "analyze", "a function analyze(runs)", arguments=1),
    Hook("figures", "figures", "a function figures(runs, sweep_dir)", arguments=2),
    Hook("summarize", "summarize", "a function summarize(runs)", arguments=1),
    Hook("THRESHOLDS", "thresholds", "a tuple of transformer.study.Threshold",
         check=_thresholds),
    Hook("THRESHOLDS_NOT_READ", "thresholds_not_read", "a dict {label: why} of str",
         check=_labels),
    Hook("REGISTRATION", "registration", "a dict {call: 'pre-registered at <commit> ...' or "
         "'post hoc: ...'} of str", check=_registration),
    Hook("FOLLOWS", "follows", "a tuple of str", check=_strings),
    Hook("CONFIRMATORY_SEEDS", "confirmatory_seeds", "a list of seeds (ints, 0 or more)",
         check=_seeds),
)
NAMES = tuple(h.name for h in HOOKS)


def check(module: Any, path: str = "") -> Study:
  """The `Study` of a module (or any namespace) that a study file made; a hook of the wrong
  type, a threshold naming an attribute the file lacks, or a name that looks like a
  misspelled hook is a one-line UserFileError."""
  path = path or getattr(module, "__file__", "") or "the study"
  _refuse_misspellings(module, path)
  if not hasattr(module, "get_sweep"):
    raise user_files.file_error(path, "defines no get_sweep() (it returns the points, each a "
                                "dict 'section.field' -> value)", FIX, what=WHAT)
  fields = {}
  for hook in HOOKS:
    if hasattr(module, hook.name):
      fields[hook.field] = _checked(hook, getattr(module, hook.name), path)
  study = Study(path=path, module=module, **fields)
  for t in study.thresholds:
    if t.module is None and not hasattr(module, t.name):
      raise user_files.file_error(path, f"THRESHOLDS has {t.label!r}, which moves {t.name}, "
                                  "a name the file does not define", FIX, what=WHAT)
  return dataclasses.replace(study, report_diagnostics=tuple(study.report_diagnostics),
                             thresholds=tuple(study.thresholds), follows=tuple(study.follows),
                             confirmatory_seeds=tuple(study.confirmatory_seeds))


def _checked(hook: Hook, value: Any, path: str) -> Any:
  """`value` when it is what `hook` must be; else the error saying what it must be."""
  problem = ""
  if hook.check is not None:
    if not hook.check(value):
      problem = f"{hook.name} is {_a(value)}; it must be {hook.kind}"
  elif not callable(value):
    problem = f"{hook.name} is {_a(value)}; it must be {hook.kind}"
  elif hook.arguments is not None and not _takes(value, hook.arguments):
    problem = (f"{hook.name}{_signature(value)} cannot be called as "
               f"{hook.kind.removeprefix('a function ')}")
  if problem:
    raise user_files.file_error(path, problem, FIX, line=user_files.def_line(value)
                                if callable(value) else None, what=WHAT)
  return value


def _a(value: Any) -> str:
  """`a list`, `an int`: the value's type, for an error."""
  kind = type(value).__name__
  return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _takes(fn: Callable, n: int) -> bool:
  try:
    inspect.signature(fn).bind(*[None] * n)
  except TypeError:
    return False
  except ValueError:  # no signature to read (a builtin): the call will say
    pass
  return True


def _signature(fn: Callable) -> str:
  try:
    return str(inspect.signature(fn))
  except ValueError:
    return "()"


def _refuse_misspellings(module: Any, path: str) -> None:
  """A public name close to a hook's (case aside; a function against the function hooks, a
  value against the value hooks) that is not one is a typo the report would silently skip."""
  for name, value in vars(module).items():
    if name.startswith("_") or name in NAMES or isinstance(value, types.ModuleType):
      continue
    hooks = [h.name for h in HOOKS if (h.check is None) == callable(value)]
    lowered = {h.lower(): h for h in hooks}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.8)
    if close:
      raise user_files.file_error(
          path, f"{name} looks like a misspelling of the hook {lowered[close[0]]}",
          f"Rename it {lowered[close[0]]}, or start its name with '_' if it is a helper "
          f"(the hooks: {', '.join(NAMES)}).", what=WHAT)


_CACHE: dict[tuple, Study] = {}


def path_of(spec_arg: str) -> str:
  """The file of `FILE[:PRESET]`, as given or else relative to the repository root (a sweep
  dir's manifest keeps the path as it was given)."""
  path = split_spec(spec_arg)[0]
  if not os.path.isabs(path) and not os.path.exists(path):
    if os.path.exists(os.path.join(REPO_ROOT, path)):
      path = os.path.join(REPO_ROOT, path)
  return path


def split_spec(spec_arg: str) -> tuple[str, Optional[str]]:
  """`"exp/lr.py:cpu"` -> `("exp/lr.py", "cpu")`; `"exp/lr.py"` -> `("exp/lr.py", None)`."""
  if ".py:" in spec_arg:
    path, arg = spec_arg.split(".py:", 1)
    return path + ".py", arg
  return spec_arg, None


def load(spec_arg: str) -> Study:
  """The `Study` of the file `FILE[:PRESET]` (the preset is get_sweep's, not read here). The
  file runs once per process while it is unchanged (same size and modification time): every
  report section reads the same module."""
  path = path_of(spec_arg)
  try:
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
  except OSError:
    key = None  # read_text says what is wrong with it
  if key is not None and key in _CACHE:
    return _CACHE[key]
  name = "sweep_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
  study = check(user_files.load_python(path, WHAT, name=name), path)
  if key is not None:
    _CACHE[key] = study
  return study
