"""The files of a local text corpus (default: this Python's standard library), listed without
TensorFlow: the `local_text` and `stdlib_package` builders read them, and provenance
(`transformer.provenance`) fingerprints them.

A file is one document, split by a hash of its path, except a SWORD Bible module's `.bzz` file
(`transformer.data.sword`: the prose corpus), whose documents are its chapters, each split by a
hash of its chapter id (`Gen.1`), so one chapter of two translations lands in one split. An
`.html` file's document is its text, markup stripped (`transformer.data.manuals`); under
`manuals.VARIED_DIR` (the varied-prose corpus) only the manuals' pages of `manuals.MANUALS`
are listed.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from typing import Iterator

from transformer.data import manuals, sword

EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def stdlib_dir() -> str:
  """The running interpreter's standard library folder (the default corpus)."""
  return sysconfig.get_paths()["stdlib"]


def list_source_files(source_dir: str, suffixes: tuple[str, ...]) -> list[str]:
  """Relative paths of files under `source_dir` with one of `suffixes`, sorted; folders named
  in `EXCLUDED_DIRS` are skipped. Under `manuals.VARIED_DIR`: the corpus's manual pages."""
  if manuals.is_corpus(source_dir):
    return [f for f in manuals.corpus_files(source_dir) if f.endswith(suffixes)]
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


def read_text(path: str) -> str:
  """A file's text, decoded as UTF-8 with undecodable bytes replaced; an `.html` file's with
  its markup stripped (`manuals.plain_text`)."""
  with open(path, "rb") as f:
    text = f.read().decode("utf-8", errors="replace")
  return manuals.plain_text(text) if path.endswith(".html") else text


def missing_message(source_dir: str) -> str:
  """'' unless `source_dir` is a packaged corpus (the Bibles, the manuals) with packages
  missing; then the one-line error that names the `apt-get install` to run."""
  return sword.missing_message(source_dir) or manuals.missing_message(source_dir)


def document_keys(source_dir: str, rel_path: str) -> list[str]:
  """The split keys of the documents of one corpus file: its path, or a `.bzz` file's chapter
  ids (`transformer.data.sword.chapters`)."""
  if rel_path.endswith(".bzz"):
    return [key for key, _ in sword.chapters(os.path.join(source_dir, rel_path))]
  return [rel_path]


def split_documents(source_dir: str, rel_paths: list[str], validation_percent: int,
                    validation: bool) -> Iterator[tuple[str, str]]:
  """`(name, text)` of the documents of `rel_paths` in the validation split (`validation`) or
  in the train split, in file order. A whole file's name is its path (`/`-separated); a
  chapter's is `<path>#<chapter id>`. A whole file outside the split is never read."""
  for rel in rel_paths:
    name = rel.replace(os.sep, "/")
    if rel.endswith(".bzz"):
      for key, text in sword.chapters(os.path.join(source_dir, rel)):
        if is_validation(key, validation_percent) == validation:
          yield f"{name}#{key}", text
    elif is_validation(rel, validation_percent) == validation:
      yield name, read_text(os.path.join(source_dir, rel))
