"""vit_classifier: patches, the model under every norm placement, the digits builder, and
TFDS image catalogs under mock_data."""

import dataclasses
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from configs import vit_digits
from transformer.config import NORM_PLACEMENTS, ModelConfig, from_config_dict
from transformer.data import catalog
from transformer.data.builders.digits import digits_builder, digits_splits
from transformer.errors import ConfigError
from transformer.model.models import VisionTransformer, image_patches
from transformer import kinds


def test_image_patches_are_row_major_flattened_squares():
  images = np.random.default_rng(0).normal(size=(2, 6, 4, 3)).astype(np.float32)
  got = np.asarray(image_patches(jnp.asarray(images), 2))
  assert got.shape == (2, 6, 12)
  for b in range(2):
    k = 0
    for i in range(0, 6, 2):
      for j in range(0, 4, 2):
        np.testing.assert_array_equal(got[b, k], images[b, i:i + 2, j:j + 2].reshape(-1))
        k += 1
  with pytest.raises(ValueError, match="patch_size"):
    image_patches(jnp.asarray(images), 4)


@pytest.mark.parametrize("placement", NORM_PLACEMENTS)
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vit_under_every_norm_placement(placement, pooling):
  cfg = ModelConfig(kind="vit_classifier", d_model=16, num_heads=2, num_layers=2, d_ff=32,
                    num_classes=10, patch_size=2, pooling=pooling, norm_placement=placement,
                    positions="none", image_size=8, image_channels=1)
  model = VisionTransformer(cfg)
  images = jax.random.uniform(jax.random.PRNGKey(1), (3, 8, 8, 1))
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)["params"])
  assert params["position_embedding"].shape == (16 + (pooling == "cls"), 16)
  assert ("cls_token" in params) == (pooling == "cls")
  logits = model.apply({"params": params}, images)
  assert logits.shape == (3, 10) and np.isfinite(np.asarray(logits)).all()
  # Every pixel reaches the logits (all patches are attended to and pooled).
  grad = jax.grad(lambda x: model.apply({"params": params}, x).sum())(images)
  assert np.all(np.abs(np.asarray(grad)) > 0)


def test_digits_splits_partition_sklearns_digits():
  splits = digits_splits()
  sizes = {k: len(v[1]) for k, v in splits.items()}
  assert sizes == {"train": 1257, "validation": 270, "test": 270}
  # Together they are scikit-learn's 1,797 images, each once (compared as sorted pixel rows).
  from sklearn.datasets import load_digits
  ours = np.concatenate([v[0].reshape(-1, 64) for v in splits.values()]).astype(np.int64)
  theirs = np.clip(np.round(load_digits().images.reshape(-1, 64) * 255 / 16), 0, 255)
  np.testing.assert_array_equal(np.unique(ours, axis=0), np.unique(theirs.astype(np.int64), axis=0))
  assert len(ours) == len(theirs) == 1797
  assert all(v[0].dtype == np.uint8 and v[0].shape[1:] == (8, 8, 1) for v in splits.values())
  assert set(np.concatenate([v[1] for v in splits.values()])) == set(range(10))


def test_digits_without_scikit_learn_name_the_extra(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "sklearn", None)  # as if not installed: imports raise
  monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
  with pytest.raises(ConfigError) as raised:
    digits_splits()
  assert str(raised.value).count("\n") == 0 and '".[digits]"' in str(raised.value)
  with pytest.raises(ConfigError, match=r"\.\[digits\]"):  # and when TFDS builds the dataset
    digits_builder(str(tmp_path / "tfds")).download_and_prepare()


def _vit_config(data_dir, **data):
  c = vit_digits.get_config("smoke")
  with c.unlocked():
    c.data.data_dir = str(data_dir)
    c.data.shuffle_buffer = 16
    c.train.batch_size = 8
    for k, v in data.items():
      c.data[k] = v
  return from_config_dict(c)


def test_vit_task_on_the_digits_builder(tmp_path):
  data, task = kinds.build_data_and_task(_vit_config(tmp_path / "tfds"), str(tmp_path / "run"))
  assert task.config.model.num_classes == 10 and task.config.model.image_size == 8
  batch = data.next_train_batch()
  assert batch["inputs"].shape == (8, 8, 8, 1) and batch["inputs"].max() <= 1.0
  params = task.init_params(jax.random.PRNGKey(0))
  loss, n, _ = task.loss_sums(params, batch, jax.random.PRNGKey(1))
  # Untrained, the head is near uniform over 10 classes: loss per image ~ log(10).
  assert float(n) == 8 and abs(float(loss) / 8 - np.log(10)) < 1.0
  sums = task.eval_sums(params, next(data.eval_batches(1)))
  assert 0.0 <= task.summarize(jax.device_get(sums))["accuracy"] <= 1.0


@pytest.mark.parametrize("name,shape", [("mnist", (28, 28, 1)), ("cifar10", (32, 32, 3))])
def test_vit_task_on_tfds_image_catalogs_under_mock_data(tmp_path, monkeypatch, name, shape):
  monkeypatch.setattr(catalog, "offline_reason", lambda: None)  # mock_data: no download
  cfg = _vit_config(tmp_path / "tfds", name=name, eval_split="test")
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, patch_size=4))
  with tfds.testing.mock_data(num_examples=16):
    data, task = kinds.build_data_and_task(cfg, str(tmp_path / "run"))
    batch = data.next_train_batch()
  assert batch["inputs"].shape == (8,) + shape and task.config.model.num_classes == 10
  params = task.init_params(jax.random.PRNGKey(0))
  assert np.isfinite(float(task.loss_sums(params, batch, jax.random.PRNGKey(1))[0]))
