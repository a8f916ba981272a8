"""The files of a local text corpus (default: this Python's standard library), listed without
TensorFlow: the `local_text` and `stdlib_package` builders read them, and provenance
(`transformer.provenance`) fingerprints them."""

from __future__ import annotations

import hashlib
import os
import sysconfig

EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def stdlib_dir() -> str:
  """The running interpreter's standard library folder (the default corpus)."""
  return sysconfig.get_paths()["stdlib"]


def list_source_files(source_dir: str, suffixes: tuple[str, ...]) -> list[str]:
  """Relative paths of files under `source_dir` with one of `suffixes`, sorted; folders named
  in `EXCLUDED_DIRS` are skipped."""
  found = []
  for root, dirs, files in os.walk(source_dir):
    dirs[:] = sorted(d for d in dirs if d not in EXCLUDED_DIRS)
    for f in files:
      if f.endswith(suffixes):
        found.append(os.path.relpath(os.path.join(root, f), source_dir))
  return sorted(found)


def is_validation(rel_path: str, validation_percent: int) -> bool:
  """Whether the file at `rel_path` (relative to the corpus folder) is held out: an MD5 hash of
  its path, so the split is the same on every machine and never mixes a file's parts."""
  digest = hashlib.md5(rel_path.replace(os.sep, "/").encode()).hexdigest()
  return int(digest, 16) % 100 < validation_percent
