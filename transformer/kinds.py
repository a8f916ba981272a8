"""The registry of model kinds: each kind's model, task and FLOPs count, declared once.

A kind names
  model          the Flax module (`"module:Class"`, built with the `ModelConfig`),
  task           what it trains on and how it is scored (`transformer.tasks`): data, loss,
                 eval metrics and decoding,
  forward_flops  matmul FLOPs of one forward pass (`transformer.train.flops` convention),
  lengths        the row lengths a config gives: `(length, source_length)`, source 0 when the
                 kind has no separate encoder input,
  generative     "" (scores only), "lm" (continues a prompt) or "seq2seq" (decodes a source),
  random_batch   random inputs of the task's shapes for `--mode=bench` (NumPy, no dataset),
  model_inputs   which of that batch's arrays the model takes, in order,
  images         whether the inputs are images (then `lengths` gives tokens per image and
                 values per patch, not a source length).

Config validation, the training loop, eval, sample, bench and the FLOPs count look a kind up here
instead of branching on `model.kind`. Adding a kind means writing its model and task and
adding one `Kind(...)` line below.

Model and task are named by import path and imported on first use, so this module stays
light (no TensorFlow) and `transformer.config` can validate kind names against it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

import numpy as np

from transformer.config import ConfigError, ModelConfig


def _resolve(path: str) -> Any:
  module, _, name = path.partition(":")
  return getattr(importlib.import_module(module), name)


def _block(cfg: ModelConfig, batch: int, length: int, **kwargs) -> float:
  from transformer.train.flops import _block_flops  # noqa: PLC0415 -- flops imports us lazily
  return _block_flops(cfg, batch, length, **kwargs)


# Forward matmul FLOPs per kind: `(cfg, batch, length, source_length) -> FLOPs`.

def _decoder_lm_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0) -> float:
  del src_len
  return (_block(cfg, b, length, causal=True) * cfg.num_layers
          + 2 * b * length * cfg.d_model * cfg.vocab_size)


def _encoder_decoder_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0) -> float:
  encoder = _block(cfg, b, src_len, causal=False) * cfg.num_layers
  decoder = _block(cfg, b, length, causal=True, cross_len=src_len) * cfg.decoder_layers
  return encoder + decoder + 2 * b * length * cfg.d_model * cfg.vocab_size


def _masked_lm_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0) -> float:
  del src_len  # plus the head's d_model x d_model transform
  return (_block(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * length * cfg.d_model * cfg.vocab_size + 2 * b * length * cfg.d_model ** 2)


def _classifier_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0) -> float:
  del src_len  # pooled features through one linear layer
  return (_block(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * cfg.d_model * cfg.num_classes)


def _vit_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0) -> float:
  """`length` = tokens per image (patches, plus [CLS]); `src_len` = pixels x channels of one
  patch, which the patch embedding maps to d_model."""
  patches = length - (1 if cfg.pooling == "cls" else 0)
  return (2 * b * patches * src_len * cfg.d_model
          + _block(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * cfg.d_model * cfg.num_classes)


def _vit_lengths(config) -> tuple[int, int]:
  """(tokens per image, values per patch), from the image shape the dataset set."""
  m = config.model
  patches = (m.image_size // m.patch_size) ** 2
  return patches + (1 if m.pooling == "cls" else 0), m.patch_size ** 2 * m.image_channels


def _token_lengths(config) -> tuple[int, int]:
  return config.data.seq_len, 0


def _seq2seq_lengths(config) -> tuple[int, int]:
  return config.data.tgt_len, config.data.src_len


# Random batches for `--mode=bench`: `(config, rows, rng) -> dict` of NumPy arrays, the model's
# inputs (`Kind.model_inputs`) plus `targets` and `weights` for a cross-entropy on its logits
# (`[rows, 1]` for classifiers: one "token" per row). Token ids are drawn from the config's
# `model.vocab_size`, so a GPT-2 config is timed with GPT-2's vocabulary.

FIRST_REGULAR_ID = 3  # below: pad, bos, eos; random inputs avoid them (no padding masks)


def _tokens(config, rows: int, length: int, rng: np.random.Generator) -> np.ndarray:
  return rng.integers(FIRST_REGULAR_ID, config.model.vocab_size, (rows, length), np.int32)


def _lm_batch(config, rows: int, rng: np.random.Generator) -> dict:
  """`inputs`, `targets`, `weights` `[rows, seq_len]`, targets = inputs shifted by one."""
  t = _tokens(config, rows, config.data.seq_len + 1, rng)
  return {"inputs": t[:, :-1], "targets": t[:, 1:],
          "weights": np.ones((rows, config.data.seq_len), np.float32)}


def _seq2seq_batch(config, rows: int, rng: np.random.Generator) -> dict:
  """`inputs` `[rows, src_len]`; `decoder_inputs`, `targets`, `weights` `[rows, tgt_len]`."""
  d = config.data
  tgt = _tokens(config, rows, d.tgt_len + 1, rng)
  return {"inputs": _tokens(config, rows, d.src_len, rng), "decoder_inputs": tgt[:, :-1],
          "targets": tgt[:, 1:], "weights": np.ones((rows, d.tgt_len), np.float32)}


def _mlm_batch(config, rows: int, rng: np.random.Generator) -> dict:
  """`inputs` = `targets` `[rows, seq_len]`, weight 1 on `mlm_mask_rate` of the positions."""
  t = _tokens(config, rows, config.data.seq_len, rng)
  return {"inputs": t, "targets": t, "weights":
          (rng.random(t.shape) < config.model.mlm_mask_rate).astype(np.float32)}


def _labels(config, rows: int, rng: np.random.Generator) -> dict:
  return {"targets": rng.integers(0, config.model.num_classes, (rows, 1), np.int32),
          "weights": np.ones((rows, 1), np.float32)}


def _classifier_batch(config, rows: int, rng: np.random.Generator) -> dict:
  """`inputs` `[rows, seq_len]`; `targets`, `weights` `[rows, 1]`."""
  return {"inputs": _tokens(config, rows, config.data.seq_len, rng), **_labels(config, rows, rng)}


def _image_batch(config, rows: int, rng: np.random.Generator) -> dict:
  """`inputs` `[rows, image_size, image_size, image_channels]` float32 in [0, 1) (as the image
  pipeline scales pixels); `targets`, `weights` `[rows, 1]`."""
  m = config.model
  if m.image_size < 1 or m.image_channels < 1:
    raise ConfigError("vit_classifier without a dataset needs the image shape: set "
                      "model.image_size and model.image_channels in the config (e.g. 8 and 1 "
                      "for sklearn_digits as configs/vit_digits.py does, 32 and 3 for cifar10).")
  if m.image_size % m.patch_size:
    raise ConfigError(f"--config.model.image_size={m.image_size} does not split into "
                      f"--config.model.patch_size={m.patch_size} patches; choose a patch_size "
                      "that divides it.")
  images = rng.random((rows, m.image_size, m.image_size, m.image_channels), np.float32)
  return {"inputs": images, **_labels(config, rows, rng)}


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str
  model: str
  task: str
  forward_flops: Callable[..., float]
  lengths: Callable[[Any], tuple[int, int]] = _token_lengths  # ExperimentConfig -> lengths
  generative: str = ""
  description: str = ""
  random_batch: Callable[[Any, int, np.random.Generator], dict] = _lm_batch
  model_inputs: tuple[str, ...] = ("inputs",)
  images: bool = False

  def build_model(self, cfg: ModelConfig):
    return _resolve(self.model)(cfg)

  def build_task(self, config, workdir: str | None = None):
    return _resolve(self.task)(config, workdir=workdir)

  def row_shape(self, config) -> str:
    """How one row of a batch looks, for the run's summary line."""
    length, src_len = self.lengths(config)
    if self.images:
      return str(length)
    return f"({src_len} source -> {length} target)" if src_len else str(length)

  def tokens_per_row(self, config) -> int:
    """Token positions the model reads per row: source + target, or an image's tokens."""
    length, src_len = self.lengths(config)
    return length if self.images else length + src_len


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("decoder_lm", "transformer.model.models:DecoderLM",
         "transformer.tasks:LanguageModelTask", _decoder_lm_flops, generative="lm",
         description="decoder-only causal LM"),
    Kind("encoder_decoder", "transformer.model.models:EncoderDecoder",
         "transformer.tasks:Seq2SeqTask", _encoder_decoder_flops, lengths=_seq2seq_lengths,
         generative="seq2seq", description="encoder + decoder with cross-attention",
         random_batch=_seq2seq_batch, model_inputs=("inputs", "decoder_inputs")),
    Kind("masked_lm", "transformer.model.models:MaskedLM", "transformer.tasks:MaskedLMTask",
         _masked_lm_flops, description="BERT-style masked-LM pre-training",
         random_batch=_mlm_batch),
    Kind("classifier", "transformer.model.models:Classifier",
         "transformer.tasks:ClassificationTask", _classifier_flops,
         description="encoder, mean-pooled, linear head", random_batch=_classifier_batch),
    Kind("vit_classifier", "transformer.model.models:VisionTransformer",
         "transformer.tasks:ImageClassificationTask", _vit_flops, lengths=_vit_lengths,
         description="Vision Transformer: image patches as tokens, encoder, head",
         random_batch=_image_batch, images=True),
)}


# Model fields a task fills in from its data (tokenizer, labels, images): not the user's
# choice, so a resumed run may see them differ from the command line's defaults.
FROM_DATA = ("model.vocab_size", "model.num_classes", "model.image_size", "model.image_channels")


def names() -> tuple[str, ...]:
  return tuple(KINDS)


def get(name: str) -> Kind:
  """The kind called `name`; a ConfigError naming the known kinds otherwise."""
  if name not in KINDS:
    raise ConfigError(f"--config.model.kind={name!r} is not supported; choose one of "
                      f"{list(KINDS)}.")
  return KINDS[name]
