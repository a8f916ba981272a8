"""Classification: a pooled encoder over token sequences, and the Vision Transformer over image
patches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ConfigError
from transformer.data.facts import DataFacts
from transformer.tasks.base import TaskBase, random_tokens
from transformer.tasks.losses import cross_entropy_sums


class ClassificationTask(TaskBase):
  """Sequence classification with an encoder, mean-pooled, and a linear head.

  With `model.init_from` = the workdir of a masked_lm run, the embedder and encoder start
  from that run's checkpoint (the head starts fresh); otherwise from scratch. The
  vocabulary matches the masked-LM's (tokenizer + [MASK]) so the two are interchangeable.
  """

  @classmethod
  def model_fields(cls, config, facts):
    return {"vocab_size": facts.vocab_size + 1, "num_classes": facts.num_classes}

  @classmethod
  def facts_from_config(cls, config):
    return DataFacts(vocab_size=config.model.vocab_size - 1,
                     num_classes=config.model.num_classes)

  def example_inputs(self):
    """`[rows, seq_len]` random tokens."""
    return (self._synthetic_tokens(self.rows_per_process, self.config.data.seq_len),)

  def model_inputs(self, batch):
    return (batch["inputs"],)

  def train_forward(self, params, batch, rng, sow=False):
    """Class logits scored as one "token" per row: `[batch, 1, classes]`."""
    forward = self._forward(params, (batch["inputs"],), rng, sow, batch["label"][:, None],
                            batch["example_weight"][:, None])
    return forward._replace(logits=forward.logits[:, None])

  def eval_sums(self, params, batch):
    logits = self.apply(params, batch["inputs"])
    w = batch["example_weight"]
    loss_sum, n = cross_entropy_sums(logits[:, None], batch["label"][:, None], w[:, None])
    correct = jnp.sum((jnp.argmax(logits, -1) == batch["label"]) * w)
    return {"loss_sum": loss_sum, "examples": n, "correct": correct}

  def summarize(self, sums):
    n = max(float(sums["examples"]), 1.0)
    return {"loss": float(sums["loss_sum"]) / n, "accuracy": float(sums["correct"]) / n,
            "examples": float(sums["examples"])}

  def _random_inputs(self, rows: int, rng: np.random.Generator) -> np.ndarray:
    return random_tokens(self.facts, rows, self.config.data.seq_len, rng)

  def random_batch(self, rows, rng):
    """`inputs` as the data gives them; `label`, `example_weight` (1) `[rows]`."""
    inputs = self._random_inputs(rows, rng)
    return {"inputs": inputs,
            "label": rng.integers(0, self.config.model.num_classes, (rows,), np.int32),
            "example_weight": np.ones((rows,), np.float32)}


class ImageClassificationTask(ClassificationTask):
  """Image classification with a Vision Transformer: the classifier's loss and accuracy on
  `[batch, height, width, channels]` images (`transformer.data.pipeline.image_data`)."""

  @classmethod
  def model_fields(cls, config, facts):
    height, width, channels = facts.image_shape
    if height != width:
      raise ConfigError(f"{config.data.name} has {height}x{width} images; vit_classifier "
                        "takes square ones.")
    return {"num_classes": facts.num_classes, "image_size": height, "image_channels": channels}

  @classmethod
  def facts_from_config(cls, config):
    m = config.model
    if m.image_size < 1 or m.image_channels < 1:
      raise ConfigError("vit_classifier without a dataset needs the image shape: set "
                        "model.image_size and model.image_channels in the config (e.g. 8 and 1 "
                        "for sklearn_digits as configs/vit_digits.py does, 32 and 3 for "
                        "cifar10).")
    if m.image_size % m.patch_size:
      raise ConfigError(f"--config.model.image_size={m.image_size} does not split into "
                        f"--config.model.patch_size={m.patch_size} patches; choose a "
                        "patch_size that divides it.")
    return DataFacts(num_classes=m.num_classes,
                     image_shape=(m.image_size, m.image_size, m.image_channels))

  def example_inputs(self):
    """`[rows, height, width, channels]` random pixels in [0, 1)."""
    return (jax.random.uniform(jax.random.PRNGKey(self.SYNTHETIC_SEED),
                               (self.rows_per_process,) + self.facts.image_shape, jnp.float32),)

  def _random_inputs(self, rows, rng):
    """`[rows, height, width, channels]` float32 in [0, 1), as the image pipeline scales
    pixels."""
    return rng.random((rows,) + self.facts.image_shape, np.float32)
