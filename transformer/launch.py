"""Command-line entry point behind `launch.py`: parse flags, validate the config, run a mode."""

from __future__ import annotations

import hashlib
import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from transformer.config import ConfigError, from_config_dict

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "configs", "default.py")

_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG,
    "Config file, optionally with a variant: configs/default.py[:variant]. Override fields "
    "with --config.section.field=value.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory. Default: runs/<config name>[:variant][+overrides].")
_MODE = flags.DEFINE_enum("mode", "train", ["train"], "What to do.")


def default_workdir(config_arg: str, argv: list[str]) -> str:
  """`runs/<config stem>[:variant][+<override>...]`, so different configs never share a run."""
  path, _, variant = config_arg.partition(":")
  name = os.path.splitext(os.path.basename(path))[0] + (f"-{variant}" if variant else "")
  overrides = [a[len("--config."):] for a in argv if a.startswith("--config.")]
  if overrides:
    suffix = "+".join(re.sub(r"[^A-Za-z0-9._=,-]", "_", o) for o in overrides)
    if len(suffix) > 80:
      suffix = suffix[:60] + "-" + hashlib.sha1(suffix.encode()).hexdigest()[:10]
    name += "+" + suffix
  return os.path.join("runs", name)


def _config_arg(argv: list[str]) -> str:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return "configs/default.py"


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax and TFDS log every file they touch at INFO
  try:
    config = from_config_dict(_CONFIG.value)
  except ConfigError as e:
    sys.exit(f"Config error: {e}")
  workdir = _WORKDIR.value or default_workdir(_config_arg(sys.argv), sys.argv)
  if _MODE.value == "train":
    from transformer.train.loop import train_and_evaluate  # heavy imports after validation
    try:
      train_and_evaluate(config, workdir)
    except ConfigError as e:
      sys.exit(f"Config error: {e}")


def run() -> None:
  app.run(main)
