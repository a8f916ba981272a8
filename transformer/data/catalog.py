"""TFDS catalog datasets (lm1b, wmt14_translate/de-en, c4/en, imdb_reviews, glue/sst2, ...):
finding the prepared builder, failing early and clearly when it is not there, and the
feature keys that hold the text (and the target text or label)."""

from __future__ import annotations

import os
import socket

import tensorflow_datasets as tfds

from transformer import datasets
from transformer.config import ConfigError, DataConfig


class DatasetNotPreparedError(ConfigError):
  """A catalog dataset is neither prepared in `data_dir` nor downloadable here."""


def _how_to_prepare(cfg: DataConfig, data_dir: str) -> str:
  return (
      f"Prepare it on a machine with network access:\n"
      f"  python -c \"import tensorflow_datasets as tfds; "
      f"tfds.builder('{cfg.name}', data_dir='{data_dir}').download_and_prepare()\"\n"
      f"  (or `tfds build {cfg.name} --data_dir={data_dir}`), then copy the folder "
      f"{data_dir}/{cfg.name.split('/')[0]} to this machine's data dir and pass "
      f"--config.data.data_dir=<that dir>. Datasets that build offline: "
      f"{', '.join(datasets.tfds_names())}.")


def offline_reason() -> str | None:
  """Why downloads cannot work here (no DNS), or None. Checked first because TFDS retries a
  failing download with back-off for minutes. With a proxy configured, nothing is checked."""
  if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
    return None
  try:
    socket.getaddrinfo("storage.googleapis.com", 443)
  except OSError as e:
    return f"no network: cannot resolve storage.googleapis.com ({e})"
  return None


def catalog_builder(cfg: DataConfig) -> tfds.core.DatasetBuilder:
  """The prepared builder of catalog dataset `cfg.name` in `cfg.data_dir`.

  Prepares it when `cfg.download` is set and it is not prepared yet. Raises
  `DatasetNotPreparedError` (before anything is compiled) when that is not possible.
  """
  try:
    builder = tfds.builder(cfg.name, data_dir=cfg.data_dir or None)
  except Exception as e:  # DatasetNotFoundError, unknown config, ...
    raise ConfigError(
        f"--config.data.name={cfg.name!r} is not a TFDS dataset we can build "
        f"({_short_tfds_error(e)}). Use a "
        "catalog name such as 'lm1b', 'wmt14_translate/de-en', 'c4/en', 'imdb_reviews', "
        f"'glue/sst2', or one of ours: {', '.join(datasets.tfds_names())}.") from e
  if builder.is_prepared():
    return builder
  data_dir = str(builder.data_dir_root)
  if not cfg.download:
    raise DatasetNotPreparedError(
        f"TFDS dataset {cfg.name!r} is not prepared in {data_dir} and "
        f"--config.data.download=False. {_how_to_prepare(cfg, data_dir)}")
  reason = offline_reason()
  if reason:
    raise DatasetNotPreparedError(
        f"TFDS dataset {cfg.name!r} is not prepared in {data_dir} and could not be downloaded "
        f"here ({reason}). {_how_to_prepare(cfg, data_dir)}")
  try:
    builder.download_and_prepare()
  except Exception as e:
    raise DatasetNotPreparedError(
        f"TFDS dataset {cfg.name!r} is not prepared in {data_dir} and could not be downloaded "
        f"here ({type(e).__name__}: {str(e)[:300]}). {_how_to_prepare(cfg, data_dir)}") from e
  return builder


def _short_tfds_error(e: Exception) -> str:
  """The first line of a TFDS error and its "Did you mean" hint, not its list of every
  dataset in the catalog."""
  text = str(e).strip()
  first = text.splitlines()[0] if text else type(e).__name__
  hint = next((line.strip() for line in text.splitlines() if line.startswith("Did you mean")),
              "")
  return f"{first} {hint}".strip()


def _text_features(builder) -> list[str]:
  return [k for k, v in builder.info.features.items() if isinstance(v, tfds.features.Text)]


def text_key(builder, cfg: DataConfig) -> str:
  """The feature holding the (input) text: `data.inputs_key`, else the registry's
  (`transformer.datasets`), else the supervised input, else `text` or `sentence`."""
  features = builder.info.features
  if cfg.inputs_key:
    if cfg.inputs_key in features:
      return cfg.inputs_key
  else:
    candidates = ["text", "sentence", "inputs"]
    if builder.info.supervised_keys and isinstance(builder.info.supervised_keys[0], str):
      candidates.insert(0, builder.info.supervised_keys[0])
    ours = datasets.lookup(cfg.name)
    if ours:  # the registry's keys come first
      candidates.insert(0, ours.features[0])
    for key in candidates:
      if key in features:
        return key
  raise ConfigError(
      f"Cannot tell which feature of {cfg.name!r} holds the text (features: "
      f"{sorted(features)}); set --config.data.inputs_key to one of {_text_features(builder)}.")


def target_key(builder, cfg: DataConfig, want: str) -> str:
  """The feature holding the target: `data.targets_key`, else the supervised target, else
  `label` (want="label") or `targets` (want="text")."""
  features = builder.info.features
  kind = tfds.features.ClassLabel if want == "label" else tfds.features.Text
  candidates = [cfg.targets_key] if cfg.targets_key else []
  if not cfg.targets_key:  # the registry's key, then the supervised target, then the usual
    ours = datasets.lookup(cfg.name)
    if ours and len(ours.features) > 1:
      candidates.append(ours.features[1])
    if builder.info.supervised_keys and isinstance(builder.info.supervised_keys[1], str):
      candidates.append(builder.info.supervised_keys[1])
    candidates.append("label" if want == "label" else "targets")
  for key in candidates:
    if key in features and isinstance(features[key], kind):
      return key
  options = sorted(k for k, v in features.items() if isinstance(v, kind))
  raise ConfigError(
      f"Cannot find the {want} feature of {cfg.name!r} (features: {sorted(features)}); set "
      f"--config.data.targets_key to one of {options}.")
