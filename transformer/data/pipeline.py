"""Per-process input pipelines: TFDS -> tokenize -> pack or pad -> shuffle -> batch.

One function per kind of task, each returning an `InputData`:
  lm_data              LM rows `inputs`, `targets`, `weights` `[batch, seq_len]` (+ `positions`,
                       `segment_ids` when packed)
  mlm_data             LM chunks for masked-LM (`targets == inputs`; the task masks them)
  seq2seq_data         `inputs` `[batch, src_len]`, `targets`, `weights` `[batch, tgt_len]` (+
                       `inputs_positions`, `inputs_segment_ids`, `targets_positions`,
                       `targets_segment_ids` when packed)
  classification_data  `inputs` `[batch, seq_len]` (BOS first, 0 = padding), `label` `[batch]`,
                       `example_weight` `[batch]` float32

Determinism: the order of examples depends only on `config.seed` (and the process index); the
training iterator is a tf.data iterator whose state is saved with every checkpoint
(`transformer.train.checkpoint`), so a resumed run sees exactly the batches an uninterrupted
run would have seen. Multi-process: each process reads its own shard of every split
(`tfds.split_for_jax_process`) and builds batches of `global_batch_size / process_count`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from typing import Iterator, Optional

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from transformer import datasets, paths
from transformer.config import ConfigError, DataConfig
from transformer.data import builders, catalog, packing  # noqa: F401 -- registers ours
from transformer.data.tokenizers import (ByteTokenizer, Tokenizer, build_tokenizer,
                                         train_sentencepiece)

# TensorFlow is only the input pipeline's engine here: keep it off any accelerator.
tf.config.set_visible_devices([], "GPU")

PACK_WINDOW = 256  # examples considered together when packing


def get_builder(cfg: DataConfig) -> tfds.core.DatasetBuilder:
  """The prepared TFDS builder for `cfg.name`: one of ours (`transformer.datasets`, built here
  the first time, offline) or a catalog dataset in `cfg.data_dir` (`transformer.data.catalog`)."""
  dataset = datasets.lookup(cfg.name)
  if dataset is None:
    return catalog.catalog_builder(cfg)
  if not dataset.builder:  # the token file
    raise ConfigError(f"--config.data.name={cfg.name} holds next-token data for "
                      "--config.model.kind=decoder_lm only; prepare it from the dataset this "
                      "kind reads instead, and train on that.")
  builder = dataset.build(cfg)
  if paths.has_scheme(builder.data_dir):  # a bucket: no local lock to take there
    builder.download_and_prepare()
  elif not os.path.isdir(builder.data_dir):
    # Two processes preparing one dataset race TFDS's final rename and the loser fails (two
    # sweep points starting together did): prepare under an OS lock, which a dead holder
    # releases, and build again once holding it, as the other may have finished meanwhile.
    with _exclusive(os.path.join(os.path.dirname(builder.data_dir), ".prepare.lock")):
      builder = dataset.build(cfg)
      builder.download_and_prepare()
  return builder


@contextlib.contextmanager
def _exclusive(lock_file: str):
  """Holds an exclusive `flock` on `lock_file` (created if absent); says so when it waits."""
  os.makedirs(os.path.dirname(lock_file), exist_ok=True)
  with open(lock_file, "a", encoding="utf-8") as handle:
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      print(f"[data] waiting for another process preparing {os.path.dirname(lock_file)}",
            flush=True)
      fcntl.flock(handle, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)


@dataclasses.dataclass
class InputData:
  """Inputs of one process: a checkpointable training iterator and the eval split.

  `next_train_batch()` returns the next training batch (numpy, per-process `batch_size`
  rows); `train_iterator` is the tf.data iterator behind it, saved with checkpoints.
  `num_classes` is set for classification.
  """
  tokenizer: Tokenizer
  train_iterator: tf.data.Iterator
  eval_dataset: tf.data.Dataset
  batch_size: int
  num_classes: Optional[int] = None

  def next_train_batch(self) -> dict[str, np.ndarray]:
    # EagerTensor._numpy: the array without .numpy()'s copy
    return {k: v._numpy() for k, v in next(self.train_iterator).items()}  # noqa: SLF001

  def eval_batches(self, max_batches: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """The eval split once, in order; the last batch is padded with zero-weight rows."""
    for i, batch in enumerate(self.eval_dataset.as_numpy_iterator()):
      if max_batches and i >= max_batches:
        return
      n = next(iter(batch.values())).shape[0]
      if n < self.batch_size:
        batch = {k: np.concatenate([v, np.zeros((self.batch_size - n,) + v.shape[1:], v.dtype)])
                 for k, v in batch.items()}
      yield batch


LMData = InputData  # the name LanguageModelTask's callers know


def per_process_batch_size(global_batch_size: int, process_count: int | None = None) -> int:
  process_count = process_count or jax.process_count()
  if global_batch_size % process_count:
    raise ConfigError(f"--config.train.batch_size={global_batch_size} is not divisible by the "
                      f"{process_count} processes; make it a multiple of {process_count}.")
  return global_batch_size // process_count


def eval_split_of(builder, cfg: DataConfig) -> str:
  """`cfg.eval_split`, or `test` when the default `validation` does not exist (lm1b, imdb)."""
  splits = builder.info.splits
  if not splits or cfg.eval_split in splits:  # no split info: mocked data accepts any split
    return cfg.eval_split
  if cfg.eval_split == "validation" and "test" in splits:
    print(f"{cfg.name} has no 'validation' split; evaluating on 'test'.", flush=True)
    return "test"
  raise ConfigError(f"--config.data.eval_split={cfg.eval_split!r} is not a split of "
                    f"{cfg.name}; it has {sorted(splits)}.")


def process_split(split: str, process_index: int | None = None,
                  process_count: int | None = None) -> str:
  """This process's disjoint, equal-size share of `split` (the whole split for one process)."""
  process_index = jax.process_index() if process_index is None else process_index
  process_count = process_count or jax.process_count()
  if process_count == 1:
    return split
  return tfds.even_splits(split, n=process_count, drop_remainder=True)[process_index]


