"""Errors a user can act on. `launch.py` prints their message and exits non-zero, without a
traceback: the message itself says what went wrong and what to do.

Exit status: 2 for a mistake on the command line (`CommandLineError`: a flag's value, a path
of the wrong kind, a step that does not exist), 1 for everything else (a config value, the
contents of a file, a run that failed).
"""

from __future__ import annotations

import re
import sys

COMMAND_LINE_STATUS = 2
ERROR_STATUS = 1


class ConfigError(ValueError):
  """A config value is invalid; the message says which field and how to fix it."""


def check_choice(section: str, field: str, value, allowed: tuple[str, ...]) -> None:
  """A ConfigError unless `value` is one of `allowed`."""
  if value not in allowed:
    raise ConfigError(
        f"--config.{section}.{field}={value!r} is not supported; choose one of {list(allowed)}.")


def check_positive(section: str, field: str, value, allow_zero: bool = False) -> None:
  """A ConfigError unless `value` is a number > 0 (>= 0 with `allow_zero`)."""
  ok = isinstance(value, (int, float)) and (value >= 0 if allow_zero else value > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    raise ConfigError(f"--config.{section}.{field}={value!r} must be a number {bound}.")


class RunError(RuntimeError):
  """A run stopped for a reason outside the config's values (training diverged, a checkpoint
  could not be read or written, a directory is not writable)."""


class CommandLineError(Exception):
  """A flag or config override on the command line is wrong; the message says how."""


class UserFileError(RunError):
  """A file the user handed in (a config or sweep file, a workdir's config.json or
  metrics.jsonl) cannot be read or holds something wrong; the message names the file, the line
  and what to do. See `transformer.user_files`."""


class MissingFileError(UserFileError):
  """The file is not there (or is a directory): callers that treat a missing file as "no run
  yet" catch this one."""


def out_of_memory(e: BaseException, what: str, fix: str) -> "RunError | None":
  """A one-line `RunError` for `e` when it is XLA's out-of-memory error (RESOURCE_EXHAUSTED,
  many lines of buffer assignment), naming `what` ran out, the bytes asked for and `fix`;
  None for any other error."""
  text = str(e)
  if "RESOURCE_EXHAUSTED" not in text and "Out of memory" not in text:
    return None
  asked = re.search(r"allocate (\d+) bytes", text)
  size = f" (asked for {int(asked.group(1)) / 2**30:.2f} GiB more)" if asked else ""
  first = re.sub(r"\s+", " ", text.strip().splitlines()[0])[:160]
  return RunError(f"{what} does not fit in device memory{size}: {first}. {fix}")


def exit_status(e: BaseException) -> int:
  return COMMAND_LINE_STATUS if isinstance(e, CommandLineError) else ERROR_STATUS


def error_line(e: BaseException) -> str:
  """What `launch.py` prints for `e`: "Config error: ..." for a config value, else "Error: ..."."""
  return f"Config error: {e}" if isinstance(e, ConfigError) else f"Error: {e}"


def exit_with(e: BaseException) -> None:
  """Prints `e` as one paragraph on stderr and exits with its status."""
  print(error_line(e), file=sys.stderr, flush=True)
  sys.exit(exit_status(e))
