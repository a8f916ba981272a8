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

from transformer import decode
from transformer.config import ConfigError, ExperimentConfig
from transformer.model.models import build_model, shift_right
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


class LanguageModelTask:
  """Next-token prediction with a decoder-only LM; reported in nats/token and bits/byte."""

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import lm_data  # TensorFlow only where data is built
    self.data = lm_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    self.config = dataclasses.replace(
        config, model=dataclasses.replace(config.model,
                                          vocab_size=self.data.tokenizer.vocab_size))
    self.model = build_model(self.config.model)
    self._byte_lengths = jnp.asarray(self.data.tokenizer.byte_lengths)

  def init_boxed_params(self, rng):
    """Params still wrapped in their logical axis names (`nn.LogicallyPartitioned`), which
    `transformer.train.parallel` maps onto the device mesh."""
    tokens = jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32)
    return self.model.init({"params": rng}, tokens)["params"]

  def init_params(self, rng):
    return nn.meta.unbox(self.init_boxed_params(rng))

  def logits(self, params, batch, rng=None):
    deterministic = rng is None
    return self.model.apply(
        {"params": params}, batch["inputs"], batch.get("positions"), batch.get("segment_ids"),
        deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})

  def loss_sums(self, params, batch, rng):
    return cross_entropy_sums(self.logits(params, batch, rng), batch["targets"], batch["weights"],
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


class Seq2SeqTask:
  """Source -> target with an encoder-decoder (teacher forcing, loss on the target tokens).

  Eval: loss in nats per target token, and exact-match accuracy of greedy and beam-search
  decoding (`model.beam_size`, `model.length_penalty`): a row is right when the decoded
  sequence equals the target up to and including its EOS. Packed eval batches (several
  pairs per row) only report the loss; use `data.packing=pad` for the accuracies.
  """

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import seq2seq_data
    self.data = seq2seq_data(config.data, config.train.batch_size, config.seed, workdir=workdir)
    self.config = _with_model_fields(config, vocab_size=self.data.tokenizer.vocab_size)
    self.model = build_model(self.config.model)
    tok = self.data.tokenizer
    self.bos_id, self.eos_id, self.pad_id = tok.bos_id, tok.eos_id, tok.pad_id

  def init_boxed_params(self, rng):
    src = jnp.zeros((self.data.batch_size, self.config.data.src_len), jnp.int32)
    tgt = jnp.zeros((self.data.batch_size, self.config.data.tgt_len), jnp.int32)
    return self.model.init({"params": rng}, src, tgt)["params"]

  def init_params(self, rng):
    return nn.meta.unbox(self.init_boxed_params(rng))

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
    sums = {"loss_sum": loss_sum, "tokens": tokens}
    if "inputs_segment_ids" in batch:  # packed: one decode per row would mix pairs
      return sums
    example = jnp.any(batch["weights"] > 0, axis=1).astype(jnp.float32)
    max_new = self.config.model.max_decode_len or batch["targets"].shape[1]
    greedy = self.decode(params, batch["inputs"], 1, max_new)
    beam = self.decode(params, batch["inputs"], self.config.model.beam_size, max_new)
    sums["examples"] = jnp.sum(example)
    sums["greedy_correct"] = jnp.sum(self.exact_matches(greedy, batch["targets"],
                                                        batch["weights"]) * example)
    sums["beam_correct"] = jnp.sum(self.exact_matches(beam, batch["targets"],
                                                      batch["weights"]) * example)
    return sums

  def summarize(self, sums):
    tokens = float(sums["tokens"])
    out = {"loss": float(sums["loss_sum"]) / max(tokens, 1.0), "tokens": tokens}
    if "examples" in sums:
      n = max(float(sums["examples"]), 1.0)
      out["greedy_exact_match"] = float(sums["greedy_correct"]) / n
      out["beam_exact_match"] = float(sums["beam_correct"]) / n
      out["examples"] = float(sums["examples"])
    return out


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


class MaskedLMTask:
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

  def init_boxed_params(self, rng):
    tokens = jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32)
    return self.model.init({"params": rng}, tokens)["params"]

  def init_params(self, rng):
    return nn.meta.unbox(self.init_boxed_params(rng))

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
    return cross_entropy_sums(logits, batch["targets"], weights, z_loss=self.config.train.z_loss)

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
  import json
  import os

  import orbax.checkpoint as ocp
  directory = os.path.join(os.path.abspath(workdir), "checkpoints")
  if not os.path.isdir(directory):
    raise ConfigError(f"--config.model.init_from={workdir!r}: no checkpoints/ folder there; "
                      "point it at the workdir of a finished masked_lm run.")
  manager = ocp.CheckpointManager(directory, item_names=("state", "config"))
  step = manager.latest_step()
  if step is None:
    raise ConfigError(f"--config.model.init_from={workdir!r}: {directory} holds no checkpoint.")
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  config = {}
  config_path = os.path.join(os.path.abspath(workdir), "config.json")
  if os.path.exists(config_path):
    with open(config_path) as f:
      config = json.load(f)
  manager.close()
  return restored["state"]["params"], config


