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

from transformer.config import ExperimentConfig
from transformer.model.models import build_model
from transformer.train.losses import cross_entropy_sums


class Task(Protocol):
  config: ExperimentConfig  # with model.vocab_size filled in from the tokenizer
  model: nn.Module
  data: Any  # has next_train_batch(), eval_batches(max_batches), train_iterator, batch_size

  def init_params(self, rng: jax.Array) -> Any: ...
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
    return cross_entropy_sums(self.logits(params, batch, rng), batch["targets"], batch["weights"])

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


TASKS = {"decoder_lm": LanguageModelTask}


def build_task(config: ExperimentConfig, workdir: str | None = None) -> Task:
  """The task for `config.model.kind`; `workdir` keeps what the data builds for this run
  (a trained SentencePiece vocabulary)."""
  return TASKS[config.model.kind](config, workdir=workdir)
