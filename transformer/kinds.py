"""The registry of model kinds: each kind's model, task and FLOPs count, declared once.

A kind names
  model          the Flax module (`"module:Class"`, built with the `ModelConfig`),
  task           what it trains on and how it is scored (`transformer.tasks`): data, loss,
                 eval metrics and decoding,
  forward_flops  matmul FLOPs of one forward pass (`transformer.train.flops` convention),
  lengths        the row lengths its data gives: `(length, source_length)`, source 0 when the
                 kind has no separate encoder input,
  generative     "" (scores only), "lm" (continues a prompt) or "seq2seq" (decodes a source).

Config validation, the training loop, eval, sample and the FLOPs count look a kind up here
instead of branching on `model.kind`. Adding a kind means writing its model and task and
adding one `Kind(...)` line below.

Model and task are named by import path and imported on first use, so this module stays
light (no TensorFlow) and `transformer.config` can validate kind names against it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

from transformer.config import DataConfig, ModelConfig


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


def _token_lengths(data: DataConfig) -> tuple[int, int]:
  return data.seq_len, 0


def _seq2seq_lengths(data: DataConfig) -> tuple[int, int]:
  return data.tgt_len, data.src_len


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str
  model: str
  task: str
  forward_flops: Callable[..., float]
  lengths: Callable[[DataConfig], tuple[int, int]] = _token_lengths
  generative: str = ""
  description: str = ""

  def build_model(self, cfg: ModelConfig):
    return _resolve(self.model)(cfg)

  def build_task(self, config, workdir: str | None = None):
    return _resolve(self.task)(config, workdir=workdir)

  def row_shape(self, data: DataConfig) -> str:
    """How one row of a batch looks, for the run's summary line."""
    length, src_len = self.lengths(data)
    return f"({src_len} source -> {length} target)" if src_len else str(length)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("decoder_lm", "transformer.model.models:DecoderLM",
         "transformer.tasks:LanguageModelTask", _decoder_lm_flops, generative="lm",
         description="decoder-only causal LM"),
    Kind("encoder_decoder", "transformer.model.models:EncoderDecoder",
         "transformer.tasks:Seq2SeqTask", _encoder_decoder_flops, lengths=_seq2seq_lengths,
         generative="seq2seq", description="encoder + decoder with cross-attention"),
    Kind("masked_lm", "transformer.model.models:MaskedLM", "transformer.tasks:MaskedLMTask",
         _masked_lm_flops, description="BERT-style masked-LM pre-training"),
    Kind("classifier", "transformer.model.models:Classifier",
         "transformer.tasks:ClassificationTask", _classifier_flops,
         description="encoder, mean-pooled, linear head"),
)}


def names() -> tuple[str, ...]:
  return tuple(KINDS)


def get(name: str) -> Kind:
  """The kind called `name`; a ConfigError naming the known kinds otherwise."""
  if name not in KINDS:
    from transformer.config import ConfigError  # noqa: PLC0415
    raise ConfigError(f"--config.model.kind={name!r} is not supported; choose one of "
                      f"{list(KINDS)}.")
  return KINDS[name]
