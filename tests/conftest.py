"""Test setup: 8 fake CPU devices and fast compiles (both set before JAX is imported), quiet
TensorFlow, and one compilation cache for the session.

The suite trains the same few small models in hundreds of tests and subprocesses, and on CPU
most of a short run is XLA compiling them. Every process of the session (the xdist workers and
the launch.py runs and workers the tests start inherit the environment) shares one JAX
persistent compilation cache in a temporary folder, removed when the session ends.
`JAX_COMPILATION_CACHE_DIR= pytest ...` (empty) compiles everything afresh.

The cache has no size limit, so JAX takes no lock around it. With a limit, JAX holds a file
lock (10 s timeout) around every read and write; CI's suite took 2,716 s with such a cache at
stop 59 against 1,631 s without, likely (not proven) because test_workdir_lock SIGSTOPs
processes that may hold the lock. Unlocked, two processes may write one program at once; a
reader that sees a half-written entry gets JAX's warning and compiles it.
"""

import atexit
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from tests.xla_flags import FAST_COMPILE  # noqa: E402

# LLVM at -O0 for the tests' XLA programs; a flag already in XLA_FLAGS is kept as set.
_fast = "" if "xla_backend_optimization_level" in os.environ.get("XLA_FLAGS", "") else FAST_COMPILE
os.environ["XLA_FLAGS"] = " ".join(filter(None, [
    os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8", _fast]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The measured CPU peak (for MFU) is cached per test session, not in the user's ~/.cache.
if "TRANSFORMER_CACHE_DIR" not in os.environ:  # else the user's, or the xdist controller's
  os.environ["TRANSFORMER_CACHE_DIR"] = tempfile.mkdtemp(prefix="transformer-cache-")
  atexit.register(shutil.rmtree, os.environ["TRANSFORMER_CACHE_DIR"], ignore_errors=True)
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # else the user's, or the xdist controller's
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="transformer-xla-cache-")
  # This process made it; its workers and subprocesses end before it does.
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # keep every program
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import pytest  # noqa: E402


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
