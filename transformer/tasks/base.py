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
`loss_sums` returns `(loss sum, weight sum, aux sums)`: the aux sums (`train_aux`, `{}` by
default) are metrics the forward pass computes, summed over the same weighted tokens; the
train step divides them by the weight and the train row logs them beside the loss.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer.config import ConfigError, ExperimentConfig, ModelConfig
from transformer.data.facts import FIRST_REGULAR_ID, DataFacts
from transformer.tasks.losses import chunked_cross_entropy_sums, cross_entropy_sums
from transformer.weights import init_from
from transformer.weights.hf_tokenizer import id_offset


class Task(Protocol):
  config: ExperimentConfig  # with the model fields the data sets (vocab_size, ...) filled in
  facts: DataFacts
  model: nn.Module

  def init_params(self, rng: jax.Array) -> Any: ...
  # The same params still wrapped in their logical axis names, for the mesh shardings.
  def init_boxed_params(self, rng: jax.Array) -> Any: ...
  def loss_sums(self, params, batch: dict, rng: jax.Array
                ) -> tuple[jax.Array, jax.Array, dict]: ...
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
  (matching parameters of another run, see `transformer.weights.init_from`), one `apply` for
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
    """The `ModelConfig` fields the data decides (`transformer.config.FROM_DATA`)."""
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
          id_offset=id_offset(self.facts.tokenizer), model=self.config.model,
          tokenizer=self.facts.tokenizer)

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

  def train_aux(self, forward: Forward) -> dict:
    """Metrics of the forward pass for the train row: `{name: scalar sum over the weighted
    tokens}`, which the train step divides by the loss's weight sum (`steps.make_train_step`).
    None by default; a task adds one here (or returns it from its `loss_sums`) and the train
    row, the log line and every writer show it with nothing else to change."""
    del forward
    return {}

  def loss_sums(self, params, batch, rng) -> tuple[jax.Array, jax.Array, dict]:
    """(loss sum, weight sum, aux sums) of the training loss on `batch`, dropout keyed by
    `rng` (none when None)."""
    forward = self.train_forward(params, batch, rng)
    return (*self.train_loss(forward), self.train_aux(forward))


def random_tokens(facts: DataFacts, rows: int, length: int,
                   rng: np.random.Generator) -> np.ndarray:
  """`[rows, length]` int32 regular token ids of the data's vocabulary (no pad, bos, eos)."""
  return rng.integers(FIRST_REGULAR_ID, facts.vocab_size, (rows, length), np.int32)


class TokenVocabulary:
  """For tasks whose model reads and writes the tokenizer's ids and nothing else: the model's
  vocabulary is the tokenizer's, and without a dataset the config's."""

  @classmethod
  def model_fields(cls, config, facts):
    return {"vocab_size": facts.vocab_size}

  @classmethod
  def facts_from_config(cls, config):
    return DataFacts(vocab_size=config.model.vocab_size)