class ClassificationTask:
  """Sequence classification with an encoder, mean-pooled, and a linear head.

  With `model.init_from` = the workdir of a masked_lm run, the embedder and encoder start
  from that run's latest checkpoint (the head starts fresh); otherwise from scratch. The
  vocabulary matches the masked-LM's (tokenizer + [MASK]) so the two are interchangeable.
  """

  def __init__(self, config: ExperimentConfig, workdir: str | None = None):
    from transformer.data.pipeline import classification_data
    self.data = classification_data(config.data, config.train.batch_size, config.seed,
                                    workdir=workdir)
    self.config = _with_model_fields(config, vocab_size=self.data.tokenizer.vocab_size + 1,
                                     num_classes=self.data.num_classes)
    self.model = build_model(self.config.model)
    self.pretrained = None
    if self.config.model.init_from:
      self.pretrained = self._load_pretrained(self.config.model.init_from)

  def _load_pretrained(self, workdir: str) -> dict:
    params, saved = load_params(workdir)
    if saved and saved.get("model", {}).get("kind") != "masked_lm":
      raise ConfigError(f"--config.model.init_from={workdir!r} holds a "
                        f"{saved['model'].get('kind')!r} run; it must be a masked_lm run.")
    want = jax.eval_shape(lambda r: nn.meta.unbox(self.init_boxed_params(r)),
                          jax.random.PRNGKey(0))
    pretrained = {k: params[k] for k in ("embedder", "encoder")}
    want_shapes = jax.tree.map(lambda x: x.shape, {k: want[k] for k in pretrained})
    got_shapes = jax.tree.map(lambda x: tuple(x.shape), pretrained)
    if want_shapes != got_shapes:
      raise ConfigError(
          f"--config.model.init_from={workdir!r}: its encoder does not fit this model (layers, "
          "widths, vocabulary or positions differ); use the same model.* and data.tokenizer "
          "as the masked_lm run.")
    return pretrained

  def init_boxed_params(self, rng):
    """Fresh params with logical axis names (the pretrained encoder has the same shapes)."""
    tokens = jnp.zeros((self.data.batch_size, self.config.data.seq_len), jnp.int32)
    return self.model.init({"params": rng}, tokens)["params"]

  def init_params(self, rng):
    params = nn.meta.unbox(self.init_boxed_params(rng))
    if self.pretrained is not None:
      params = dict(params)
      params.update(jax.tree.map(jnp.asarray, self.pretrained))
    return params

  def _logits(self, params, batch, rng=None):
    deterministic = rng is None
    return self.model.apply({"params": params}, batch["inputs"], deterministic=deterministic,
                            rngs=None if deterministic else {"dropout": rng})

  def loss_sums(self, params, batch, rng):
    logits = self._logits(params, batch, rng)
    return cross_entropy_sums(logits[:, None], batch["label"][:, None],
                              batch["example_weight"][:, None], z_loss=self.config.train.z_loss)

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


TASKS = {"decoder_lm": LanguageModelTask, "encoder_decoder": Seq2SeqTask,
         "masked_lm": MaskedLMTask, "classifier": ClassificationTask}


def build_task(config: ExperimentConfig, workdir: str | None = None) -> Task:
  """The task for `config.model.kind`; `workdir` keeps what the data builds for this run
  (a trained SentencePiece vocabulary)."""
  return TASKS[config.model.kind](config, workdir=workdir)
