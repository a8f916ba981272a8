"""Reading the files a user hands in: config and sweep files (Python), a workdir's config.json
(JSON) and metrics.jsonl (JSON lines), a checkpoint's metadata.

Every failure is a `UserFileError` (a `MissingFileError` when the file is not there) whose
message is one line: the file, the line (and column) where the problem is, what is wrong and
what to do, e.g.

  experiments/lr.py, line 7, column 12 (the --sweep file): invalid syntax. Fix that line and
  run the command again.

Reading never writes: no `__pycache__` next to a Python file, nothing in a workdir.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import types
import zlib
from typing import Any, Callable, Optional

from transformer import paths
from transformer.config import ConfigError
from transformer.errors import CommandLineError, MissingFileError, UserFileError

_FIX = "Fix the file and run the command again."
# A workdir's config.json, as the readers of a run name it and say what to do.
SAVED_CONFIG = "the run's saved config"
SAVED_CONFIG_FIX = ("--mode=train writes this file: restore it from a copy of the run, or "
                    "train into a new --workdir.")


def location(path: str, line: Optional[int] = None, column: Optional[int] = None,
             what: str = "") -> str:
  """`path, line 3, column 5 (the --sweep file)`; the parts that are known."""
  out = (path + (f", line {line}" if line else "")
         + (f", column {column}" if line and column else ""))
  return out + (f" ({what})" if what else "")


def one_line(text: str) -> str:
  """`text` with its whitespace runs (newlines included) made single spaces."""
  return re.sub(r"\s+", " ", str(text)).strip()


def file_error(path: str, problem: str, fix: str = _FIX, *, line: Optional[int] = None,
               column: Optional[int] = None, what: str = "",
               cls: type = UserFileError) -> Exception:
  """The one-line error `<location>: <problem> <fix>` (raise it)."""
  problem = one_line(problem).rstrip(".")
  return cls(f"{location(path, line, column, what)}: {problem}. {fix}".strip())


def read_text(path: str, what: str = "") -> str:
  """The file's text (UTF-8; gunzipped when `path` ends in `.gz`); a missing file, a
  directory or an unreadable file is an error."""
  try:
    if path.endswith(".gz"):
      with paths.open_file(path, "rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return f.read()
    with paths.open_file(path, encoding="utf-8") as f:
      return f.read()
  except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
    kind = "is a directory" if isinstance(e, IsADirectoryError) else "does not exist"
    raise file_error(path, f"the file {kind}", "Give the path of a file.", what=what,
                     cls=MissingFileError) from None
  except (gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise file_error(path, f"cannot be read as gzipped text: {e}",
                     "Restore it from a copy, or gunzip it.", what=what) from None
  except OSError as e:
    raise file_error(path, f"cannot be read: {e.strerror or e}",
                     "Check its permissions.", what=what) from None
  except UnicodeDecodeError as e:
    line = None  # a gzipped file's offsets are not the text's
    if not path.endswith(".gz"):
      with paths.open_file(path, "rb") as f:
        line = f.read(e.start).count(b"\n") + 1
    raise file_error(path, f"byte {e.object[e.start:e.start + 1]!r} is not UTF-8 text",
                     "Save the file as UTF-8.", line=line, what=what) from None


# --- JSON ---------------------------------------------------------------------------------

def parse_json(text: str, path: str, what: str = "", fix: str = _FIX) -> Any:
  """`json.loads(text)`; invalid JSON is an error at its line and column of `path`."""
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise file_error(path, f"not valid JSON: {e.msg}", fix, line=e.lineno, column=e.colno,
                     what=what) from None


def read_json(path: str, what: str = "", fix: str = _FIX, *, text: Optional[str] = None) -> Any:
  """The JSON value in `path` (in `text`, when given: the file's text read from elsewhere,
  such as a packed study; errors still name `path`)."""
  return parse_json(read_text(path, what) if text is None else text, path, what, fix)


def read_json_object(path: str, what: str = "", fix: str = _FIX, *,
                     text: Optional[str] = None) -> dict:
  """The JSON object (dict) in `path` (or `text`); any other JSON value is an error."""
  value = read_json(path, what, fix, text=text)
  if not isinstance(value, dict):
    raise file_error(path, f"holds a JSON {_json_type(value)}, not an object ({{...}})", fix,
                     line=1, what=what)
  return value


def _json_type(value: Any) -> str:
  names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
  return "null" if value is None else names.get(type(value), type(value).__name__)


def read_json_lines(path: str, what: str = "", *, skip_bad: bool = False,
                    text: Optional[str] = None) -> list[dict]:
  """The JSON objects of a JSON-lines file, one a line (blank lines skipped).

  A last line without its newline that does not parse was torn by a kill while it was being
  written: it is left out. Another line that does not parse, or is not an object, is an error
  naming it, unless `skip_bad` (then it is left out too: a torn line that a resumed run
  appended to). `text`, when given, is the file's text read from elsewhere (a packed study).
  """
  if text is None:
    text = read_text(path, what)
  rows = []
  lines = text.split("\n")
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    torn = number == len(lines)  # the text after the last newline
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      if torn or skip_bad:
        continue
      raise file_error(path, f"not a JSON object: {e.msg} (column {e.colno})",
                       f"Delete line {number} (a kill while it was written leaves such a "
                       "line) and run the command again.", line=number, what=what) from None
    if not isinstance(row, dict):
      if skip_bad:
        continue
      raise file_error(path, f"holds a JSON {_json_type(row)}, not an object",
                       f"Delete line {number} and run the command again.", line=number,
                       what=what)
    rows.append(row)
  return rows


# --- Python -------------------------------------------------------------------------------

def load_python(path: str, what: str = "", name: str = "") -> types.ModuleType:
  """Runs the Python file `path` as a fresh module and returns it. A syntax error, or an
  exception while the file runs (a failed import, a NameError), is an error at its line."""
  source = read_text(path, what)
  try:
    code = compile(source, path, "exec", dont_inherit=True)
  except SyntaxError as e:  # IndentationError and TabError too
    raise file_error(e.filename or path, f"{e.msg}", "Fix that line and run the command again.",
                     line=e.lineno, column=e.offset, what=what) from None
  module = types.ModuleType(name or "_user_" + re.sub(r"\W", "_", os.path.abspath(path)))
  module.__file__ = path
  sys.modules[module.__name__] = module  # dataclasses and pickling look a module up there
  try:
    exec(code, module.__dict__)  # running the user's own file is the point
  except Exception as e:  # noqa: BLE001 -- any failure of the user's file is reported
    del sys.modules[module.__name__]
    raise exception_error(e, path, what, "while the file ran") from None
  return module


def function(module: types.ModuleType, name: str, what: str, fix: str) -> Callable:
  """`module.<name>`, which must be a function; else an error saying what the file needs."""
  path = module.__file__
  fn = getattr(module, name, None)
  if fn is None:
    raise file_error(path, f"defines no {name}()", fix, what=what)
  if not callable(fn):
    raise file_error(path, f"{name} is a {type(fn).__name__}, not a function", fix, what=what)
  return fn


def def_line(fn: Callable) -> Optional[int]:
  """The line of `fn`'s `def` (None for a builtin or a callable object)."""
  return getattr(getattr(fn, "__code__", None), "co_firstlineno", None)


