"""Plain text of HTML manuals, and the varied-prose corpus (the third corpus; no TensorFlow).

The varied-prose corpus is the English HTML prose of six manuals that Debian ships, by many
authors on many topics: the Python documentation (tutorial, howtos, FAQs, language and library
reference, what's new), the Debian Administrator's Handbook, the Debian Reference, the Debian
FAQ, the New Maintainers' Guide and the Developer's Reference. `apt-get install` of `INSTALL`
puts them under `VARIED_DIR` (`/usr/share`); `MANUALS` names, per package, the files that are
corpus (tables of contents, indexes, search pages, the single-page copy of a manual and other
languages left out). Each page is one document, held out by a hash of its path below
`VARIED_DIR` (`local_files.is_validation`). `plain_text` strips an HTML page to its words:
head, scripts, styles, navigation, sidebars, footers, code blocks (`<pre>`) and the pilcrow
links dropped; block elements on lines of their own, entities decoded, spaces collapsed. Any
`.html` file `local_text` reads goes through it.
"""

from __future__ import annotations

import html.parser
import os
import re

VARIED_DIR = "/usr/share"
# package -> (folder below VARIED_DIR to walk, pattern its corpus files' paths match in full)
MANUALS = {
    "python3-doc": ("doc", r"doc/python3\.\d+/html/(?:(?:tutorial|howto|faq|library|reference|"
                           r"using|extending|whatsnew|installing|distributing)/(?!index\.html)"
                           r"[^/]+|glossary)\.html"),
    "debian-handbook": ("doc/debian-handbook/html/en-US",
                        r"doc/debian-handbook/html/en-US/(?!index\.html)[^/]+\.html"),
    "debian-reference-en": ("debian-reference", r"debian-reference/(?!index\.)[^/]+\.en\.html"),
    "debian-faq": ("doc/debian/FAQ", r"doc/debian/FAQ/(?!index\.)[^/]+\.en\.html"),
    "maint-guide": ("doc/maint-guide/html", r"doc/maint-guide/html/(?!index\.)[^/]+\.en\.html"),
    "developers-reference": ("developers-reference",
                             r"developers-reference/(?!index\.html|search\.html|genindex\.html|"
                             r"developers-reference\.html)[^/]+\.html"),
}
INSTALL = "apt-get install " + " ".join(MANUALS)

_SKIP_TAGS = {"head", "script", "style", "nav", "pre", "footer", "header", "noscript", "form"}
_SKIP_CLASSES = {"related", "sphinxsidebar", "footer", "mobile-nav", "headerlink", "navheader",
                 "navfooter", "docnav", "toc", "breadcrumbs"}
_SKIP_ROLES = {"navigation", "search"}
_SKIP_IDS = {"banner"}  # the Handbook's "Download the ebook"
_BLOCKS = {"p", "div", "section", "li", "dt", "dd", "tr", "br", "h1", "h2", "h3", "h4", "h5",
           "h6", "blockquote", "table", "ul", "ol", "dl", "title", "hr", "figcaption"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


class _Words(html.parser.HTMLParser):
  """Collects the text outside skipped elements; `skip` is (tag, nesting depth) while inside
  one."""

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.parts: list[str] = []
    self.skip: tuple[str, int] | None = None

  def _skipped(self, tag: str, attrs) -> bool:
    a = dict(attrs)
    return (tag in _SKIP_TAGS or a.get("role") in _SKIP_ROLES or a.get("id") in _SKIP_IDS
            or bool(_SKIP_CLASSES & set((a.get("class") or "").split())))

  def handle_starttag(self, tag, attrs):
    if self.skip:
      if tag == self.skip[0]:
        self.skip = (tag, self.skip[1] + 1)
    elif tag not in _VOID and self._skipped(tag, attrs):
      self.skip = (tag, 1)
    elif tag in _BLOCKS:
      self.parts.append("\n")

  def handle_endtag(self, tag):
    if self.skip:
      if tag == self.skip[0]:
        self.skip = (tag, self.skip[1] - 1) if self.skip[1] > 1 else None
    elif tag in _BLOCKS:
      self.parts.append("\n")

  def handle_data(self, data):
    if not self.skip:  # line breaks inside a block are the source's wrapping, not the text's
      self.parts.append(re.sub(r"\s+", " ", data))


def plain_text(page: str) -> str:
  """The words of an HTML page (see the module docstring): one line per block element, runs of
  spaces and of blank lines collapsed."""
  parser = _Words()
  parser.feed(page)
  parser.close()
  lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
  return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def is_corpus(source_dir: str) -> bool:
  """Whether `source_dir` is the varied-prose corpus's folder (`VARIED_DIR`)."""
  return bool(source_dir) and os.path.abspath(source_dir) == VARIED_DIR


def package_files(package: str, root: str = "") -> list[str]:
  """The corpus files of one package of `MANUALS` present under `root` (default `VARIED_DIR`),
  as sorted `/`-separated paths relative to it."""
  root = root or VARIED_DIR
  folder, pattern = MANUALS[package]
  found = []
  for here, dirs, files in os.walk(os.path.join(root, folder)):
    dirs.sort()
    rel = os.path.relpath(here, root).replace(os.sep, "/")
    found += [f"{rel}/{f}" for f in files if re.fullmatch(pattern, f"{rel}/{f}")]
  return sorted(found)


def corpus_files(root: str = "") -> list[str]:
  """The varied-prose corpus's files under `root` (default `VARIED_DIR`), sorted."""
  return sorted(f for package in MANUALS for f in package_files(package, root))


def missing_packages(source_dir: str) -> list[str]:
  """The packages of `MANUALS` with no corpus file, when `source_dir` is `VARIED_DIR`; [] for
  any other folder."""
  if not is_corpus(source_dir):
    return []
  return [package for package in MANUALS if not package_files(package, source_dir)]


def missing_message(source_dir: str) -> str:
  """'' when `source_dir` is not the varied-prose corpus or has all of it; else a one-line error
  that names the install command."""
  missing = missing_packages(source_dir)
  if not missing:
    return ""
  return (f"The varied-prose corpus ({source_dir}) needs the Debian package(s) "
          f"{' '.join(missing)}, not installed here; install them with `{INSTALL}` (as root).")
