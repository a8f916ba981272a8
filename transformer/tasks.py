"""Tasks: what a run trains on and how it is scored.

A task ties together the input pipeline, the model, the training loss and the eval metrics,
so the training loop (`transformer.train.loop`) never needs to know which one it runs. Every
function a task hands to the loop is pure: `loss_sums(params, batch, rng)` and
`eval_sums(params, batch)` return sums (not means), so they add up across batches, micro-
batches and devices; `summarize(sums)` turns eval sums into the reported figures.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer.evaluation import decode
from transformer.config import ConfigError, ExperimentConfig
from transformer.model.models import build_model, shift_right
from transformer.train import init_from
from transformer.train.losses import cross_entropy_sums


class Task(Protocol):
  config: ExperimentConfig  # with model.vocab_size filled in from the tokenizer
  model: nn.Module
  data: Any  # has next_train_batch(), eval_batches(max_batches), train_iterator, batch_size

  def init_params(self, rng: jax.Array) -> Any: ...
  # The same params still wrapped in their logical axis names, for the mesh shardings.
  def init_boxed_params(self, rng: jax.Array) -> Any: ...
  def loss_sums(self, params, batch: dict, rng: jax.Array) -> tuple[jax.Array, jax.Array]: ...
  def eval_sums(self, params, batch: dict) -> dict: ...
  def summarize(self, sums: dict) -> dict: ...


class TaskBase:
  """What every task shares: params from the model's `init` on example inputs, and
  `model.init_from` (matching parameters of another run, see `transformer.train.init_from`).
  A task sets `config`, `model`, `data` and defines `example_inputs()`, then calls
  `self._load_init_from()`."""
  pretrained = None

  def example_inputs(self) -> tuple:
    raise NotImplementedError

  def init_boxed_params(self, rng):
    """Params still wrapped in their logical axis names (`nn.LogicallyPartitioned`), which
    `transformer.train.parallel` maps onto the device mesh."""
    return self.model.init({"params": rng}, *self.example_inputs())["params"]

  def init_params(self, rng):
    params = nn.meta.unbox(self.init_boxed_params(rng))
    if self.pretrained is not None:
      params = init_from.merge(params, self.pretrained)
    return params

  def _load_init_from(self, log=print) -> None:
    if self.config.model.init_from:
      abstract = jax.eval_shape(lambda r: nn.meta.unbox(self.init_boxed_params(r)),
                                jax.random.PRNGKey(0))
      self.pretrained = init_from.matching_params(self.config.model.init_from, abstract, log)


class LanguageModelTask(TaskBase):
  """Next-token prediction with a decoder-only LM; reported in nats/token and bits/byte."""

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import lm_data  # TensorFlow only where data is built
    self.data = lm_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    self.config = dataclasses.replace(
        config, model=dataclasses.replace(config.model,
                                          vocab_size=self.data.tokenizer.vocab_size))
    self.model = build_model(self.config.model)
    self._byte_lengths = jnp.asarray(self.data.tokenizer.byte_lengths)
    self._load_init_from()

  def example_inputs(self):
    return (jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32),)

  def logits(self, params, batch, rng=None):
    deterministic = rng is None
    return self.model.apply(
        {"params": params}, batch["inputs"], batch.get("positions"), batch.get("segment_ids"),
        deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})

  def loss_sums(self, params, batch, rng):
    return cross_entropy_sums(self.logits(params, batch, rng), batch["targets"], batch["weights"],
                              self.config.train.label_smoothing,
                              z_loss=self.config.train.z_loss)

  def eval_sums(self, params, batch):
    loss_sum, tokens = cross_entropy_sums(self.logits(params, batch), batch["targets"],
                                          batch["weights"])
    num_bytes = jnp.sum(jnp.take(self._byte_lengths, batch["targets"]) * batch["weights"])
    return {"loss_sum": loss_sum, "tokens": tokens, "bytes": num_bytes}

  def summarize(self, sums):
    tokens, num_bytes = float(sums["tokens"]), float(sums["bytes"])
    return {"loss": float(sums["loss_sum"]) / max(tokens, 1.0),
            "bits_per_byte": float(sums["loss_sum"]) / math.log(2) / max(num_bytes, 1.0),
            "tokens": tokens}


def _with_model_fields(config: ExperimentConfig, **fields) -> ExperimentConfig:
  return dataclasses.replace(config, model=dataclasses.replace(config.model, **fields))


class Seq2SeqTask(TaskBase):
  """Source -> target with an encoder-decoder (teacher forcing, loss on the target tokens).

  Eval: loss in nats per target token, and for greedy and beam-search decoding
  (`model.beam_size`, `model.length_penalty`) exact-match accuracy (a row is right when the
  decoded sequence equals the target up to and including its EOS) and corpus BLEU
  (sacreBLEU, detokenized). Packed eval batches (several pairs per row) only report the
  loss; use `data.packing=pad` for the decoding metrics.
  """

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import seq2seq_data
    self.data = seq2seq_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    self.config = _with_model_fields(config, vocab_size=self.data.tokenizer.vocab_size)
    self.model = build_model(self.config.model)
    tok = self.data.tokenizer
    self.bos_id, self.eos_id, self.pad_id = tok.bos_id, tok.eos_id, tok.pad_id
    self._load_init_from()

  def example_inputs(self):
    return (jnp.zeros((self.data.batch_size, self.config.data.src_len), jnp.int32),
            jnp.zeros((self.data.batch_size, self.config.data.tgt_len), jnp.int32))

  def logits(self, params, batch, rng=None):
    deterministic = rng is None
    decoder_inputs = shift_right(batch["targets"], self.bos_id, batch.get("targets_segment_ids"))
    return self.model.apply(
        {"params": params}, batch["inputs"], decoder_inputs, batch.get("inputs_positions"),
        batch.get("inputs_segment_ids"), batch.get("targets_positions"),
        batch.get("targets_segment_ids"), deterministic=deterministic,
        rngs=None if deterministic else {"dropout": rng})

  def loss_sums(self, params, batch, rng):
    return cross_entropy_sums(self.logits(params, batch, rng), batch["targets"], batch["weights"],
                              self.config.train.label_smoothing,
                              z_loss=self.config.train.z_loss)

  def decode(self, params, inputs, beam_size: int, max_new: int):
    """`[batch, src_len]` -> `[batch, max_new]` greedy (beam_size 1) or beam-search output."""
    return decode.seq2seq_decode(self.model, params, inputs, max_new, bos_id=self.bos_id,
                                 eos_id=self.eos_id, beam_size=beam_size,
                                 length_penalty=self.config.model.length_penalty,
                                 pad_id=self.pad_id)

  def exact_matches(self, decoded, targets, weights):
    """`[batch]` float: 1 where `decoded` equals the (real) target exactly."""
    tgt_len = targets.shape[1]
    if decoded.shape[1] < tgt_len:
      decoded = jnp.pad(decoded, ((0, 0), (0, tgt_len - decoded.shape[1])),
                        constant_values=self.pad_id)
    real = weights > 0
    same = jnp.all(jnp.where(real, decoded[:, :tgt_len] == targets, True), axis=1)
    # Nothing may follow the target's end (a longer decode is wrong).
    tail_ok = jnp.all(jnp.where(real, True, decoded[:, :tgt_len] == self.pad_id), axis=1)
    tail_ok &= jnp.all(decoded[:, tgt_len:] == self.pad_id, axis=1)
    return (same & tail_ok).astype(jnp.float32)

  def eval_sums(self, params, batch):
    loss_sum, tokens = cross_entropy_sums(self.logits(params, batch), batch["targets"],
                                          batch["weights"])
    return {"loss_sum": loss_sum, "tokens": tokens}

  def summarize(self, sums):
    tokens = float(sums["tokens"])
    return {"loss": float(sums["loss_sum"]) / max(tokens, 1.0), "tokens": tokens}

  def eval_outputs(self, params, batch):
    """Greedy and beam-search decodings `[batch, max_new]` of the batch's sources, with its
    targets and weights, for the host-side metrics (`summarize_outputs`). Packed batches
    (several pairs per row) give none: one decode per row would mix pairs."""
    if "inputs_segment_ids" in batch:
      return {}
    max_new = self.config.model.max_decode_len or batch["targets"].shape[1]
    return {"greedy": self.decode(params, batch["inputs"], 1, max_new),
            "beam": self.decode(params, batch["inputs"], self.config.model.beam_size, max_new),
            "targets": batch["targets"], "weights": batch["weights"]}

  def summarize_outputs(self, outputs: list[dict]) -> dict:
    """Exact match and corpus BLEU (sacreBLEU on detokenized text) of greedy and beam search
    over all eval rows; rows without target weight (padding, filler batches) are left out."""
    outputs = [o for o in outputs if o]
    if not outputs:
      return {}
    cat = {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in outputs[0]}
    real = np.any(cat["weights"] > 0, axis=1)
    cat = {k: v[real] for k, v in cat.items()}
    tok = self.data.tokenizer
    references = [tok.decode(_until(row, self.eos_id)) for row in cat["targets"]]
    out = {"examples": float(real.sum())}
    for name in ("greedy", "beam"):
      matches = self.exact_matches(jnp.asarray(cat[name]), jnp.asarray(cat["targets"]),
                                   jnp.asarray(cat["weights"]))
      out[f"{name}_exact_match"] = float(np.mean(np.asarray(matches))) if len(matches) else 0.0
      hypotheses = [tok.decode(_until(row, self.eos_id)) for row in cat[name]]
      score, signature = corpus_bleu(hypotheses, references)
      out[f"{name}_bleu"] = score
    out["bleu_signature"] = signature
    return out


def _until(row, eos_id: int) -> list[int]:
  """Token ids of `row` before its first `eos_id`, padding (0) dropped."""
  row = [int(t) for t in row]
  row = row[:row.index(eos_id)] if eos_id in row else row
  return [t for t in row if t != 0]


def corpus_bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
  """sacreBLEU's corpus BLEU (13a tokenization, mixed case, exp smoothing) of detokenized
  strings against one reference each, and its signature."""
  import sacrebleu  # noqa: PLC0415
  bleu = sacrebleu.metrics.BLEU()
  score = bleu.corpus_score(hypotheses, [references])
  return float(score.score), str(bleu.get_signature())


def bert_mask(rng: jax.Array, tokens: jax.Array, weights: jax.Array, rate: float, mask_id: int,
              vocab_size: int, first_regular_id: int = 3) -> tuple[jax.Array, jax.Array]:
  """BERT's masking (Devlin et al., 2019, section 3.1): select `rate` of the real tokens;
  of those, 80% become `mask_id`, 10% a random regular token, 10% stay as they are.

  Args:
    tokens: `[batch, len]` int; weights: `[batch, len]` (0 = padding, never selected).
    first_regular_id: ids below it (pad, bos, eos) are never selected or drawn.
  Returns:
    (`[batch, len]` corrupted inputs, `[batch, len]` float32 loss weights: 1 where selected).
  """
  select_rng, how_rng, random_rng = jax.random.split(rng, 3)
  selectable = (weights > 0) & (tokens >= first_regular_id)
  selected = selectable & jax.random.bernoulli(select_rng, rate, tokens.shape)
  u = jax.random.uniform(how_rng, tokens.shape)
  random_tokens = jax.random.randint(random_rng, tokens.shape, first_regular_id, vocab_size)
  corrupted = jnp.where(u < 0.8, mask_id, jnp.where(u < 0.9, random_tokens, tokens))
  return jnp.where(selected, corrupted, tokens), selected.astype(jnp.float32)


class MaskedLMTask(TaskBase):
  """BERT-style masked-LM pre-training of a bidirectional encoder.

  The vocabulary is the tokenizer's plus one [MASK] id (= the tokenizer's vocab_size). Eval
  masks with a fixed key, so every eval sees the same corruption; reports loss and accuracy
  on the selected tokens.
  """
  EVAL_MASK_SEED = 1234

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import mlm_data
    self.data = mlm_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    self.mask_id = self.data.tokenizer.vocab_size
    self.config = _with_model_fields(config, vocab_size=self.mask_id + 1)
    self.model = build_model(self.config.model)
    self._load_init_from()

  def example_inputs(self):
    return (jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32),)

  def _masked_logits(self, params, batch, mask_rng, dropout_rng=None):
    inputs, weights = bert_mask(mask_rng, batch["inputs"], batch["weights"],
                                self.config.model.mlm_mask_rate, self.mask_id, self.mask_id)
    deterministic = dropout_rng is None
    logits = self.model.apply({"params": params}, inputs, batch.get("positions"),
                              batch.get("segment_ids"), deterministic=deterministic,
                              rngs=None if deterministic else {"dropout": dropout_rng})
    return logits, weights

  def loss_sums(self, params, batch, rng):
    mask_rng, dropout_rng = jax.random.split(rng)
    logits, weights = self._masked_logits(params, batch, mask_rng, dropout_rng)
    return cross_entropy_sums(logits, batch["targets"], weights, self.config.train.label_smoothing,
                              z_loss=self.config.train.z_loss)

  def eval_sums(self, params, batch):
    logits, weights = self._masked_logits(params, batch, jax.random.PRNGKey(self.EVAL_MASK_SEED))
    loss_sum, tokens = cross_entropy_sums(logits, batch["targets"], weights)
    correct = jnp.sum((jnp.argmax(logits, -1) == batch["targets"]) * weights)
    return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

  def summarize(self, sums):
    tokens = max(float(sums["tokens"]), 1.0)
    return {"loss": float(sums["loss_sum"]) / tokens, "masked_accuracy":
            float(sums["correct"]) / tokens, "tokens": float(sums["tokens"])}


def load_params(workdir: str) -> tuple[Any, dict]:
  """The parameters of the latest checkpoint under `<workdir>/checkpoints` (numpy) and the
  run's config (dict). Raises ConfigError if there is none."""
  params, config, _ = init_from.load_params(workdir)
  return params, config


