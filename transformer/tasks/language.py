"""Language modelling: next-token prediction with a decoder-only LM, and BERT-style masked-LM
pre-training of a bidirectional encoder."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from transformer.data.facts import FIRST_REGULAR_ID, DataFacts
from transformer.model.models import output_projection
from transformer.tasks.base import Forward, TaskBase, TokenVocabulary, random_tokens
from transformer.tasks.losses import cross_entropy_sums


class LanguageModelTask(TokenVocabulary, TaskBase):
  """Next-token prediction with a decoder-only LM; reported in nats/token and bits/byte
  (bits/byte only when the facts give the tokenizer's byte lengths). With `train.loss_chunk`
  the training loss applies the output layer chunk by chunk (evals and diagnostics still
  compute whole logits)."""
  supports_loss_chunk = True

  def __init__(self, config, facts, build_model):
    super().__init__(config, facts, build_model)
    self._byte_lengths = (None if facts.byte_lengths is None
                          else jnp.asarray(facts.byte_lengths))

  def example_inputs(self):
    """`[rows, seq_len]` random tokens."""
    return (self._synthetic_tokens(self.rows_per_process, self.config.data.seq_len),)

  @staticmethod
  def _inputs(batch) -> tuple:
    return batch["inputs"], batch.get("positions"), batch.get("segment_ids")

  def model_inputs(self, batch):
    return self._inputs(batch)

  def train_forward(self, params, batch, rng, sow=False):
    if self.config.train.loss_chunk and not sow:  # diagnostics read the whole logits
      hidden = self.apply(params, *self._inputs(batch), rng=rng, return_hidden=True)
      return Forward(hidden, batch["targets"], batch["weights"], {},
                     project=output_projection(self.config.model, params))
    return self._forward(params, self._inputs(batch), rng, sow, batch["targets"],
                         batch["weights"])

  def eval_sums(self, params, batch):
    loss_sum, tokens = cross_entropy_sums(self.apply(params, *self._inputs(batch)),
                                          batch["targets"], batch["weights"])
    sums = {"loss_sum": loss_sum, "tokens": tokens}
    if self._byte_lengths is not None:
      sums["bytes"] = jnp.sum(jnp.take(self._byte_lengths, batch["targets"]) * batch["weights"])
    return sums

  def summarize(self, sums):
    tokens = float(sums["tokens"])
    out = {"loss": float(sums["loss_sum"]) / max(tokens, 1.0)}
    if "bytes" in sums:
      out["bits_per_byte"] = float(sums["loss_sum"]) / math.log(2) / max(float(sums["bytes"]),
                                                                           1.0)
    out["tokens"] = tokens
    return out

  def random_batch(self, rows, rng):
    """`inputs`, `targets`, `weights` `[rows, seq_len]`, targets = inputs shifted by one."""
    t = random_tokens(self.facts, rows, self.config.data.seq_len + 1, rng)
    return {"inputs": t[:, :-1], "targets": t[:, 1:],
            "weights": np.ones((rows, self.config.data.seq_len), np.float32)}


def bert_mask(rng: jax.Array, tokens: jax.Array, weights: jax.Array, rate: float, mask_id: int,
              vocab_size: int, first_regular_id: int = FIRST_REGULAR_ID
              ) -> tuple[jax.Array, jax.Array]:
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

  def __init__(self, config, facts, build_model):
    self.mask_id = facts.vocab_size
    super().__init__(config, facts, build_model)

  @classmethod
  def model_fields(cls, config, facts):
    return {"vocab_size": facts.vocab_size + 1}  # the data's ids and [MASK]

  @classmethod
  def facts_from_config(cls, config):
    return DataFacts(vocab_size=config.model.vocab_size - 1)

  def example_inputs(self):
    """`[rows, seq_len]` random tokens (not masked)."""
    return (self._synthetic_tokens(self.rows_per_process, self.config.data.seq_len),)

  def model_inputs(self, batch):
    """The batch with BERT's corruption under the fixed eval key (training draws its own)."""
    return self._masked(batch, jax.random.PRNGKey(self.EVAL_MASK_SEED))[0]

  def _masked(self, batch, mask_rng) -> tuple[tuple, jax.Array]:
    """The model's inputs with BERT's corruption, and `[batch, len]` weights 1 where masked."""
    tokens, weights = bert_mask(mask_rng, batch["inputs"], batch["weights"],
                                self.config.model.mlm_mask_rate, self.mask_id, self.mask_id)
    return (tokens, batch.get("positions"), batch.get("segment_ids")), weights

  def train_forward(self, params, batch, rng, sow=False):
    mask_rng, dropout_rng = jax.random.split(rng)
    inputs, weights = self._masked(batch, mask_rng)
    return self._forward(params, inputs, dropout_rng, sow, batch["targets"], weights)

  def eval_sums(self, params, batch):
    inputs, weights = self._masked(batch, jax.random.PRNGKey(self.EVAL_MASK_SEED))
    logits = self.apply(params, *inputs)
    loss_sum, tokens = cross_entropy_sums(logits, batch["targets"], weights)
    correct = jnp.sum((jnp.argmax(logits, -1) == batch["targets"]) * weights)
    return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

  def summarize(self, sums):
    tokens = max(float(sums["tokens"]), 1.0)
    return {"loss": float(sums["loss_sum"]) / tokens, "masked_accuracy":
            float(sums["correct"]) / tokens, "tokens": float(sums["tokens"])}

  def random_batch(self, rows, rng):
    """`inputs` = `targets` `[rows, seq_len]` (never [MASK]), `weights` 1: the task masks."""
    t = random_tokens(self.facts, rows, self.config.data.seq_len, rng)
    return {"inputs": t, "targets": t, "weights": np.ones(t.shape, np.float32)}
