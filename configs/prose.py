"""The default byte-level LM on English prose instead of Python source: two public-domain
Bibles that Debian ships (King James Version, sword-text-kjv 14.3-1; World English Bible with
Deuterocanon, sword-text-web 426.0-1), read offline by `local_text` from their SWORD modules,
one document per chapter (`transformer/data/sword.py`), 5% of chapters held out by a hash of the
chapter id (the same chapter of both translations in the same split).

  apt-get install sword-text-kjv sword-text-web
  python launch.py --config=configs/prose.py --workdir=runs/prose
  python launch.py --config=configs/prose.py:smoke --workdir=/tmp/prose_smoke   # seconds

Without the packages, the run stops before any compilation with the apt-get command to run.
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config(variant)  # "smoke" as in configs/default.py
  c.data.source_dir = "/usr/share/sword/modules/texts/ztext"  # transformer.data.sword.PROSE_DIR
  c.data.suffixes = ".bzz"  # zText modules: each chapter one document
  return c