def examples(builder, split: str, *, shuffle_seed: int | None, shuffle_buffer: int,
             process_index: int | None = None, process_count: int | None = None
             ) -> tf.data.Dataset:
  """This process's examples of `split`; with `shuffle_seed`, repeated forever and shuffled."""
  ds = builder.as_dataset(split=process_split(split, process_index, process_count),
                          shuffle_files=False)
  if shuffle_seed is not None:
    ds = ds.repeat().shuffle(shuffle_buffer, seed=shuffle_seed)
  return ds


def _process_seed(seed: int, process_index: int | None = None) -> int:
  # Each process shuffles its own shard with its own stream of randomness.
  return seed * 1_000_003 + (jax.process_index() if process_index is None else process_index)


def _map(ds: tf.data.Dataset, fn) -> tf.data.Dataset:
  return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _iterator(ds: tf.data.Dataset) -> tf.data.Iterator:
  options = tf.data.Options()
  # The SentencePiece tokenizer runs in Python (numpy_function); it is a pure function of its
  # input, so the iterator's position alone determines what comes next and may be saved.
  options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
  return iter(ds.with_options(options))


# ----------------------------------------------------------------------------- tokenizers


def tokenizer_for(cfg: DataConfig, builder, text_keys: list[str],
                  workdir: str | None = None) -> Tokenizer:
  """The configured tokenizer (`hf:` and `gpt2:` read the file they name). For
  `sentencepiece` without `spm_model`, a model trained on the training split's `text_keys`
  (source and target alike: one shared vocabulary), saved as `<workdir>/tokenizer/spm.model`
  (or under `<data_dir>/tokenizers/` without a workdir) and reused when it is there."""
  if cfg.tokenizer == "bytes":
    return ByteTokenizer()
  if cfg.tokenizer != "sentencepiece":  # hf:<tokenizer.json>, gpt2:<ranks file>
    return build_tokenizer(cfg.tokenizer)
  if cfg.spm_model:
    return build_tokenizer("sentencepiece", cfg.spm_model)
  if workdir:
    path = paths.join(workdir, "tokenizer", f"spm{cfg.spm_vocab_size}.model")
  else:
    root = cfg.data_dir or os.path.expanduser("~/tensorflow_datasets")
    name = f"{builder.name}-{builder.builder_config.name if builder.builder_config else ''}"
    path = os.path.join(root, "tokenizers", f"{name}-{'_'.join(text_keys)}-"
                        f"spm{cfg.spm_vocab_size}-{cfg.spm_train_bytes}.model")
  remote = path if paths.has_scheme(path) else ""
  if remote:  # SentencePiece reads and writes local files: work on a local copy
    path = paths.local_mirror(remote)
    if paths.exists(remote):
      paths.local_copy(remote)
    elif os.path.exists(path):  # left by an earlier run at that URL: not this run's
      os.remove(path)
  if not os.path.exists(path) and jax.process_index() == 0:
    print(f"Training a {cfg.spm_vocab_size}-piece SentencePiece vocabulary on {cfg.name} "
          f"train ({', '.join(text_keys)}) -> {path}", flush=True)
    ds = builder.as_dataset(split="train", shuffle_files=False)
    texts = (ex[k].decode("utf-8", errors="replace")
             for ex in tfds.as_numpy(ds) for k in text_keys)
    train_sentencepiece(texts, path, cfg.spm_vocab_size, cfg.spm_train_bytes)
    if remote:
      paths.upload(path, remote)
  if jax.process_count() > 1:  # the others wait for process 0's file (a shared workdir)
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices("sentencepiece vocabulary trained")
    if remote and not os.path.exists(path):
      paths.local_copy(remote)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} is missing: process 0 trained it, but this process cannot "
                            "see it. Put the workdir on a shared filesystem, or give "
                            "--config.data.spm_model (a file every process can read).")
  return build_tokenizer("sentencepiece", path)


