"""Per-process input pipelines: TFDS -> tokenize -> pack -> shuffle -> batch.

Everything is seeded from the config's seed, and the training iterator is a tf.data iterator
whose state is saved with every checkpoint (`transformer.train.checkpoint`), so a resumed run
sees exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from transformer.config import DataConfig
from transformer.data import builders, packing
from transformer.data.tokenizers import ByteTokenizer, build_tokenizer

# TensorFlow is only the input pipeline's engine here: keep it off any accelerator.
tf.config.set_visible_devices([], "GPU")


def get_builder(cfg: DataConfig) -> tfds.core.DatasetBuilder:
  """The prepared TFDS builder for `cfg.name`, building it first if it is one of ours."""
  if cfg.name == "local_text":
    suffixes = tuple(s.strip() for s in cfg.suffixes.split(",") if s.strip())
    builder = builders.local_text_builder(cfg.source_dir, suffixes, cfg.validation_percent,
                                          cfg.data_dir or None)
    builder.download_and_prepare()
    return builder
  raise ValueError(f"Unknown dataset {cfg.name!r}; choose 'local_text'.")


@dataclasses.dataclass
class LMData:
  """Language-model inputs for one process.

  `train` yields batches `{"inputs", "targets": [batch, seq_len] int32, "weights": float32}`
  forever; `train_iterator` is the checkpointable tf.data iterator behind it.
  """
  tokenizer: ByteTokenizer
  train_iterator: tf.data.Iterator
  eval_dataset: tf.data.Dataset
  batch_size: int

  def next_train_batch(self) -> dict[str, np.ndarray]:
    return {k: v._numpy() for k, v in next(self.train_iterator).items()}

  def eval_batches(self, max_batches: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """The eval split once, in order; the last batch is padded with zero-weight rows."""
    for i, batch in enumerate(self.eval_dataset.as_numpy_iterator()):
      if max_batches and i >= max_batches:
        return
      n = batch["inputs"].shape[0]
      if n < self.batch_size:
        batch = {k: np.concatenate([v, np.zeros((self.batch_size - n,) + v.shape[1:], v.dtype)])
                 for k, v in batch.items()}
      yield batch


def _tokenized(builder, split: str, tokenizer, *, shuffle_seed: int | None,
               shuffle_buffer: int) -> tf.data.Dataset:
  split = tfds.split_for_jax_process(split)
  ds = builder.as_dataset(split=split, shuffle_files=False)
  if shuffle_seed is not None:
    ds = ds.repeat().shuffle(shuffle_buffer, seed=shuffle_seed)
  eos = tf.constant([tokenizer.eos_id], tf.int32)
  return ds.map(lambda ex: tf.concat([tokenizer.tf_encode(ex["text"]), eos], 0),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def lm_data(cfg: DataConfig, global_batch_size: int, seed: int) -> LMData:
  """Builds this process's training and eval pipelines for a language model."""
  if global_batch_size % jax.process_count():
    raise ValueError(f"train.batch_size={global_batch_size} is not divisible by the "
                     f"{jax.process_count()} processes.")
  batch_size = global_batch_size // jax.process_count()
  tokenizer = build_tokenizer(cfg.tokenizer)
  builder = get_builder(cfg)
  if cfg.eval_split not in builder.info.splits:
    raise ValueError(f"data.eval_split={cfg.eval_split!r} is not a split of {cfg.name}; "
                     f"it has {sorted(builder.info.splits)}.")
  chunk = cfg.seq_len + 1
  # Each process shuffles its own shard with its own stream of randomness.
  process_seed = seed * 1_000_003 + jax.process_index()

  docs = _tokenized(builder, "train", tokenizer, shuffle_seed=process_seed,
                    shuffle_buffer=cfg.shuffle_buffer)
  train = (packing.concat_and_chunk(docs, chunk)
           .shuffle(cfg.shuffle_buffer, seed=process_seed + 1)
           .map(packing.lm_example)
           .batch(batch_size, drop_remainder=True)
           .prefetch(2))

  eval_docs = _tokenized(builder, cfg.eval_split, tokenizer, shuffle_seed=None,
                         shuffle_buffer=cfg.shuffle_buffer)
  eval_ds = (packing.concat_and_chunk(eval_docs, chunk)
             .map(packing.lm_example)
             .batch(batch_size))
  return LMData(tokenizer=tokenizer, train_iterator=iter(train), eval_dataset=eval_ds,
                batch_size=batch_size)
