"""Command-line parsing for `launch.py` with errors a person can act on.

absl and ml-collections report a misspelled config key, a value of the wrong type or a missing
config file as a long traceback. `parse_flags` checks the `--config` file and every
`--config.<path>=<value>` override first, against the config itself, and turns each problem into
one short paragraph: what was wrong and what is accepted (close matches, the field's type and
default, the known variants). Nothing is compiled or read before that.
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Any

from absl import flags

from transformer import REPO_ROOT, user_files
from transformer.config import ConfigError
from transformer.errors import CommandLineError, UserFileError, exit_with

DEFAULT_CONFIG = os.path.join(REPO_ROOT, "configs", "default.py")


def config_arg(argv: list[str], default: str = DEFAULT_CONFIG) -> str:
  """The value of `--config` in argv (`path[:variant]`; the last one, as absl takes it), or
  `default`."""
  found = default
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      found = a.split("=", 1)[1]
    elif a == "--config" and i + 1 < len(argv):
      found = argv[i + 1]
  return found


CONFIG_FIX = ("A config file defines get_config(variant=None) returning an "
              "ml_collections.ConfigDict (see configs/default.py).")


def load_config(arg: str):
  """`get_config(variant)` of the file in `path[:variant]`, as a ConfigDict.

  A missing file, or an error get_config raises for a variant (the configs refuse an unknown
  one with a ValueError), is a CommandLineError; a file that fails otherwise (syntax, import,
  no get_config, get_config raising) is a one-line UserFileError at its line."""
  path, _, variant = arg.partition(":")
  if not os.path.isfile(path):
    folder = os.path.dirname(path) or "."
    known = (sorted(f for f in os.listdir(folder) if f.endswith(".py"))
             if os.path.isdir(folder) else [])
    hint = f" Config files in {folder}/: {', '.join(known)}." if known else ""
    if os.path.isdir(path):
      known = sorted(f for f in os.listdir(path) if f.endswith(".py"))
      hint = f" Config files there: {', '.join(known)}." if known else ""
      raise CommandLineError(f"--config={arg}: {path} is a directory, not a file.{hint}")
    raise CommandLineError(f"--config={arg}: there is no file {path}.{hint}")
  what = "the --config file"
  module = user_files.load_python(path, what, name=f"_config_{abs(hash(path))}")
  get_config = user_files.function(module, "get_config", what, CONFIG_FIX)
  try:
    config = get_config(variant) if variant else get_config()
  except ValueError as e:  # includes ConfigError
    if not variant:
      raise user_files.exception_error(e, path, what, "in get_config()") from None
    raise CommandLineError(f"--config={arg}: {user_files.one_line(e)}") from None
  except Exception as e:  # noqa: BLE001 -- any failure of the user's config file is reported
    raise user_files.exception_error(
        e, path, what, "in get_config()",
        default_line=user_files.def_line(get_config)) from None
  if not hasattr(config, "items"):
    raise user_files.file_error(
        path, f"get_config() returned a value of type {type(config).__name__}", CONFIG_FIX,
        line=user_files.def_line(get_config), what=what)
  return config


def _leaf_paths(config, prefix: str = "") -> dict[str, Any]:
  out = {}
  for key, value in config.items():
    if hasattr(value, "items"):
      out.update(_leaf_paths(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _parses_as(value: str, default: Any) -> bool:
  if isinstance(default, bool):
    return value.lower() in ("true", "false", "1", "0")
  if isinstance(default, int):
    try:
      int(value)
    except ValueError:
      return False
    return True
  if isinstance(default, float):
    try:
      float(value)
    except ValueError:
      return False
    return True
  return True


def _close_fields(path: str, fields: dict[str, Any], sections: list[str]) -> str:
  """A hint for a field path that does not exist: close names within its section, else close
  full paths, else the section's fields or the list of sections."""
  section, _, name = path.partition(".")
  in_section = sorted(p.split(".", 1)[1] for p in fields if p.startswith(section + "."))
  close = [f"{section}.{c}" for c in difflib.get_close_matches(name, in_section, n=3, cutoff=0.7)]
  close = close or difflib.get_close_matches(path, list(fields), n=3, cutoff=0.7)
  if close:
    return "Did you mean " + " or ".join(f"--config.{c}" for c in close) + "?"
  if in_section:
    return f"The fields of {section} are: {', '.join(in_section)}."
  return f"The sections are: {', '.join(sections)}."


def check_overrides(config, argv: list[str]) -> None:
  """Raises CommandLineError for an override naming no field or giving a value of the wrong
  type; the message lists close field names or the expected type and the default."""
  fields = _leaf_paths(config)
  sections = sorted({p.split(".")[0] for p in fields if "." in p})
  for a in argv:
    if not a.startswith("--config."):
      continue
    path, has_value, value = a[len("--config."):].partition("=")
    if path not in fields:
      raise CommandLineError(f"--config.{path} is not a field of the config. "
                             + _close_fields(path, fields, sections))
    default = fields[path]
    if has_value and not _parses_as(value, default):
      raise CommandLineError(
          f"--config.{path}={value}: expected {type(default).__name__} "
          f"(the config's value is {default!r}).")


def _unknown_flag_hint(name: str) -> str:
  known = [n for n in flags.FLAGS if not n.startswith("config.") and len(n) > 1]
  close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
  return (" Did you mean " + " or ".join(f"--{c}" for c in close) + "?") if close else ""


def check_config_args(argv: list[str]) -> None:
  """Checks `--config` and its overrides in `argv` (the whole command line); on a problem,
  prints one paragraph to stderr and exits with status 2 (a mistake on the command line) or 1
  (the config file fails).

  Must run before the module defining the config flag is imported: ml-collections applies the
  overrides found in `sys.argv` when that flag is defined.
  """
  try:
    check_overrides(load_config(config_arg(argv[1:])), argv[1:])
  except (CommandLineError, UserFileError, ConfigError) as e:
    exit_with(e)


def parse_flags(argv: list[str]) -> list[str]:
  """absl `flags_parser` for `app.run`: every flag error as one paragraph, exit status 2."""
  check_config_args(argv)
  try:
    return flags.FLAGS(argv)
  except SystemExit as e:  # absl's --help prints the usage and exits with 1: asking is no error
    if any(a.split("=")[0] in ("--help", "-h", "-?", "--helpshort", "--helpfull") for a in argv):
      sys.exit(0)
    raise e
  except flags.UnrecognizedFlagError as e:
    _fail(f"Unknown flag --{e.flagname}.{_unknown_flag_hint(e.flagname)} "
          "`python launch.py --help` lists the modes and flags.")
  except flags.Error as e:
    _fail(f"{str(e).splitlines()[0]}. `python launch.py --help` lists the modes and flags.")
  return []  # unreachable: _fail exits


def _fail(message: str, status: int = 2) -> None:
  print(f"Error: {message}", file=sys.stderr)
  sys.exit(status)

