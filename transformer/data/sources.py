"""Each kind's data (`Kind.data` in `transformer.kinds`): `(config, workdir) -> (data, facts)`.

`data` is the pipeline (`transformer.data.pipeline.InputData`: `next_train_batch()`,
`eval_batches(n)`, the checkpointed `train_iterator`); `facts` (`DataFacts`) is all a task is
told about it. `workdir` keeps what the data builds for a run (a trained SentencePiece
vocabulary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer.data.facts import DataFacts

if TYPE_CHECKING:
  from transformer.data import pipeline

# `data.name` of a token file (`transformer.data.token_file`): read without TensorFlow.
TOKEN_FILE = "token_file"


def _pipeline():
  """The tf.data pipelines, imported where a TFDS dataset is read (TensorFlow comes with them)."""
  from transformer.data import pipeline
  return pipeline


def _args(config) -> tuple:
  return config.data, config.train.batch_size, config.seed


def lm(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  if config.data.name == TOKEN_FILE:
    return token_file_lm(config)
  data = _pipeline().lm_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def masked_lm(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = _pipeline().mlm_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def seq2seq(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = _pipeline().seq2seq_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def classification(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = _pipeline().classification_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer, num_classes=data.num_classes)


def images(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  """Labelled images; their shape is read off the first eval batch."""
  data = _pipeline().image_data(*_args(config), workdir=workdir)
  height, width, channels = next(iter(data.eval_batches(1)))["inputs"].shape[1:]
  return data, DataFacts(num_classes=data.num_classes,
                         image_shape=(int(height), int(width), int(channels)))


def token_file_lm(config) -> tuple[object, DataFacts]:
  """Next-token batches from the token file in `data.source_dir`; no TensorFlow."""
  import jax  # the process index and count
  from transformer.data import token_file
  cfg = config.data
  data, _ = token_file.token_file_data(cfg.source_dir, cfg.seq_len, config.train.batch_size,
                                       config.seed, cfg.eval_split, jax.process_index(),
                                       jax.process_count())
  return data, DataFacts.of_tokenizer(data.tokenizer)
