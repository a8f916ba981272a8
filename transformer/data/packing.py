"""Turning streams of tokenized documents into fixed-length model inputs."""

import tensorflow as tf


def concat_and_chunk(docs: tf.data.Dataset, chunk_len: int) -> tf.data.Dataset:
  """Concatenates `[n_i]` int32 token vectors and cuts the stream into `[chunk_len]` chunks.

  The tail that does not fill a last chunk is dropped. Example with chunk_len=3:
  `[1, 2], [3, 4, 5, 6], [7]` -> `[1, 2, 3], [4, 5, 6]` (and `[7]` is dropped).
  """
  return docs.rebatch(chunk_len, drop_remainder=True)


def pack_dataset(ds: tf.data.Dataset, max_lengths: dict[str, int], window: int = 256
                 ) -> tf.data.Dataset:
  """Packs variable-length examples into fixed-length rows, first fit within a window.

  Args:
    ds: examples `{feature: [n] int32}` for the features in `max_lengths` (other features are
      dropped); token 0 is padding and must not occur inside an example. Each example's
      feature is cut to `max_lengths[feature]` tokens first.
    max_lengths: the row length of each feature, e.g. `{"inputs": 64, "targets": 64}`.
    window: examples considered together; each goes to the first row of its window where all
      its features still fit.

  Returns:
    Rows with, for each feature `f`: `f` `[max_lengths[f]]` (the tokens, 0-padded),
    `f_segment_ids` (1, 2, ... for the examples in the row, 0 on padding) and `f_positions`
    (0, 1, ... restarting in each example). Models mask attention with the segment ids so that
    it never crosses examples.

  Worked example, one feature of length 5, window >= 4, examples in this order:
    [1 2 3], [4 5], [6 7 8 9], [10]
  `[4 5]` fits after `[1 2 3]`; `[6 7 8 9]` does not, so it opens row 2, where `[10]` joins it:
    tokens       [1 2 3 4 5]  [6 7 8 9 10]
    segment_ids  [1 1 1 2 2]  [1 1 1 1  2]
    positions    [0 1 2 0 1]  [0 1 2 3  0]
  Rows are emitted in the order they were opened; the window's last rows may be partly empty.
  """
  keys = sorted(max_lengths)
  limits = tf.constant([max_lengths[k] for k in keys], tf.int32)

  def with_lengths(ex):
    out = {k: ex[k][:max_lengths[k]] for k in keys}
    out["_lengths"] = tf.stack([tf.shape(out[k])[0] for k in keys])
    return out

  def pack_window(batch):
    return _pack_window(batch, keys, max_lengths, limits)

  return (ds.map(with_lengths)
          .padded_batch(window, padded_shapes={**{k: [None] for k in keys}, "_lengths": [None]})
          .map(pack_window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .unbatch())


def _first_fit(lengths: tf.Tensor, limits: tf.Tensor):
  """First fit of a window's examples: `lengths` `[n, F]` (each example's length per feature)
  into rows of `limits` `[F]`. Returns `(rows, offsets, segments, num_rows)`: each example's
  row `[n]`, its start in that row per feature `[n, F]`, its segment id there `[n]`, and how
  many rows were opened."""
  n = tf.shape(lengths)[0]

  def place(i, row_fill, row_segments, rows, offsets, segments):
    fits = tf.reduce_all(row_fill + lengths[i] <= limits, axis=1)  # [n]
    r = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)  # first row that fits
    offsets = offsets.write(i, row_fill[r])
    segments = segments.write(i, row_segments[r] + 1)
    rows = rows.write(i, r)
    row_fill = tf.tensor_scatter_nd_add(row_fill, [[r]], lengths[i][None])
    row_segments = tf.tensor_scatter_nd_add(row_segments, [[r]], [1])
    return i + 1, row_fill, row_segments, rows, offsets, segments

  _, _, row_segments, rows, offsets, segments = tf.while_loop(
      lambda i, *_: i < n, place,
      (0, tf.zeros_like(lengths), tf.zeros([n], tf.int32),
       tf.TensorArray(tf.int32, size=n), tf.TensorArray(tf.int32, size=n),
       tf.TensorArray(tf.int32, size=n)))
  num_rows = tf.reduce_sum(tf.cast(row_segments > 0, tf.int32))
  return rows.stack(), offsets.stack(), segments.stack(), num_rows


