"""Test setup: 8 fake CPU devices (set before JAX is imported), quiet TensorFlow, and one
compilation cache for the whole session.

The suite trains the same few small models in hundreds of tests and subprocesses, and on CPU
most of a short run is XLA compiling them. Every process the session starts (the xdist
workers inherit the controller's environment, and the launch.py runs the tests start inherit
theirs) shares one JAX persistent compilation cache in a temporary folder, removed when the
session ends. `JAX_COMPILATION_CACHE_DIR= pytest ...` (empty) compiles everything afresh.
"""

import os
import shutil
import sys
import tempfile

import pytest

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

_SESSION_DIRS = []  # the temporary folders this process made, removed at the session's end


def _session_dir(variable: str, prefix: str) -> None:
  """Points `variable` at a new temporary folder unless the environment already names one
  (a user's choice, or the folder the xdist controller made for its workers)."""
  if variable not in os.environ:
    os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
    _SESSION_DIRS.append(os.environ[variable])


# The measured CPU peak (for MFU) is cached per test session, not in the user's ~/.cache.
_session_dir("TRANSFORMER_CACHE_DIR", "transformer-cache-")
_session_dir("JAX_COMPILATION_CACHE_DIR", "transformer-xla-cache-")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # keep every program
# A size limit makes JAX lock the folder around each read and write: processes share it.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)


@pytest.fixture
def tiny_corpus(tmp_path):
  """A folder of small deterministic 'source files' and a TFDS data dir beside it."""
  src = tmp_path / "corpus"
  (src / "pkg").mkdir(parents=True)
  (src / "test").mkdir()
  words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else"]
  for i in range(40):
    lines = [f"# file {i}"]
    for j in range(30):
      w = [words[(i * 7 + j * 3 + k) % len(words)] for k in range(6)]
      lines.append("    " * (j % 3) + " ".join(w) + f"_{j % 5}")
    (src / "pkg" / f"mod_{i:02d}.py").write_text("\n".join(lines) + "\n")
  (src / "test" / "excluded.py").write_text("should not appear\n")
  (src / "notes.txt").write_text("not python\n")
  return {"source_dir": str(src), "data_dir": str(tmp_path / "tfds")}


def pytest_unconfigure(config):
  """The session's temporary folders go when the process that made them ends its session."""
  del config
  for directory in _SESSION_DIRS:
    shutil.rmtree(directory, ignore_errors=True)
