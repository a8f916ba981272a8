"""Generated blocks of README.md: the text between a start and an end marker, replaced whole
(atomically: a crash leaves the old README) by the scripts that generate it
(`fits_table.py`, `accelerator_report.py merge`)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformer import paths  # imports neither JAX nor TensorFlow


class MarkerError(ValueError):
  """The file lacks the block's markers."""


def replace_block(path: str, start: str, end: str, lines: list[str]) -> bool:
  """Replaces the lines between `start` and `end` in `path` with `lines`; whether the file
  changed. MarkerError when either marker is missing."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  if start not in text or end not in text:
    raise MarkerError(f"{path} has no {start!r} ... {end!r} block to replace.")
  head, rest = text.split(start, 1)
  _, tail = rest.split(end, 1)
  new = head + start + "\n" + "\n".join(lines) + "\n" + end + tail
  if new != text:
    paths.write_text(path, new)
  return new != text