def _pack_window(batch: dict, keys: list[str], max_lengths: dict[str, int],
                 limits: tf.Tensor) -> dict:
  """One window of examples (`batch`: each feature `[n, max_in_window]`, 0-padded by
  `padded_batch`, and `_lengths` `[n, F]`) packed into `[num_rows, ...]` rows."""
  lengths = batch["_lengths"]  # [n, F]
  rows, offsets, segments, num_rows = _first_fit(lengths, limits)
  out = {}
  for f, k in enumerate(keys):
    tokens = batch[k]  # [n, max_in_window], 0-padded by padded_batch
    pos = tf.broadcast_to(tf.range(tf.shape(tokens)[1])[None], tf.shape(tokens))
    real = pos < lengths[:, f:f + 1]
    row_of = tf.broadcast_to(rows[:, None], tf.shape(tokens))
    col = offsets[:, f:f + 1] + pos
    index = tf.stack([tf.boolean_mask(row_of, real), tf.boolean_mask(col, real)], axis=1)
    shape = tf.stack([num_rows, max_lengths[k]])
    seg = tf.broadcast_to(segments[:, None], tf.shape(tokens))
    out[k] = tf.scatter_nd(index, tf.boolean_mask(tokens, real), shape)
    out[f"{k}_segment_ids"] = tf.scatter_nd(index, tf.boolean_mask(seg, real), shape)
    out[f"{k}_positions"] = tf.scatter_nd(index, tf.boolean_mask(pos, real), shape)
  return out  # [num_rows, ...] for this window


def truncate(ds: tf.data.Dataset, max_lengths: dict[str, int]) -> tf.data.Dataset:
  """Cuts each feature in `max_lengths` to at most that many tokens."""
  return ds.map(lambda ex: {**ex, **{k: ex[k][:n] for k, n in max_lengths.items()}})


def pad_batch(ds: tf.data.Dataset, batch_size: int, max_lengths: dict[str, int],
              bucket_lengths: tuple[int, ...] = (), drop_remainder: bool = True
              ) -> tf.data.Dataset:
  """Batches examples padded with 0, one example per row.

  Without `bucket_lengths` every batch is padded to `max_lengths`. With them (e.g. `(16, 32)`
  and `max_lengths={"inputs": 64}`), an example goes to the bucket of the smallest length
  (16, 32 or the full 64) that holds its longest feature, and each batch holds examples of
  one bucket, padded to that length for every feature (capped at its own max length), so
  short examples waste little compute. Feature shapes: `[batch, length]`.
  """
  keys = sorted(max_lengths)
  full = max(max_lengths.values())
  bounds = [b for b in bucket_lengths if b < full] + [full]
  if len(bounds) == 1:
    return ds.padded_batch(batch_size, padded_shapes={k: [max_lengths[k]] for k in keys},
                           drop_remainder=drop_remainder)
  bounds_t = tf.constant(bounds, tf.int32)

  def bucket_of(ex):
    longest = tf.reduce_max(tf.stack([tf.shape(ex[k])[0] for k in keys]))
    return tf.cast(tf.reduce_sum(tf.cast(bounds_t < longest, tf.int32)), tf.int64)

  def batch_bucket(key, group):
    length = tf.gather(bounds_t, key)
    shapes = {k: tf.cast(tf.reshape(tf.minimum(length, max_lengths[k]), [1]), tf.int64)
              for k in keys}
    return group.padded_batch(batch_size, padded_shapes=shapes, drop_remainder=drop_remainder)

  return ds.map(lambda ex: {k: ex[k] for k in keys}).group_by_window(
      bucket_of, batch_bucket, window_size=batch_size)
