"""The default byte-level LM on a third corpus, English prose of many authors and topics: the
HTML manuals six Debian 12 packages ship, read offline by `local_text` from `/usr/share`
(`transformer/data/manuals.py`):

  python3-doc 3.11.2-1 (python3.11-doc 3.11.2-6+deb12u9)  402 pages  PSF License
      the Python documentation: tutorial, howtos, FAQs, language and library reference,
      using, extending, installing, distributing, what's new, glossary
  debian-handbook 11.20220922   126 pages  GPL-2+ or CC-BY-SA-3.0  (en-US only)
  debian-reference-en 2.100      14 pages  GPL-2+
  debian-faq 11.1                16 pages  its own verbatim-and-modified-copies permission
  maint-guide 1.2.53             10 pages  GPL-2+ / MIT
  developers-reference 12.18      9 pages  GPL-2

577 pages, 45.0 MB of HTML, 9.2 MB (about 9.2M byte tokens) of plain text. Each page is one
document; its markup is stripped by the stdlib's html.parser (head, scripts, navigation,
sidebars, footers, code blocks, tables of contents dropped; indexes, search pages, the
single-page copy of a manual and other languages not listed); 5% of pages are held out by an
MD5 hash of the page's path below /usr/share.

  apt-get install python3-doc debian-handbook debian-reference-en debian-faq maint-guide \\
      developers-reference
  python launch.py --config=configs/prose_varied.py --workdir=runs/prose_varied
  python launch.py --config=configs/prose_varied.py:smoke --workdir=/tmp/prose_varied_smoke

Without the packages, the run stops before any compilation with the apt-get command to run.
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config(variant)  # "smoke" as in configs/default.py
  c.data.source_dir = "/usr/share"  # transformer.data.manuals.VARIED_DIR: its MANUALS' pages
  c.data.suffixes = ".html"  # markup stripped, each page one document
  return c
