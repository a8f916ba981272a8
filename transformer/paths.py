"""Workdirs and sweep dirs: a local folder or a bucket URL (`gs://bucket/run`), one set of calls.

Everything the project writes into or reads from a workdir or a sweep dir goes through here.
A local path behaves exactly as with `os`/`open`; a path with a scheme (`xx://`) goes through
`etils.epath`, which is also what orbax takes, so checkpoints, `config.json`, `metrics.jsonl`,
TensorBoard events, samples, `sweep.json` and reports all land in the same place.

Which schemes work. A training workdir holds orbax checkpoints, whose arrays orbax-checkpoint
(0.12) writes through tensorstore to a local path or, by tensorstore's `gcs` driver, to
`gs://` only; any other scheme would train and then die at the first save. So:

- `gs://`: supported. Files go through epath, which uses TensorFlow's `tf.io.gfile` when
  TensorFlow is installed (it is a dependency here) and `gcsfs` (fsspec) when it is not or
  when `EPATH_USE_TF=false`. Credentials are the usual Google ones.
- `s3://`, `az://`, `hf://` (the other schemes epath knows): refused, naming why.
- `file://`: a local path written as a URL. `--workdir=file:///abs/path` is read as
  `/abs/path` (`local_path`, at the command line); elsewhere a file URL is refused, naming the
  path to give instead.
- any other `xx://`: refused, naming the schemes that work.

`check_backend` decides this from the path and the installed packages alone: it imports
nothing heavy and never contacts the bucket, so a refusal costs nothing and comes before JAX
starts. Reaching the bucket is the first write's job (`probe_write`), bounded by
`REMOTE_TIMEOUT_S` so that an unreachable bucket is a one-line error, not a hang.

Object stores cannot append to an object: `append_text` and `RewrittenFile` keep the whole
file and write it again (metrics and event files are small). Files that need a local file
descriptor (the checkpoint error log, into which stderr is redirected) go to `local_mirror`,
a local folder named after the URL.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import re
import tempfile
import threading
from typing import Callable, Optional, TypeVar

from transformer.errors import CommandLineError, RunError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Schemes etils.epath knows but orbax-checkpoint cannot write checkpoint arrays to.
_NO_CHECKPOINTS = ("s3", "az", "hf")
# Seconds the first write to a bucket may take before the run gives up.
REMOTE_TIMEOUT_S = 60.0

T = TypeVar("T")


def scheme(path: str) -> Optional[str]:
  """`"gs"` for `gs://bucket/run`; None for a local path."""
  match = _SCHEME.match(os.fspath(path))
  return match.group(1).lower() if match else None


def bucket(path: str) -> Optional[str]:
  """`"b"` for `gs://b/run`; `""` for a URL without one (`gs:///run`); None for a local path."""
  if not has_scheme(path):
    return None
  return os.fspath(path).split("://", 1)[1].split("/", 1)[0]


def has_scheme(path: str) -> bool:
  """True for a URL (`xx://...`), False for a local path."""
  return scheme(path) is not None


def _installed(module: str) -> bool:
  """Whether `module` can be imported, without importing it."""
  try:
    return importlib.util.find_spec(module) is not None
  except (ImportError, ValueError):
    return False


def _epath_uses_tf() -> bool:
  """epath's own rule: TensorFlow's gfile for URLs when TensorFlow is installed, unless the
  environment says `EPATH_USE_TF=false`."""
  off = os.environ.get("EPATH_USE_TF", "").lower() in ("false", "no", "f", "0")
  return not off and _installed("tensorflow")


def local_path(path: str) -> str:
  """The local path a file URL names (`file:///abs/path` and `file://localhost/abs/path` ->
  `/abs/path`, percent-escapes decoded); any other path or URL unchanged."""
  if scheme(path) != "file":
    return path
  from urllib.parse import unquote, urlsplit
  parts = urlsplit(os.fspath(path))
  if parts.netloc not in ("", "localhost"):
    return path  # another host's file: backend_problem refuses it
  return unquote(parts.path)


def backend_problem(path: str) -> Optional[str]:
  """Why `path` cannot hold a run here, in words; None when it can. Looks at the path and the
  installed packages only (no import of them, no network)."""
  name = scheme(path)
  if name == "file":
    local = local_path(path)
    return (f"a file URL names a local folder: give its path ({local}) instead" if
            local != path else "a file URL names a folder of this machine, not of another host "
            "(file:///abs/path); give a local or mounted folder")
  if name is not None and not bucket(path):
    return (f"{name}:// is followed by no bucket (a third '/' ends the empty bucket name); "
            f"write {name}://BUCKET/FOLDER")
  if name is None or name == "gs" and (_epath_uses_tf() or _installed("gcsfs")):
    return None
  if name == "gs":
    return ("gs:// needs the gcsfs package (pip install gcsfs), or TensorFlow's tf.io.gfile "
            "(unset EPATH_USE_TF=false where TensorFlow is installed)")
  if name in _NO_CHECKPOINTS:
    return (f"{name}:// is not supported: orbax-checkpoint writes checkpoint arrays only to "
            "local paths and gs:// (tensorstore's gcs driver); use a gs:// bucket or a local "
            "or mounted folder")
  return (f"{name}:// is not a storage scheme this project can use; give a local folder or "
          "a gs:// URL")


def check_backend(path: str, flag: str = "--workdir") -> None:
  """Raises a one-line `CommandLineError` naming what to install or use when `path` is a URL
  this machine cannot write a run to (see the module docstring)."""
  problem = backend_problem(path)
  if problem:
    raise CommandLineError(f"{flag}={path}: {problem}.")


def as_path(path: str):
  """`path` as an `epath.Path` (local paths made absolute, URLs kept as they are)."""
  from etils import epath  # only where a path is used, not at import
  return epath.Path(absolute(path))


def absolute(path: str) -> str:
  """`os.path.abspath(path)` for a local path; a URL unchanged."""
  return os.fspath(path) if has_scheme(path) else os.path.abspath(path)


def join(path: str, *parts: str) -> str:
  """`os.path.join` for both kinds (a URL's separator is '/')."""
  return "/".join([os.fspath(path).rstrip("/"), *parts]) if has_scheme(path) else \
      os.path.join(path, *parts)


def basename(path: str) -> str:
  """The last part of a local path or URL, ignoring a trailing slash."""
  return os.path.basename(os.fspath(path).rstrip("/"))


def exists(path: str) -> bool:
  return as_path(path).exists() if has_scheme(path) else os.path.exists(path)


def isdir(path: str) -> bool:
  return as_path(path).is_dir() if has_scheme(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
  if not has_scheme(path):
    return os.path.isfile(path)
  p = as_path(path)
  return p.exists() and not p.is_dir()


def listdir(path: str) -> list[str]:
  """The names in a folder (no paths)."""
  if not has_scheme(path):
    return os.listdir(path)
  return [p.name for p in as_path(path).iterdir()]


def makedirs(path: str) -> None:
  """Creates the folder and its parents if missing (on a bucket, where folders are only
  prefixes, this writes nothing or a marker, as the backend does)."""
  if has_scheme(path):
    as_path(path).mkdir(parents=True, exist_ok=True)
  else:
    os.makedirs(path, exist_ok=True)


def open_file(path: str, mode: str = "r", **kwargs):
  """`open(path, mode)` for a local path; epath's `open` for a URL (modes r, w, rb, wb; no
  append: use `append_text`)."""
  if not has_scheme(path):
    return open(path, mode, **kwargs)
  if "a" in mode:
    raise ValueError(f"append mode on {path}: use append_text (objects cannot be appended to)")
  kwargs.pop("newline", None)  # epath's text files take no newline argument
  return as_path(path).open(mode, **kwargs)


def read_text(path: str) -> str:
  with open_file(path, "r", encoding="utf-8") as f:
    return f.read()


def write_text(path: str, text: str, mode: Optional[int] = None) -> None:
  """Writes the whole file `path` at once. Locally: a temporary file beside it (a name no other
  process uses), flushed to disk, then renamed over `path`, so a crash, a kill or a full disk
  leaves the old file or the new one, never half of one, and no temporary file behind.
  `mode` sets the file's permission bits (default: the umask's). On a bucket the store writes
  an object whole by itself."""
  _write_whole(path, text, mode)


def write_bytes(path: str, data: bytes, mode: Optional[int] = None) -> None:
  """`write_text` for bytes: the whole binary file `path` at once, atomically where local."""
  _write_whole(path, data, mode)


def _write_whole(path: str, data: str | bytes, mode: Optional[int]) -> None:
  """The one writer behind `write_text` (`data` a str, written as UTF-8 text) and
  `write_bytes` (`data` bytes, written as they are)."""
  binary = isinstance(data, bytes)
  kwargs = {} if binary else {"encoding": "utf-8"}
  if has_scheme(path):
    with open_file(path, "wb" if binary else "w", **kwargs) as f:
      f.write(data)
    return
  tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
  try:
    with open(tmp, "xb" if binary else "x", **kwargs) as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    if mode is not None:
      os.chmod(tmp, mode)
    os.replace(tmp, path)
  except BaseException:
    try:
      os.unlink(tmp)
    except OSError:
      pass
    raise


def append_text(path: str, text: str) -> None:
  """Appends the lines `text` to the file (created if missing), after its last complete line:
  a last line without its newline (torn by a kill while it was written) is cut off first, so
  the new lines never join it into one that does not parse. On a bucket the object is read
  and written again whole: objects cannot be appended to."""
  if not has_scheme(path):
    with open(path, "a+b") as f:
      f.truncate(_complete_lines_end(f))
      f.write(text.encode("utf-8"))
    return
  p = as_path(path)
  old = p.read_bytes() if p.exists() else b""
  p.write_bytes(old[:old.rfind(b"\n") + 1] + text.encode("utf-8"))


def _complete_lines_end(f, chunk: int = 1 << 16) -> int:
  """The length of the binary file `f`'s text up to and with its last newline (0 if none);
  reads backwards from the end, usually one byte."""
  end = f.seek(0, os.SEEK_END)
  pos = end
  while pos > 0:
    start = max(0, pos - chunk)
    f.seek(start)
    block = f.read(pos - start)
    if start + len(block) == end and block.endswith(b"\n"):
      return end
    cut = block.rfind(b"\n")
    if cut >= 0:
      return start + cut + 1
    pos = start
  return 0


class RewrittenFile(io.RawIOBase):
  """A binary file for writing on a bucket whose `flush` makes everything written so far
  visible at once, by writing the whole object again (a bucket's own writers upload only on
  close). For event files, which TensorBoard reads while a run goes on."""

  def __init__(self, path: str):
    super().__init__()
    self.path = path
    self._data = bytearray()
    self._flushed = -1

  def writable(self) -> bool:
    return True

  def write(self, data) -> int:
    self._data += data
    return len(data)

  def flush(self) -> None:
    if not self.closed and self._flushed != len(self._data):
      as_path(self.path).write_bytes(bytes(self._data))
      self._flushed = len(self._data)

  def close(self) -> None:
    if not self.closed:
      self.flush()
    super().close()


def local_mirror(path: str) -> str:
  """A local folder standing in for the URL `path`, for files that need a local file
  descriptor (`<tmp>/transformer-remote/gs/bucket/run`); `path` itself when local."""
  if not has_scheme(path):
    return path
  rest = re.sub(r"[^A-Za-z0-9._/-]", "_", os.fspath(path).split("://", 1)[1]).strip("/")
  return os.path.join(tempfile.gettempdir(), "transformer-remote", scheme(path), rest)


def bounded(what: str, fn: Callable[[], T], timeout_s: float = REMOTE_TIMEOUT_S,
            error: type = RunError) -> T:
  """`fn()`, or a one-line `error` (a `RunError` unless given) when it raised or has not
  returned within `timeout_s` seconds (it goes on in a daemon thread, which the exit
  abandons). For the first contact with a bucket, whose libraries may retry for minutes."""
  result: dict = {}

  def target():
    try:
      result["value"] = fn()
    except BaseException as e:  # noqa: BLE001 -- re-raised below as one line
      result["error"] = e
  thread = threading.Thread(target=target, daemon=True, name="transformer-bucket-probe")
  quiet = logging.getLogger("gcsfs")  # logs each failed retry with its traceback
  level = quiet.level
  quiet.setLevel(logging.CRITICAL)
  try:
    thread.start()
    thread.join(timeout_s)
  finally:
    quiet.setLevel(level)
  if thread.is_alive():
    raise error(f"{what}: no answer within {timeout_s:.0f}s; check the URL, the network "
                   "and the credentials.")
  if "error" in result:
    e = result["error"]
    text = re.sub(r"\s+", " ", str(e)).strip()[:300]
    raise error(f"{what}: {type(e).__name__}: {text}") from None
  return result.get("value")


def probe_write(path: str, timeout_s: float = REMOTE_TIMEOUT_S,
                flag: str = "--workdir") -> None:
  """Creates the URL folder `path` and writes and removes a small file there, within
  `timeout_s` seconds; a one-line `RunError` (naming `flag` and the URL) when it cannot."""
  def write():
    probe = as_path(path) / f".write-probe-{os.getpid()}"
    as_path(path).mkdir(parents=True, exist_ok=True)
    probe.write_text("probe")
    probe.unlink()
  bounded(f"{flag}={path} cannot be written", write, timeout_s)


def local_copy(path: str) -> str:
  """A local file with the contents of `path`: `path` itself when local, else a copy in its
  `local_mirror` (for libraries that read only local files, such as SentencePiece)."""
  if not has_scheme(path):
    return path
  target = local_mirror(path)
  os.makedirs(os.path.dirname(target), exist_ok=True)
  with open(target, "wb") as f:
    f.write(as_path(path).read_bytes())
  return target


def upload(local: str, path: str) -> None:
  """Copies the local file `local` to `path` (a URL, or a local path other than `local`)."""
  if os.path.abspath(local) == absolute(path):
    return
  makedirs(os.path.dirname(path) if not has_scheme(path) else path.rsplit("/", 1)[0])
  with open(local, "rb") as src, open_file(path, "wb") as dst:
    dst.write(src.read())
