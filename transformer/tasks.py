"""Tasks: what a run trains on and how it is scored.

A task ties together the model, the training loss and the eval metrics, so the training loop
(`transformer.train.loop`) never needs to know which one it runs. A task is pure: built from
the config and the facts its data reports (`transformer.data.facts.DataFacts`: vocabulary,
special ids, classes, image shape), it holds no data and never builds any, so training,
`--mode=bench` (on the task's `random_batch`) and diagnostics all run the same loss. The
registry (`transformer.kinds`) builds a kind's data and its task.

Every function a task hands to the loop is pure: `loss_sums(params, batch, rng)` and
`eval_sums(params, batch)` return sums (not means), so they add up across batches, micro-
batches and devices; `summarize(sums)` turns eval sums into the reported figures.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Optional, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ConfigError, ExperimentConfig, ModelConfig
from transformer.data.facts import FIRST_REGULAR_ID, DataFacts
from transformer.evaluation import decode
from transformer.model.models import output_projection, shift_right
from transformer.train import init_from
from transformer.train.hf_tokenizer import id_offset
from transformer.train.losses import chunked_cross_entropy_sums, cross_entropy_sums


class Task(Protocol):
  config: ExperimentConfig  # with the model fields the data sets (vocab_size, ...) filled in
  facts: DataFacts
  model: nn.Module

  def init_params(self, rng: jax.Array) -> Any: ...
  # The same params still wrapped in their logical axis names, for the mesh shardings.
  def init_boxed_params(self, rng: jax.Array) -> Any: ...
  def loss_sums(self, params, batch: dict, rng: jax.Array) -> tuple[jax.Array, jax.Array]: ...
  def eval_sums(self, params, batch: dict) -> dict: ...
  def summarize(self, sums: dict) -> dict: ...
  def random_batch(self, rows: int, rng: np.random.Generator) -> dict: ...
  # loss_sums = train_loss(train_forward(...)); diagnostics asks the forward pass to sow.
  def train_forward(self, params, batch: dict, rng: jax.Array, sow: bool = False): ...
  def train_loss(self, forward) -> tuple[jax.Array, jax.Array]: ...


class Forward(NamedTuple):
  """What the training loss scores: float32 `logits` `[batch, length, classes]`, int `targets`
  and float `weights` `[batch, length]` (classifiers: length 1), and the "diagnostics"
  collection the modules sowed (`{}` unless asked for). With `project` (the chunked loss,
  `train.loss_chunk`), `logits` holds the final hidden states `[batch, length, d_model]`
  instead, and `project` maps them to the float32 logits one chunk at a time."""
  logits: jax.Array
  targets: jax.Array
  weights: jax.Array
  sown: dict
  project: Optional[Callable[[jax.Array], jax.Array]] = None


class TaskBase:
  """What every task shares: the config with the model fields the data sets
  (`model_fields`), the model, params from its `init` on example inputs, `model.init_from`
  (matching parameters of another run, see `transformer.train.init_from`), one `apply` for
  every model call, and the training loss on a task's `train_forward`.

  A task defines `model_fields`, `facts_from_config`, `example_inputs`, `model_inputs`,
  `train_forward`, `eval_sums`, `summarize` and `random_batch`.

  Admin (`norm_placement="admin"`) profiles its omegas in the model's `init`, on the inputs
  `init` is given (`transformer.model.admin`): `init_params(rng, batch)` hands it a training
  batch's inputs (`model_inputs`; the training loop passes the run's first batch, as Liu et
  al. 2020 profile on data); `init_params(rng)`, used where there is no data (`--mode=bench`,
  abstract shapes), hands it `example_inputs()`: synthetic, uniformly random regular tokens of
  the vocabulary (random pixels for images) drawn with a fixed key, not zeros (an all-padding
  batch makes every position the same token, which is no profile of text).
  """
  SYNTHETIC_SEED = 0  # the fixed key of `example_inputs`
  pretrained = None
  supports_loss_chunk = False  # train_forward can hand the loss hidden states (`Forward.project`)

  def __init__(self, config: ExperimentConfig, facts: DataFacts,
               build_model: Callable[[ModelConfig], nn.Module]):
    if config.train.loss_chunk and not self.supports_loss_chunk:
      raise ConfigError(
          f"--config.train.loss_chunk={config.train.loss_chunk} (the chunked output layer and "
          f"cross entropy) is implemented for decoder_lm only; {config.model.kind} computes its "
          "logits in one piece. Set --config.train.loss_chunk=0.")
    chunk, length = config.train.loss_chunk, config.data.seq_len
    if chunk > length:  # the loss pads each row to a multiple of the chunk (losses.py)
      raise ConfigError(
          f"--config.train.loss_chunk={chunk} is positions of each row per chunk, more than a "
          f"row's {length} (data.seq_len): every row would be padded to {chunk} positions, "
          f"{chunk / length:.0f}x the logits of no chunking. Use a divisor of {length}, e.g. "
          f"--config.train.loss_chunk={max(1, length // 4)}.")
    self.facts = facts
    self.config = dataclasses.replace(
        config, model=dataclasses.replace(config.model, **self.model_fields(config, facts)))
    self.model = build_model(self.config.model)
    self._load_init_from()

  @classmethod
  def model_fields(cls, config: ExperimentConfig, facts: DataFacts) -> dict:
    """The `ModelConfig` fields the data decides (`transformer.kinds.FROM_DATA`)."""
    raise NotImplementedError

  @classmethod
  def facts_from_config(cls, config: ExperimentConfig) -> DataFacts:
    """Facts without a dataset (`--mode=bench`), read off the config: the inverse of
    `model_fields`, so the model is the one the config describes."""
    raise NotImplementedError

  def example_inputs(self) -> tuple:
    """Synthetic model inputs of one process's batch shape (see the class docstring)."""
    raise NotImplementedError

  def model_inputs(self, batch: dict) -> tuple:
    """The model's positional inputs for a training `batch` (this process's rows), as
    `train_forward` feeds them, without dropout: what Admin's profile runs on."""
    raise NotImplementedError

  def _synthetic_tokens(self, *shape: int) -> jax.Array:
    """`shape` int32 regular token ids (no pad, bos, eos), uniform over the data's
    vocabulary, from the fixed key `SYNTHETIC_SEED` (traceable)."""
    return jax.random.randint(jax.random.PRNGKey(self.SYNTHETIC_SEED), shape, FIRST_REGULAR_ID,
                              max(self.facts.vocab_size, FIRST_REGULAR_ID + 1), jnp.int32)

  @property
  def rows_per_process(self) -> int:
    """Rows of one process's batch (the shape `init` sees, as the data would give it)."""
    return self.config.train.batch_size // jax.process_count()

  def init_boxed_params(self, rng, batch: Optional[dict] = None):
    """Params still wrapped in their logical axis names (`nn.LogicallyPartitioned`), which
    `transformer.train.parallel` maps onto the device mesh. `model.init` runs on `batch`'s
    inputs (`model_inputs`), or on `example_inputs()` without one: only Admin's omegas
    depend on which (the class docstring)."""
    inputs = self.example_inputs() if batch is None else self.model_inputs(batch)
    return self.model.init({"params": rng}, *inputs)["params"]

  def init_params(self, rng, batch: Optional[dict] = None):
    """Initial params (unboxed); `batch` as in `init_boxed_params`."""
    params = nn.meta.unbox(self.init_boxed_params(rng, batch))
    if self.pretrained is not None:
      params = init_from.merge(params, self.pretrained)
    return params

  def _load_init_from(self, log=print) -> None:
    if self.config.model.init_from:
      abstract = jax.eval_shape(lambda r: nn.meta.unbox(self.init_boxed_params(r)),
                                jax.random.PRNGKey(0))
      self.pretrained = init_from.matching_params(
          self.config.model.init_from, abstract, log, vocab_size=self.config.model.vocab_size,
          id_offset=id_offset(self.facts.tokenizer))

  def apply(self, params, *inputs, rng: Optional[jax.Array] = None, sow: bool = False,
            **kwargs):
    """The model on `inputs` (and keyword `kwargs`), with dropout keyed by `rng`
    (deterministic when None).

    Returns its output; with `sow`, `(output, sown)`: also the "diagnostics" collection
    that the modules sow only when it is mutable (`transformer.train.diagnostics`)."""
    deterministic = rng is None
    out = self.model.apply({"params": params}, *inputs, deterministic=deterministic,
                           rngs=None if deterministic else {"dropout": rng},
                           mutable=["diagnostics"] if sow else False, **kwargs)
    if not sow:
      return out
    out, state = out
    return out, state.get("diagnostics", {})

  def _forward(self, params, inputs: tuple, rng, sow: bool, targets, weights) -> Forward:
    out = self.apply(params, *inputs, rng=rng, sow=sow)
    logits, sown = out if sow else (out, {})
    return Forward(logits, targets, weights, sown)

  def train_forward(self, params, batch: dict, rng: jax.Array, sow: bool = False) -> Forward:
    """The model's outputs on `batch` as the training loss scores them."""
    raise NotImplementedError

  def train_loss(self, forward: Forward) -> tuple[jax.Array, jax.Array]:
    """(loss sum, weight sum) of the training loss: cross entropy with the config's label
    smoothing and z-loss; chunked (`train.loss_chunk`) when the forward pass says so."""
    train = self.config.train
    if forward.project is not None:
      return chunked_cross_entropy_sums(forward.logits, forward.project, forward.targets,
                                        forward.weights, train.loss_chunk, train.label_smoothing,
                                        z_loss=train.z_loss)
    return cross_entropy_sums(forward.logits, forward.targets, forward.weights,
                              self.config.train.label_smoothing, z_loss=self.config.train.z_loss)

  def loss_sums(self, params, batch, rng):
    return self.train_loss(self.train_forward(params, batch, rng))


