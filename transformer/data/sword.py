"""Plain-text chapters of SWORD Bible modules (the prose corpus; no TensorFlow).

The prose corpus is two public-domain English Bibles that Debian ships as SWORD modules:
`apt-get install sword-text-kjv sword-text-web` puts the King James Version (engKJV2006eb)
and the World English Bible with Deuterocanon (engWEB2015eb) under `PROSE_DIR`. A zText
module holds `ot.bzz` / `nt.bzz` (one zlib block per book) indexed by `ot.bzs` / `nt.bzs`
(12 bytes a block: offset, compressed size, size, little-endian uint32). Each block is OSIS
XML; `chapters` cuts it at its `<chapter sID=...>` milestones and keeps the words (footnotes
and markup dropped), so each chapter is one document, named by its OSIS id (`Gen.1`). The
`local_text` builder reads `.bzz` files this way and splits by a hash of the chapter id, so a
chapter of both translations lands in the same split.
"""

from __future__ import annotations

import html
import os
import re
import struct
import zlib
from typing import Iterator

PROSE_DIR = "/usr/share/sword/modules/texts/ztext"
# module folder -> the Debian package that ships it
PROSE_MODULES = {"engKJV2006eb": "sword-text-kjv", "engWEB2015eb": "sword-text-web"}
INSTALL = "apt-get install sword-text-kjv sword-text-web"

_CHAPTER = re.compile(r'<chapter\b[^>]*\bsID="([^"]+)"[^>]*/>')
_NOTE = re.compile(r"<note\b.*?</note>", re.S)
_BREAK = re.compile(r"</?(?:div|p|lg|l|lb|title|chapter|milestone)\b[^>]*>")
_TAG = re.compile(r"<[^>]+>")


def missing_packages(source_dir: str) -> list[str]:
  """The Debian packages of the prose corpus whose module is absent, when `source_dir` is
  `PROSE_DIR`; [] for any other folder."""
  if os.path.abspath(source_dir or "/") != PROSE_DIR:
    return []
  return [pkg for mod, pkg in PROSE_MODULES.items()
          if not os.path.isfile(os.path.join(PROSE_DIR, mod, "ot.bzz"))]


def missing_message(source_dir: str) -> str:
  """'' when `source_dir` is not the prose corpus or has all of it; else a one-line error that
  names the install command."""
  missing = missing_packages(source_dir)
  if not missing:
    return ""
  return (f"The prose corpus ({source_dir}) needs the Debian package(s) {' '.join(missing)}, "
          f"not installed here; install them with `{INSTALL}` (as root).")


def plain_text(osis: str) -> str:
  """The words of an OSIS fragment: notes dropped, paragraphs, lines and titles on lines of
  their own, entities decoded, runs of spaces and blank lines collapsed."""
  text = _TAG.sub("", _BREAK.sub("\n", _NOTE.sub("", osis)))
  lines = (" ".join(line.split()) for line in html.unescape(text).split("\n"))
  return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def blocks(bzz_path: str) -> Iterator[str]:
  """The decompressed blocks (books) of a zText `.bzz` file, in order, via its `.bzs` index."""
  with open(bzz_path[:-1] + "s", "rb") as f:
    index = f.read()
  with open(bzz_path, "rb") as f:
    data = f.read()
  for offset, size, _ in struct.iter_unpack("<III", index[:len(index) // 12 * 12]):
    if size:
      try:
        block = zlib.decompress(data[offset:offset + size])
      except zlib.error as e:  # a torn or truncated module file
        raise ValueError(f"{bzz_path} is damaged at byte {offset} ({e}); reinstall it with "
                         f"`apt-get install --reinstall {' '.join(PROSE_MODULES.values())}`."
                         ) from None
      yield block.decode("utf-8", errors="replace")


def split_chapters(osis: str) -> list[tuple[str, str]]:
  """`[(chapter id, OSIS)]` of one block, cut at each chapter's start milestone; what comes
  before the first (book title, introduction) joins the first chapter. A block without chapters
  gives one piece with id ''."""
  starts = list(_CHAPTER.finditer(osis))
  if not starts:
    return [("", osis)]
  cuts = [0] + [m.start() for m in starts[1:]] + [len(osis)]
  return [(m.group(1), osis[cuts[i]:cuts[i + 1]]) for i, m in enumerate(starts)]


def chapters(bzz_path: str) -> Iterator[tuple[str, str]]:
  """`(id, plain text)` of each chapter of a zText `.bzz` file with words in it. The id is the
  OSIS chapter id (`Gen.1`), or `<file name>#<block>` for text outside any chapter."""
  for number, block in enumerate(blocks(bzz_path)):
    for chapter_id, osis in split_chapters(block):
      text = plain_text(osis)
      if text:
        yield chapter_id or f"{os.path.basename(bzz_path)}#{number}", text