class ClassificationTask(TaskBase):
  """Sequence classification with an encoder, mean-pooled, and a linear head.

  With `model.init_from` = the workdir of a masked_lm run, the embedder and encoder start
  from that run's checkpoint (the head starts fresh); otherwise from scratch. The
  vocabulary matches the masked-LM's (tokenizer + [MASK]) so the two are interchangeable.
  """

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import classification_data
    self.data = classification_data(config.data, config.train.batch_size, config.seed,
                                    workdir=workdir)
    self.config = _with_model_fields(config, vocab_size=self.data.tokenizer.vocab_size + 1,
                                     num_classes=self.data.num_classes)
    self.model = build_model(self.config.model)
    self._load_init_from()

  def example_inputs(self):
    return (jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32),)

  def _logits(self, params, batch, rng=None):
    deterministic = rng is None
    return self.model.apply({"params": params}, batch["inputs"], deterministic=deterministic,
                            rngs=None if deterministic else {"dropout": rng})

  def loss_sums(self, params, batch, rng):
    logits = self._logits(params, batch, rng)
    return cross_entropy_sums(logits[:, None], batch["label"][:, None],
                              batch["example_weight"][:, None], self.config.train.label_smoothing,
                              z_loss=self.config.train.z_loss)

  def eval_sums(self, params, batch):
    logits = self._logits(params, batch)
    w = batch["example_weight"]
    loss_sum, n = cross_entropy_sums(logits[:, None], batch["label"][:, None], w[:, None])
    correct = jnp.sum((jnp.argmax(logits, -1) == batch["label"]) * w)
    return {"loss_sum": loss_sum, "examples": n, "correct": correct}

  def summarize(self, sums):
    n = max(float(sums["examples"]), 1.0)
    return {"loss": float(sums["loss_sum"]) / n, "accuracy": float(sums["correct"]) / n,
            "examples": float(sums["examples"])}


class ImageClassificationTask(ClassificationTask):
  """Image classification with a Vision Transformer: the classifier's loss and accuracy on
  `[batch, height, width, channels]` images (`transformer.data.pipeline.image_data`)."""

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import image_data
    self.data = image_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    height, width, channels = next(iter(self.data.eval_batches(1)))["inputs"].shape[1:]
    if height != width:
      raise ConfigError(f"{config.data.name} has {height}x{width} images; vit_classifier "
                        "takes square ones.")
    self.config = _with_model_fields(config, num_classes=self.data.num_classes,
                                     image_size=int(height), image_channels=int(channels))
    self.model = build_model(self.config.model)
    self._load_init_from()

  def example_inputs(self):
    m = self.config.model
    return (jnp.zeros((self.data.batch_size, m.image_size, m.image_size, m.image_channels),
                      jnp.float32),)


def build_task(config: ExperimentConfig, workdir: str | None = None) -> Task:
  """The task for `config.model.kind` (as `transformer.kinds` names it); `workdir` keeps what
  the data builds for this run (a trained SentencePiece vocabulary)."""
  from transformer import kinds  # noqa: PLC0415 -- the registry names the classes here
  return kinds.get(config.model.kind).build_task(config, workdir)
