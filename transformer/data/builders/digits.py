"""`sklearn_digits`: scikit-learn's bundled 8x8 handwritten digits (offline), as a TFDS dataset.

1,797 grayscale images (values 0-16, scaled here to 0-255) with labels 0-9 (Alpaydin & Kaynak,
UCI). Splits are fixed by a seeded permutation: 1,257 train, 270 validation, 270 test.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from transformer.errors import ConfigError

SPLIT_SIZES = {"validation": 270, "test": 270}  # the rest is train


def digits_splits(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """`{split: (uint8 images [n, 8, 8, 1], int64 labels [n])}`."""
  data = _load_digits()
  images = np.clip(np.round(data.images * 255.0 / 16.0), 0, 255).astype(np.uint8)[..., None]
  order = np.random.default_rng(seed).permutation(len(images))
  n_val, n_test = SPLIT_SIZES["validation"], SPLIT_SIZES["test"]
  parts = {"validation": order[:n_val], "test": order[n_val:n_val + n_test],
           "train": order[n_val + n_test:]}
  return {split: (images[idx], data.target[idx].astype(np.int64)) for split, idx in parts.items()}


def _load_digits():
  try:
    from sklearn.datasets import load_digits  # an optional extra, only here
  except ImportError:
    raise ConfigError("data.name=sklearn_digits needs scikit-learn, which is not installed: "
                      'pip install -e ".[digits]"') from None
  return load_digits()


class SklearnDigits(tfds.core.GeneratorBasedBuilder):
  """8x8 digits with train / validation / test splits."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release."}

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 1)),
            "label": tfds.features.ClassLabel(num_classes=10),
        }),
        supervised_keys=("image", "label"),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # bundled with scikit-learn, nothing to download
    return {split: self._generate_examples(images, labels)
            for split, (images, labels) in digits_splits().items()}

  def _generate_examples(self, images, labels):
    for i, (image, label) in enumerate(zip(images, labels)):
      yield i, {"image": image, "label": int(label)}


def from_config(cfg) -> SklearnDigits:
  """The builder `data.name=sklearn_digits` reads (`transformer.datasets`)."""
  return digits_builder(cfg.data_dir)


def digits_builder(data_dir: str | None = None) -> SklearnDigits:
  return SklearnDigits(data_dir=data_dir or None)