def _random_tokens(facts: DataFacts, rows: int, length: int,
                   rng: np.random.Generator) -> np.ndarray:
  """`[rows, length]` int32 regular token ids of the data's vocabulary (no pad, bos, eos)."""
  return rng.integers(FIRST_REGULAR_ID, facts.vocab_size, (rows, length), np.int32)


class _TokenVocabulary:
  """For tasks whose model reads and writes the tokenizer's ids and nothing else: the model's
  vocabulary is the tokenizer's, and without a dataset the config's."""

  @classmethod
  def model_fields(cls, config, facts):
    return {"vocab_size": facts.vocab_size}

  @classmethod
  def facts_from_config(cls, config):
    return DataFacts(vocab_size=config.model.vocab_size)


class LanguageModelTask(_TokenVocabulary, TaskBase):
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
    t = _random_tokens(self.facts, rows, self.config.data.seq_len + 1, rng)
    return {"inputs": t[:, :-1], "targets": t[:, 1:],
            "weights": np.ones((rows, self.config.data.seq_len), np.float32)}


class Seq2SeqTask(_TokenVocabulary, TaskBase):
  """Source -> target with an encoder-decoder (teacher forcing, loss on the target tokens).

  Eval: loss in nats per target token, and for greedy and beam-search decoding
  (`model.beam_size`, `model.length_penalty`) exact-match accuracy (a row is right when the
  decoded sequence equals the target up to and including its EOS) and corpus BLEU
  (sacreBLEU, detokenized). Packed eval batches (several pairs per row) only report the
  loss; use `data.packing=pad` for the decoding metrics.
  """

  def __init__(self, config, facts, build_model):
    super().__init__(config, facts, build_model)
    self.bos_id, self.eos_id, self.pad_id = facts.bos_id, facts.eos_id, facts.pad_id

  def example_inputs(self):
    """Random sources `[rows, src_len]` and decoder inputs `[rows, tgt_len]`."""
    rows, d = self.rows_per_process, self.config.data
    tokens = self._synthetic_tokens(rows, d.src_len + d.tgt_len)
    return tokens[:, :d.src_len], tokens[:, d.src_len:]

  def model_inputs(self, batch):
    return self._inputs(batch)

  def _inputs(self, batch) -> tuple:
    """The model's inputs: sources, and the targets shifted right (teacher forcing)."""
    decoder_inputs = shift_right(batch["targets"], self.bos_id, batch.get("targets_segment_ids"))
    return (batch["inputs"], decoder_inputs, batch.get("inputs_positions"),
            batch.get("inputs_segment_ids"), batch.get("targets_positions"),
            batch.get("targets_segment_ids"))

  def train_forward(self, params, batch, rng, sow=False):
    return self._forward(params, self._inputs(batch), rng, sow, batch["targets"],
                         batch["weights"])

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
    loss_sum, tokens = cross_entropy_sums(self.apply(params, *self._inputs(batch)),
                                          batch["targets"], batch["weights"])
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
    tok = self.facts.tokenizer
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

  def random_batch(self, rows, rng):
    """`inputs` `[rows, src_len]`; `targets`, `weights` `[rows, tgt_len]`."""
    d = self.config.data
    return {"inputs": _random_tokens(self.facts, rows, d.src_len, rng),
            "targets": _random_tokens(self.facts, rows, d.tgt_len, rng),
            "weights": np.ones((rows, d.tgt_len), np.float32)}


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
    t = _random_tokens(self.facts, rows, self.config.data.seq_len, rng)
    return {"inputs": t, "targets": t, "weights": np.ones(t.shape, np.float32)}


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
    return _random_tokens(self.facts, rows, self.config.data.seq_len, rng)

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
