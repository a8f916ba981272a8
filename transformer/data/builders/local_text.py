"""`local_text`: a TFDS dataset of the text files under a local folder.

The default source is a real corpus present on every machine: the Python source files of the
running interpreter's standard library (`sysconfig.get_paths()["stdlib"]`), without `test/`,
`tests/`, `idlelib/idle_test/` and `site-packages/`. Files are split into train and validation
deterministically by an MD5 hash of their relative path, so the split never depends on file
order or on the machine. Each example is one file: `{"text": str, "path": str}`, except in a
SWORD Bible module's `.bzz` file (the prose corpus, `transformer.data.sword`), where each chapter
is one, split by a hash of its chapter id, with path `<file>#<chapter id>`. An `.html` file's
text is its words, markup stripped (`transformer.data.manuals`: the varied-prose corpus).
"""

from __future__ import annotations

import hashlib
import os
import sys

import tensorflow_datasets as tfds

# Listed without TensorFlow (provenance fingerprints the same files); re-exported here.
from transformer.data.local_files import (document_keys, is_validation, list_source_files,
                                          missing_message, split_documents, stdlib_dir)


class LocalTextConfig(tfds.core.BuilderConfig):
  """Which folder, which files, and how much to hold out."""

  def __init__(self, *, source_dir: str, suffixes: tuple[str, ...], validation_percent: int,
               **kwargs):
    super().__init__(**kwargs)
    self.source_dir = source_dir
    self.suffixes = suffixes
    self.validation_percent = validation_percent


def _config_name(source_dir: str, suffixes: tuple[str, ...], validation_percent: int) -> str:
  if not source_dir:
    v = sys.version_info
    kinds = "_".join(s.strip(".") for s in suffixes)
    return f"stdlib_py{v.major}{v.minor}_{kinds}_val{validation_percent}"
  key = f"{os.path.abspath(source_dir)}|{','.join(suffixes)}|{validation_percent}"
  return "dir_" + hashlib.sha1(key.encode()).hexdigest()[:12]


def make_config(source_dir: str = "", suffixes: tuple[str, ...] = (".py",),
                validation_percent: int = 5) -> LocalTextConfig:
  name = _config_name(source_dir, suffixes, validation_percent)
  where = source_dir or f"the Python {sys.version_info.major}.{sys.version_info.minor} stdlib"
  return LocalTextConfig(
      name=name, source_dir=source_dir or stdlib_dir(), suffixes=suffixes,
      validation_percent=validation_percent,
      description=f"{'/'.join(suffixes)} files of {where}, {validation_percent}% held out.")


def source_text_info(builder: tfds.core.GeneratorBasedBuilder, *,
                     label_names: tuple[str, ...] = (), homepage: str = ""
                     ) -> tfds.core.DatasetInfo:
  """The DatasetInfo of a builder of local source files: `text` and `path` features, with a
  `label` (ClassLabel of `label_names`, then supervised as (text, label)) between them when
  given; `homepage` when given."""
  features = {"text": tfds.features.Text()}
  if label_names:
    features["label"] = tfds.features.ClassLabel(names=list(label_names))
  features["path"] = tfds.features.Text()
  return builder.dataset_info_from_configs(
      features=tfds.features.FeaturesDict(features),
      supervised_keys=("text", "label") if label_names else None,
      **({"homepage": homepage} if homepage else {}))


class LocalText(tfds.core.GeneratorBasedBuilder):
  """Text files of a local folder (default: the Python standard library's source)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release."}
  BUILDER_CONFIGS = [make_config()]

  def _info(self) -> tfds.core.DatasetInfo:
    return source_text_info(self, homepage="https://docs.python.org/3/library/")

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download: the source is local
    cfg = self.builder_config
    if missing_message(cfg.source_dir):  # a packaged corpus: the apt-get install to run
      raise FileNotFoundError(missing_message(cfg.source_dir))
    if not os.path.isdir(cfg.source_dir):
      raise FileNotFoundError(
          f"local_text source_dir {cfg.source_dir!r} is not a folder; set "
          "--config.data.source_dir to a folder of text files (or '' for the Python stdlib).")
    files = list_source_files(cfg.source_dir, tuple(cfg.suffixes))
    if not files:
      raise FileNotFoundError(
          f"No files ending in {cfg.suffixes} under {cfg.source_dir!r}; check "
          "--config.data.source_dir and --config.data.suffixes.")
    keys = [k for f in files for k in document_keys(cfg.source_dir, f)]
    val = sum(is_validation(k, cfg.validation_percent) for k in keys)
    if not val or val == len(keys):
      raise ValueError(
          f"{len(files)} file(s) under {cfg.source_dir!r} gave an empty split "
          f"(train {len(keys) - val}, validation {val}); add files or change "
          "--config.data.validation_percent.")
    return {"train": self._generate_examples(files, False),
            "validation": self._generate_examples(files, True)}

  def _generate_examples(self, rel_paths, validation: bool):
    cfg = self.builder_config
    for name, text in split_documents(cfg.source_dir, rel_paths, cfg.validation_percent,
                                      validation):
      yield name, {"text": text, "path": name}


def from_config(cfg) -> LocalText:
  """The builder `data.name=local_text` reads (`transformer.datasets`)."""
  suffixes = tuple(s.strip() for s in cfg.suffixes.split(",") if s.strip())
  return local_text_builder(cfg.source_dir, suffixes, cfg.validation_percent, cfg.data_dir)


def local_text_builder(source_dir: str = "", suffixes: tuple[str, ...] = (".py",),
                       validation_percent: int = 5, data_dir: str | None = None) -> LocalText:
  """The builder for one source folder; call `download_and_prepare()` to build it once."""
  config = make_config(source_dir, suffixes, validation_percent)
  if config.name in {c.name for c in LocalText.BUILDER_CONFIGS}:
    config = config.name  # TFDS refuses a custom config that shadows a registered one
  return LocalText(config=config, data_dir=data_dir or None)