# ----------------------------------------------------------------------------- language models


def _documents(ds: tf.data.Dataset, key: str, tokenizer, bos: bool) -> tf.data.Dataset:
  """Examples -> `[n]` int32 token vectors `[bos] + text + [eos]` (bos only if asked)."""
  pre = tf.constant([tokenizer.bos_id] if bos else [], tf.int32)
  eos = tf.constant([tokenizer.eos_id], tf.int32)
  return _map(ds, lambda ex: tf.concat([pre, tokenizer.tf_encode(ex[key]), eos], 0))


def split_documents(docs: tf.data.Dataset, piece_len: int, overlap: int) -> tf.data.Dataset:
  """Cuts each `[n]` document into pieces of at most `piece_len` tokens; consecutive pieces
  share `overlap` tokens (1 for next-token prediction, so every target is predicted once).

  Example, piece_len=4, overlap=1: `[1 2 3 4 5 6 7]` -> `[1 2 3 4]`, `[4 5 6 7]`.
  """
  stride = piece_len - overlap

  def pieces(doc):
    n = tf.shape(doc)[0]
    starts = tf.range(0, tf.maximum(n - overlap, 1), stride)
    return tf.data.Dataset.from_tensor_slices(starts).map(lambda s: doc[s:s + piece_len])

  return docs.flat_map(pieces)


def lm_rows(docs: tf.data.Dataset, seq_len: int, packing_mode: str, *, shift: bool,
            batch_size: int, bucket_lengths: tuple[int, ...] = (), shuffle_seed=None,
            shuffle_buffer: int = 1, drop_remainder: bool = True) -> tf.data.Dataset:
  """Token documents -> batched LM rows `[batch, seq_len]`.

  `shift`: targets are the inputs moved one token left (next-token prediction); otherwise
  `targets == inputs` (masked LM). `packing_mode`: concat (cut the document stream; rows
  cross documents), pack (segment ids and positions) or pad (one piece per row).
  """
  extra = 1 if shift else 0
  if packing_mode == "concat":
    rows = packing.concat_and_chunk(docs, seq_len + extra)
  else:
    rows = split_documents(docs, seq_len + extra, extra)
  rows = rows.map(lambda t: {"inputs": t[:-1], "targets": t[1:]} if shift
                  else {"inputs": t, "targets": t})
  lengths = {"inputs": seq_len, "targets": seq_len}
  if packing_mode == "pack":
    rows = packing.pack_dataset(rows, lengths, PACK_WINDOW).map(lambda r: {
        "inputs": r["inputs"], "targets": r["targets"],
        "segment_ids": r["inputs_segment_ids"], "positions": r["inputs_positions"]})
  if shuffle_seed is not None:
    rows = rows.shuffle(shuffle_buffer, seed=shuffle_seed + 1)
  if packing_mode == "pad":
    batches = packing.pad_batch(rows, batch_size, lengths, bucket_lengths, drop_remainder)
  else:
    batches = rows.batch(batch_size, drop_remainder=drop_remainder)
  return batches.map(lambda b: {**b, "weights": tf.cast(b["targets"] != 0, tf.float32)})


