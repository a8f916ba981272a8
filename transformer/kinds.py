"""The registry of model kinds: each kind's model, data, task and FLOPs count, declared once.

A kind names
  model          the Flax module (`"module:Class"`, built with the `ModelConfig`),
  data           how its data is built (`"module:function"`, `(config, workdir) -> (data,
                 facts)`, see `transformer.data.sources`),
  task           what it trains on and how it is scored (`transformer.tasks`): loss, eval
                 metrics, decoding and random bench batches, built from the config and the
                 data's facts alone,
  forward_flops  matmul FLOPs of one forward pass (`transformer.model.flops` convention),
  lengths        the row lengths a config gives: `(length, source_length)`, source 0 when the
                 kind has no separate encoder input,
  generative     "" (scores only), "lm" (continues a prompt) or "seq2seq" (decodes a source),
  images         whether the inputs are images (then `lengths` gives tokens per image and
                 values per patch, not a source length),
  baselines      whether a run records its eval split's unigram and bigram levels
                 (`baselines.json`, `transformer.train.baselines`): next-token LMs.

The training loop, eval, sample, bench and the FLOPs count look a kind up here instead of
branching on `model.kind`. Adding a kind means writing its model (and its FLOPs formula in
`transformer.model.flops`), data and task, adding one `Kind(...)` line below, and its name to
`transformer.config.MODEL_KINDS` (which config validation reads; this module refuses to load
when the two lists differ).

Model, data and task are named by import path and imported on first use: this module stays
light (no TensorFlow, no Flax), so the sweep runner and `workdir` can import it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

from transformer.config import MODEL_KINDS, ExperimentConfig, ModelConfig
from transformer.data.facts import DataFacts
from transformer.errors import ConfigError
from transformer.model import flops


def _resolve(path: str) -> Any:
  module, _, name = path.partition(":")
  return getattr(importlib.import_module(module), name)


def _vit_lengths(config) -> tuple[int, int]:
  """(tokens per image, values per patch), from the image shape the dataset set."""
  m = config.model
  patches = (m.image_size // m.patch_size) ** 2
  return patches + (1 if m.pooling == "cls" else 0), m.patch_size ** 2 * m.image_channels


def _token_lengths(config) -> tuple[int, int]:
  return config.data.seq_len, 0


def _seq2seq_lengths(config) -> tuple[int, int]:
  return config.data.tgt_len, config.data.src_len


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str
  model: str
  data: str
  task: str
  forward_flops: Callable[..., float]
  lengths: Callable[[Any], tuple[int, int]] = _token_lengths  # ExperimentConfig -> lengths
  generative: str = ""
  description: str = ""
  images: bool = False
  baselines: bool = False

  def build_model(self, cfg: ModelConfig):
    return _resolve(self.model)(cfg)

  def build_data(self, config: ExperimentConfig, workdir: str | None = None
                 ) -> tuple[Any, DataFacts]:
    """The data pipeline and its facts; `workdir` keeps what the data builds for this run."""
    return _resolve(self.data)(config, workdir)

  def build_task(self, config: ExperimentConfig, facts: DataFacts):
    """The task, pure: from the config and the data's facts, with this kind's model."""
    return _resolve(self.task)(config, facts, self.build_model)

  def config_facts(self, config: ExperimentConfig) -> DataFacts:
    """The facts without a dataset (`--mode=bench`): read off the config's model section."""
    return _resolve(self.task).facts_from_config(config)

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
    Kind("decoder_lm", "transformer.model.models:DecoderLM", "transformer.data.sources:lm",
         "transformer.tasks.language:LanguageModelTask", flops.decoder_lm_flops, generative="lm",
         description="decoder-only causal LM", baselines=True),
    Kind("encoder_decoder", "transformer.model.models:EncoderDecoder",
         "transformer.data.sources:seq2seq", "transformer.tasks.seq2seq:Seq2SeqTask",
         flops.encoder_decoder_flops, lengths=_seq2seq_lengths, generative="seq2seq",
         description="encoder + decoder with cross-attention"),
    Kind("masked_lm", "transformer.model.models:MaskedLM", "transformer.data.sources:masked_lm",
         "transformer.tasks.language:MaskedLMTask", flops.masked_lm_flops,
         description="BERT-style masked-LM pre-training"),
    Kind("classifier", "transformer.model.models:Classifier",
         "transformer.data.sources:classification",
         "transformer.tasks.classification:ClassificationTask",
         flops.classifier_flops, description="encoder, mean-pooled, linear head"),
    Kind("vit_classifier", "transformer.model.models:VisionTransformer",
         "transformer.data.sources:images",
         "transformer.tasks.classification:ImageClassificationTask",
         flops.vit_flops, lengths=_vit_lengths,
         description="Vision Transformer: image patches as tokens, encoder, head", images=True),
)}

