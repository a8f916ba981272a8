"""The registry of our own datasets: each named once, with its builder, feature keys and the
identity provenance records for it.

A dataset names
  name      `data.name` (a dataset with `variant` set is named `<name>/<variant>`),
  builder   `"module:function"`, `(DataConfig) -> tfds.core.DatasetBuilder` (not yet prepared);
            "" for a dataset the TFDS pipeline does not read (the token file),
  features  its feature keys, input first (then target text or label): the defaults of
            `data.inputs_key` / `data.targets_key`,
  identity  how provenance fingerprints the bytes it reads (`transformer.provenance`):
            "local_files" (the source folder's files), "token_file" (meta.json and the .bin
            sizes) or "tfds" (the prepared dataset_info.json),
  variant   what follows the slash when the name takes one ("" = none), as the messages show it.

Any other `data.name` is a TFDS catalog dataset (`transformer.data.catalog`). Adding a dataset
of our own means writing its builder and adding one `Dataset(...)` line below. Like
`transformer.kinds`, this module imports nothing heavy: builders load on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Optional

IDENTITIES = ("local_files", "token_file", "tfds")


@dataclasses.dataclass(frozen=True)
class Dataset:
  name: str
  builder: str
  features: tuple[str, ...]
  identity: str
  variant: str = ""

  def __post_init__(self):
    assert self.identity in IDENTITIES, self.identity

  @property
  def shown(self) -> str:
    """The name as a user writes it: `synthetic_seq2seq/<task>`."""
    return f"{self.name}/<{self.variant}>" if self.variant else self.name

  def build(self, cfg):
    """The dataset's TFDS builder for `cfg` (`DataConfig`), not yet prepared."""
    module, _, function = self.builder.partition(":")
    return getattr(importlib.import_module(module), function)(cfg)


DATASETS = (
    Dataset("local_text", "transformer.data.builders.local_text:from_config", ("text",),
            "local_files"),
    Dataset("stdlib_package", "transformer.data.builders.stdlib_package:from_config",
            ("text", "label"), "local_files"),
    Dataset("synthetic_seq2seq", "transformer.data.builders.synthetic:from_config",
            ("inputs", "targets"), "tfds", variant="reverse|sort|add"),
    Dataset("sklearn_digits", "transformer.data.builders.digits:from_config", ("image", "label"),
            "tfds"),
    Dataset("token_file", "", ("inputs", "targets"), "token_file"),
)
_BY_NAME = {d.name: d for d in DATASETS}


def lookup(name: str) -> Optional[Dataset]:
  """Our dataset `name` (`<name>/<variant>` too), or None for a TFDS catalog dataset."""
  base, slash, _ = name.partition("/")
  found = _BY_NAME.get(base)
  return found if found and (bool(slash) == bool(found.variant) or not slash) else None


def tfds_names() -> list[str]:
  """Our datasets the TFDS pipeline reads (built here, offline), as a user writes them."""
  return [d.shown for d in DATASETS if d.builder]