def _lm_like_data(cfg: DataConfig, global_batch_size: int, seed: int, workdir, shift: bool
                  ) -> InputData:
  batch_size = per_process_batch_size(global_batch_size)
  builder = get_builder(cfg)
  key = catalog.text_key(builder, cfg)
  tokenizer = tokenizer_for(cfg, builder, [key], workdir)
  eval_split = eval_split_of(builder, cfg)
  process_seed = _process_seed(seed)
  bos = cfg.packing != "concat"  # a piece that starts a document starts with BOS

  docs = _documents(examples(builder, "train", shuffle_seed=process_seed,
                             shuffle_buffer=cfg.shuffle_buffer), key, tokenizer, bos)
  train = lm_rows(docs, cfg.seq_len, cfg.packing, shift=shift, batch_size=batch_size,
                  bucket_lengths=cfg.bucket_lengths, shuffle_seed=process_seed,
                  shuffle_buffer=cfg.shuffle_buffer).prefetch(2)
  eval_docs = _documents(examples(builder, eval_split, shuffle_seed=None, shuffle_buffer=1),
                         key, tokenizer, bos)
  eval_ds = lm_rows(eval_docs, cfg.seq_len, cfg.packing, shift=shift, batch_size=batch_size,
                    drop_remainder=False)
  return InputData(tokenizer=tokenizer, train_iterator=_iterator(train), eval_dataset=eval_ds,
                   batch_size=batch_size)


def lm_data(cfg: DataConfig, global_batch_size: int, seed: int,
            workdir: str | None = None) -> InputData:
  """Next-token-prediction batches: `inputs`, `targets`, `weights` `[batch, seq_len]`, plus
  `positions` and `segment_ids` with `data.packing=pack`."""
  return _lm_like_data(cfg, global_batch_size, seed, workdir, shift=True)


def mlm_data(cfg: DataConfig, global_batch_size: int, seed: int,
             workdir: str | None = None) -> InputData:
  """Chunks of text for masked-LM: `inputs == targets` `[batch, seq_len]`, `weights` (0 on
  padding), plus `positions`, `segment_ids` when packed. The task picks and masks tokens."""
  return _lm_like_data(cfg, global_batch_size, seed, workdir, shift=False)


# ----------------------------------------------------------------------------- seq2seq


def seq2seq_data(cfg: DataConfig, global_batch_size: int, seed: int,
                 workdir: str | None = None) -> InputData:
  """Source/target pairs: `inputs` `[batch, src_len]` (source + EOS), `targets`, `weights`
  `[batch, tgt_len]` (target + EOS; the task shifts it right behind BOS for the decoder).

  `data.packing=pack` adds `inputs_positions`, `inputs_segment_ids`, `targets_positions`,
  `targets_segment_ids` (several pairs per row; pair k has segment k on both sides);
  `pad` gives one pair per row (bucketed by `data.bucket_boundaries`). Longer sequences are
  truncated to `src_len` / `tgt_len`.
  """
  if cfg.packing == "concat":
    raise ConfigError("--config.data.packing='concat' is for language models; seq2seq needs "
                      "'pack' (several pairs per row) or 'pad' (one pair per row).")
  batch_size = per_process_batch_size(global_batch_size)
  builder = get_builder(cfg)
  src_key = catalog.text_key(builder, cfg)
  tgt_key = catalog.target_key(builder, cfg, "text")
  tokenizer = tokenizer_for(cfg, builder, [src_key, tgt_key], workdir)
  eval_split = eval_split_of(builder, cfg)
  process_seed = _process_seed(seed)
  eos = tf.constant([tokenizer.eos_id], tf.int32)
  lengths = {"inputs": cfg.src_len, "targets": cfg.tgt_len}

  def encode(ex):
    return {"inputs": tf.concat([tokenizer.tf_encode(ex[src_key]), eos], 0)[:cfg.src_len],
            "targets": tf.concat([tokenizer.tf_encode(ex[tgt_key]), eos], 0)[:cfg.tgt_len]}

  def rows(ds, training: bool):
    ds = _map(ds, encode)
    if cfg.packing == "pack":
      ds = packing.pack_dataset(ds, lengths, PACK_WINDOW)
    if training:
      ds = ds.shuffle(cfg.shuffle_buffer, seed=process_seed + 1)
    if cfg.packing == "pad":
      ds = packing.pad_batch(ds, batch_size, lengths, cfg.bucket_lengths if training else (),
                             drop_remainder=training)
    else:
      ds = ds.batch(batch_size, drop_remainder=training)
    return ds.map(lambda b: {**b, "weights": tf.cast(b["targets"] != 0, tf.float32)})

  train = rows(examples(builder, "train", shuffle_seed=process_seed,
                        shuffle_buffer=cfg.shuffle_buffer), True).prefetch(2)
  eval_ds = rows(examples(builder, eval_split, shuffle_seed=None, shuffle_buffer=1), False)
  return InputData(tokenizer=tokenizer, train_iterator=_iterator(train), eval_dataset=eval_ds,
                   batch_size=batch_size)


# ----------------------------------------------------------------------------- classification