if tuple(KINDS) != MODEL_KINDS:
  raise ImportError(f"transformer.kinds declares {tuple(KINDS)}, but transformer.config."
                    f"MODEL_KINDS lists {MODEL_KINDS}: make them the same, in the same order.")


def names() -> tuple[str, ...]:
  return tuple(KINDS)


def get(name: str) -> Kind:
  """The kind called `name`; a ConfigError naming the known kinds otherwise."""
  if name not in KINDS:
    raise ConfigError(f"--config.model.kind={name!r} is not supported; choose one of "
                      f"{list(KINDS)}.")
  return KINDS[name]


def generative(name: str) -> str:
  """The one answer to "is kind `name` generative": "" (it scores only), "lm" (it continues a
  prompt) or "seq2seq" (it decodes a source). Sampling, the samples written at every eval and
  their prompts all read it here."""
  return get(name).generative


def check_generative(name: str, what: str) -> str:
  """`generative(name)`, or a ConfigError saying `what` (e.g. "--mode=sample") needs one of
  the generative kinds, which it names."""
  answer = generative(name)
  if not answer:
    able = [k.name for k in KINDS.values() if k.generative]
    raise ConfigError(f"{what} needs a generative run ({' or '.join(able)}); this is a "
                      f"{name!r} run.")
  return answer


def build_model(cfg: ModelConfig):
  """The Flax module of `cfg.kind`."""
  return get(cfg.kind).build_model(cfg)


def build_data(config: ExperimentConfig, workdir: str | None = None) -> tuple[Any, DataFacts]:
  """`(data, facts)` of `config`'s kind (see `Kind.build_data`)."""
  return get(config.model.kind).build_data(config, workdir)


def build_task(config: ExperimentConfig, facts: DataFacts):
  """The task of `config`'s kind, built from `facts` (see `Kind.build_task`)."""
  return get(config.model.kind).build_task(config, facts)


def build_data_and_task(config: ExperimentConfig, workdir: str | None = None) -> tuple[Any, Any]:
  """`(data, task)` for a run on its dataset: the data, then the task from its facts."""
  data, facts = build_data(config, workdir)
  return data, build_task(config, facts)


def training_flops_per_step(cfg: ModelConfig, batch_size: int, seq_len: int,
                            src_len: int = 0, masked_too: bool = False) -> float:
  """Model FLOPs of one training step on `batch_size` rows: `flops.TRAINING_FACTOR` (3) times
  the forward FLOPs the kind declares.

  `seq_len` is the row length (for `encoder_decoder`, the target length; the encoder reads
  `src_len` tokens). `masked_too` counts causal attention whole (`flops.block_flops`).
  """
  return flops.TRAINING_FACTOR * get(cfg.kind).forward_flops(cfg, batch_size, seq_len, src_len,
                                                             masked_too=masked_too)


def experiment_flops_per_step(config: ExperimentConfig, masked_too: bool = False) -> float:
  """`training_flops_per_step` with the row lengths an `ExperimentConfig`'s data gives."""
  length, src_len = get(config.model.kind).lengths(config)
  return training_flops_per_step(config.model, config.train.batch_size, length, src_len,
                                 masked_too=masked_too)