def call(fn: Callable, *args, path: str, what: str = "") -> Any:
  """`fn(*args)` of a user's file; an exception it raises is an error at the line of `path`
  (or of the user's own helper module) where it happened.

  A ConfigError or CommandLineError keeps its class (its message was written for the user),
  with the location put in front."""
  try:
    return fn(*args)
  except Exception as e:  # noqa: BLE001
    raise exception_error(e, path, what, f"in {getattr(fn, '__name__', 'the function')}()",
                          default_line=def_line(fn)) from None


def exception_error(e: BaseException, path: str, what: str, during: str,
                    default_line: Optional[int] = None) -> Exception:
  """`e`, raised while running the user's file `path`, as a one-line error at its line."""
  where, line = _user_frame(e, path)
  line = line or default_line
  if isinstance(e, (ConfigError, CommandLineError)):
    return type(e)(f"{location(where, line, what=what)}: {one_line(e)}")
  problem = f"{type(e).__name__} {during}: {one_line(e) or '(no message)'}"
  if isinstance(e, SyntaxError) and e.filename:  # in a module the file imports
    where, line = e.filename, e.lineno
  return file_error(where, problem, line=line, what=what if where == path else "")


def _user_frame(e: BaseException, path: str) -> tuple[str, Optional[int]]:
  """The innermost traceback frame in `path`, else in a file outside Python's and the
  installed packages' folders (the user's helper module); `(path, None)` if neither."""
  frames = []
  tb = e.__traceback__
  while tb is not None:
    frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
    tb = tb.tb_next
  target = os.path.abspath(path)
  mine = [f for f in frames if os.path.abspath(f[0]) == target]
  if mine:
    return path, mine[-1][1]
  library = tuple(os.path.abspath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
  theirs = [f for f in frames if not f[0].startswith("<") and
            not os.path.abspath(f[0]).startswith(library) and
            os.path.abspath(f[0]) != os.path.abspath(__file__)]
  return theirs[-1] if theirs else (path, None)