def classification_data(cfg: DataConfig, global_batch_size: int, seed: int,
                        workdir: str | None = None) -> InputData:
  """Text with a class label: `inputs` `[batch, seq_len]` (BOS, usable as a [CLS] position,
  then the text truncated to fit; 0 = padding), `label` `[batch]` int32 and `example_weight`
  `[batch]` float32 (1; the zero rows that pad a last eval batch have 0). `num_classes` is
  set on the returned `InputData`."""
  if cfg.packing != "pad":
    raise ConfigError(f"--config.data.packing={cfg.packing!r}: classification has one label per "
                      "example, so it needs --config.data.packing=pad.")
  batch_size = per_process_batch_size(global_batch_size)
  builder = get_builder(cfg)
  text = catalog.text_key(builder, cfg)
  label = catalog.target_key(builder, cfg, "label")
  num_classes = builder.info.features[label].num_classes
  tokenizer = tokenizer_for(cfg, builder, [text], workdir)
  eval_split = eval_split_of(builder, cfg)
  process_seed = _process_seed(seed)
  bos = tf.constant([tokenizer.bos_id], tf.int32)

  def encode(ex):
    return {"inputs": tf.concat([bos, tokenizer.tf_encode(ex[text])], 0)[:cfg.seq_len],
            "label": tf.cast(ex[label], tf.int32),
            "example_weight": tf.constant(1.0, tf.float32)}

  def batches(ds, training: bool):
    ds = _map(ds, encode)
    if training and cfg.bucket_lengths:
      full = cfg.seq_len
      bounds = tf.constant([b for b in cfg.bucket_lengths if b < full] + [full], tf.int32)

      def bucket(ex):
        n = tf.shape(ex["inputs"])[0]
        return tf.cast(tf.reduce_sum(tf.cast(bounds < n, tf.int32)), tf.int64)

      def batch_bucket(key, group):
        length = tf.cast(tf.reshape(tf.gather(bounds, key), [1]), tf.int64)
        return group.padded_batch(batch_size, padded_shapes={
            "inputs": length, "label": [], "example_weight": []}, drop_remainder=True)
      return ds.group_by_window(bucket, batch_bucket, window_size=batch_size)
    return ds.padded_batch(batch_size, padded_shapes={
        "inputs": [cfg.seq_len], "label": [], "example_weight": []}, drop_remainder=training)

  train = batches(examples(builder, "train", shuffle_seed=process_seed,
                           shuffle_buffer=cfg.shuffle_buffer), True).prefetch(2)
  eval_ds = batches(examples(builder, eval_split, shuffle_seed=None, shuffle_buffer=1), False)
  return InputData(tokenizer=tokenizer, train_iterator=_iterator(train), eval_dataset=eval_ds,
                   batch_size=batch_size, num_classes=num_classes)


# ----------------------------------------------------------------------------- images


def image_data(cfg: DataConfig, global_batch_size: int, seed: int,
               workdir: str | None = None) -> InputData:
  """Labelled images (`sklearn_digits`, or a TFDS image catalog dataset such as mnist or
  cifar10 when prepared): `inputs` `[batch, height, width, channels]` float32 in [0, 1],
  `label` `[batch]` int32, `example_weight` `[batch]` float32 (0 on the rows padding a last
  eval batch). `tokenizer` is None; `num_classes` is set."""
  del workdir  # nothing is built per run
  batch_size = per_process_batch_size(global_batch_size)
  builder = get_builder(cfg)
  image = cfg.inputs_key or "image"
  label = cfg.targets_key or "label"
  if image not in builder.info.features or label not in builder.info.features:
    raise ConfigError(f"--config.data.name={cfg.name!r} has features "
                      f"{sorted(builder.info.features)}; set data.inputs_key (image) and "
                      "data.targets_key (label).")
  num_classes = builder.info.features[label].num_classes
  eval_split = eval_split_of(builder, cfg)

  def encode(ex):
    return {"inputs": tf.cast(ex[image], tf.float32) / 255.0,
            "label": tf.cast(ex[label], tf.int32),
            "example_weight": tf.constant(1.0, tf.float32)}

  train = _map(examples(builder, "train", shuffle_seed=_process_seed(seed),
                        shuffle_buffer=cfg.shuffle_buffer), encode)
  train = train.batch(batch_size, drop_remainder=True).prefetch(2)
  eval_ds = _map(examples(builder, eval_split, shuffle_seed=None, shuffle_buffer=1),
                 encode).batch(batch_size)
  return InputData(tokenizer=None, train_iterator=_iterator(train), eval_dataset=eval_ds,
                   batch_size=batch_size, num_classes=num_classes)
