"""Metric writers: JSON lines and TensorBoard event files, plus a console progress line."""

from __future__ import annotations

import json
import os
import time


class MetricWriter:
  """Writes `{"step", "split", ...metrics}` lines to `<workdir>/metrics.jsonl` and scalars to
  TensorBoard under `<workdir>/tensorboard/<split>`. Only process 0 writes."""

  def __init__(self, workdir: str):
    import jax  # noqa: PLC0415 -- as in `log`
    self.enabled = jax.process_index() == 0
    self.workdir = workdir
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = {}
    self._tb_dir = os.path.join(workdir, "tensorboard")

  def write(self, step: int, split: str, metrics: dict) -> None:
    if not self.enabled:
      return
    row = {"step": int(step), "split": split, "time": time.time()}
    row.update({k: v if isinstance(v, str) else float(v) for k, v in metrics.items()})
    with open(self.path, "a") as f:
      f.write(json.dumps(row) + "\n")
    import tensorflow as tf  # noqa: PLC0415 -- only where metrics are written (bench imports no TF)
    if split not in self._tb:
      self._tb[split] = tf.summary.create_file_writer(os.path.join(self._tb_dir, split))
    with self._tb[split].as_default():
      for k, v in metrics.items():
        if isinstance(v, str):  # e.g. the BLEU signature
          tf.summary.text(k, v, step=int(step))
        else:
          tf.summary.scalar(k, float(v), step=int(step))
    self._tb[split].flush()

  def write_text(self, step: int, tag: str, text: str) -> None:
    """A text summary (TensorBoard's Text tab) under `<workdir>/tensorboard/samples`."""
    if not self.enabled:
      return
    import tensorflow as tf  # noqa: PLC0415 -- as in `write`
    if "samples" not in self._tb:
      self._tb["samples"] = tf.summary.create_file_writer(os.path.join(self._tb_dir, "samples"))
    with self._tb["samples"].as_default():
      tf.summary.text(tag, text, step=int(step))
    self._tb["samples"].flush()

  def close(self) -> None:
    for w in self._tb.values():
      w.close()


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def log(message: str) -> None:
  """Prints on process 0 only, flushed so progress shows under pipes and schedulers."""
  import jax  # noqa: PLC0415 -- the sweep runner uses this module and must not import JAX
  if jax.process_index() == 0:
    print(message, flush=True)
