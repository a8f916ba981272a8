"""Each kind's data (`Kind.data` in `transformer.kinds`): `(config, workdir) -> (data, facts)`.

`data` is the pipeline (`transformer.data.pipeline.InputData`: `next_train_batch()`,
`eval_batches(n)`, the checkpointed `train_iterator`); `facts` (`DataFacts`) is all a task is
told about it. `workdir` keeps what the data builds for a run (a trained SentencePiece
vocabulary).
"""

from __future__ import annotations

from transformer.data import pipeline
from transformer.data.facts import DataFacts


def _args(config) -> tuple:
  return config.data, config.train.batch_size, config.seed


def lm(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = pipeline.lm_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def masked_lm(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = pipeline.mlm_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def seq2seq(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = pipeline.seq2seq_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer)


def classification(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  data = pipeline.classification_data(*_args(config), workdir=workdir)
  return data, DataFacts.of_tokenizer(data.tokenizer, num_classes=data.num_classes)


def images(config, workdir: str | None = None) -> tuple[pipeline.InputData, DataFacts]:
  """Labelled images; their shape is read off the first eval batch."""
  data = pipeline.image_data(*_args(config), workdir=workdir)
  height, width, channels = next(iter(data.eval_batches(1)))["inputs"].shape[1:]
  return data, DataFacts(num_classes=data.num_classes,
                         image_shape=(int(height), int(width), int(channels)))
