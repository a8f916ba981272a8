"""`stdlib_package`: which package does this chunk of Python source come from? Built offline.

A text-classification dataset made from the same local corpus as `local_text`: each example
is a chunk of about `chunk_chars` characters (cut at line ends) of a `.py` file, labelled with
the top-level package the file belongs to. With the default source (this interpreter's
standard library) the classes are eight packages present in every Python 3.10-3.13:
asyncio, email, idlelib, importlib, multiprocessing, tkinter, unittest, xml. With another
`source_dir`, the classes are its top-level folders that hold `.py` files.

Files, not chunks, are split between train and validation (by an MD5 hash of the path, as in
`local_text`), so no file contributes to both: the model must recognise a package's style and
vocabulary, not recall a file. Example: `{"text": str, "label": ClassLabel, "path": str}`.
"""

from __future__ import annotations

import hashlib
import os
import sys

import tensorflow_datasets as tfds

from transformer.data.builders.local_text import source_text_info
from transformer.data.local_files import is_validation, list_source_files, stdlib_dir

STDLIB_CLASSES = ("asyncio", "email", "idlelib", "importlib", "multiprocessing", "tkinter",
                  "unittest", "xml")


def chunk_text(text: str, chunk_chars: int) -> list[str]:
  """Cuts `text` at line ends into chunks of at least `chunk_chars` characters (the last
  may be shorter; a chunk of only whitespace is dropped)."""
  chunks, current, size = [], [], 0
  for line in text.splitlines(keepends=True):
    current.append(line)
    size += len(line)
    if size >= chunk_chars:
      chunks.append("".join(current))
      current, size = [], 0
  if current:
    chunks.append("".join(current))
  return [c for c in chunks if c.strip()]


def package_classes(source_dir: str) -> tuple[str, ...]:
  """Top-level folders of `source_dir` with `.py` files below them, sorted."""
  return tuple(sorted({f.split("/")[0] for f in list_source_files(source_dir, (".py",))
                       if "/" in f}))


class StdlibPackageConfig(tfds.core.BuilderConfig):

  def __init__(self, *, source_dir: str, classes: tuple[str, ...], validation_percent: int,
               chunk_chars: int, **kwargs):
    super().__init__(**kwargs)
    self.source_dir, self.classes = source_dir, classes
    self.validation_percent, self.chunk_chars = validation_percent, chunk_chars


def make_config(source_dir: str = "", validation_percent: int = 10,
                chunk_chars: int = 1000) -> StdlibPackageConfig:
  if source_dir:
    classes = package_classes(source_dir)
    key = f"{os.path.abspath(source_dir)}|{validation_percent}|{chunk_chars}"
    name = "dir_" + hashlib.sha1(key.encode()).hexdigest()[:12]
  else:
    classes = STDLIB_CLASSES
    v = sys.version_info
    name = f"stdlib_py{v.major}{v.minor}_val{validation_percent}_chunk{chunk_chars}"
  return StdlibPackageConfig(
      name=name, source_dir=source_dir or stdlib_dir(), classes=classes,
      validation_percent=validation_percent, chunk_chars=chunk_chars,
      description=f"{chunk_chars}-character chunks labelled with one of {len(classes)} "
                  "packages.")


class StdlibPackage(tfds.core.GeneratorBasedBuilder):
  """Chunks of Python source labelled with their top-level package."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release."}
  BUILDER_CONFIGS = [make_config()]

  def _info(self) -> tfds.core.DatasetInfo:
    return source_text_info(self, label_names=tuple(self.builder_config.classes))

  def _split_generators(self, dl_manager):
    del dl_manager  # local source
    cfg = self.builder_config
    if len(cfg.classes) < 2:
      raise ValueError(f"stdlib_package needs >= 2 top-level package folders under "
                       f"{cfg.source_dir!r}; found {list(cfg.classes)}.")
    files = [f for f in list_source_files(cfg.source_dir, (".py",))
             if f.split("/")[0] in cfg.classes and "/" in f]
    train = [f for f in files if not is_validation(f, cfg.validation_percent)]
    val = [f for f in files if is_validation(f, cfg.validation_percent)]
    if not train or not val:
      raise ValueError(f"stdlib_package: {len(files)} files under {cfg.source_dir!r} gave an "
                       "empty split; change --config.data.validation_percent.")
    return {"train": self._generate_examples(train),
            "validation": self._generate_examples(val)}

  def _generate_examples(self, rel_paths):
    cfg = self.builder_config
    for rel in rel_paths:
      with open(os.path.join(cfg.source_dir, rel), "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
      for i, chunk in enumerate(chunk_text(text, cfg.chunk_chars)):
        yield f"{rel}:{i}", {"text": chunk, "label": rel.split("/")[0], "path": rel}


def from_config(cfg) -> StdlibPackage:
  """The builder `data.name=stdlib_package` reads (`transformer.datasets`)."""
  return stdlib_package_builder(cfg.source_dir, cfg.validation_percent, cfg.data_dir)


def stdlib_package_builder(source_dir: str = "", validation_percent: int = 10,
                           data_dir: str | None = None, chunk_chars: int = 1000
                           ) -> StdlibPackage:
  """The builder for one source folder; call `download_and_prepare()` to build it once."""
  config = make_config(source_dir, validation_percent, chunk_chars)
  if config.name in {c.name for c in StdlibPackage.BUILDER_CONFIGS}:
    config = config.name
  return StdlibPackage(config=config, data_dir=data_dir or None)
