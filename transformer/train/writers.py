"""Metric writers: JSON lines and TensorBoard event files, plus a console progress line.

The event files are written by the `tensorboard` package itself (its event file writer and
protos), not through `tf.summary`: writing metrics needs no TensorFlow. Scalars and text are
stored as `tf.summary.scalar` / `tf.summary.text` store them (a tensor with the scalars or
text plugin's metadata), so TensorBoard shows them in its Scalars and Text tabs; the config
goes to its HParams tab (`MetricWriter.write_hparams`).

A workdir on a bucket (`gs://...`, see `transformer.paths`) gets the same files through epath:
`metrics.jsonl` is written again whole on each write and an event file on each flush (objects
cannot be appended to), so both can be read while the run goes on.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from transformer import paths
from transformer.config import flat_config


class MetricWriter:
  """Writes `{"step", "split", ...metrics}` lines to `<workdir>/metrics.jsonl` and scalars to
  TensorBoard under `<workdir>/tensorboard/<split>`, and the same rows, at the same steps, to
  each of `sinks` (objects with `log(step, split, metrics)` and `close()`, e.g. wandb: see
  transformer/train/wandb_writer.py), as clu's MultiWriter fans out. Only process 0 writes."""

  def __init__(self, workdir: str, sinks=()):
    import jax  # as in `log`
    self.enabled = jax.process_index() == 0
    self.sinks = list(sinks) if self.enabled else []
    self.workdir = workdir
    self.path = paths.join(workdir, "metrics.jsonl")
    self._tb = {}
    self._tb_dir = paths.join(workdir, "tensorboard")

  def start_at(self, step: int) -> None:
    """Drops from metrics.jsonl the rows of steps after `step`, the step the run (re)starts
    from: a run killed after its last checkpoint wrote rows that it now runs again (and may
    not reach again, if its num_steps or eval_every changed), so every (split, step) stays
    once in the file, for every reader. The file is rewritten atomically, only when there is
    something to drop (or a last line torn by the kill); every other line is kept as it was.
    A sink that says which step it holds up to (`last_step`) then gets the kept rows after it
    (`_replay`)."""
    if not self.enabled or not paths.exists(self.path):
      return
    lines = paths.read_text(self.path).splitlines(keepends=True)
    torn = bool(lines) and not lines[-1].endswith("\n")
    kept = [line for line in lines[:len(lines) - torn] if not _row_after(line, step)]
    dropped = len(lines) - torn - len(kept)
    if dropped or torn:
      paths.write_text(self.path, "".join(kept))
    if dropped:
      log(f"Resumed at step {step}: dropped {dropped} row(s) of later steps from "
          f"{self.path} (written before the restart; this run writes them again).")
    for sink in self.sinks:
      self._replay(sink, kept, step)

  def _replay(self, sink, lines: list[str], step: int) -> None:
    """Sends `sink` the rows of `lines` (metrics.jsonl's) of steps after `sink.last_step`: what
    an earlier process wrote to metrics.jsonl but the sink never got (wandb writes its rows
    about once a second and a step's row once the next begins, so a kill -9 right after a
    checkpoint loses the rows up to it). A sink without `last_step` gets nothing again."""
    held = getattr(sink, "last_step", None)
    if held is None:
      return
    rows = [r for r in map(_row, lines) if r is not None and r["step"] > held]
    rows = sorted((r for r in rows if isinstance(r.get("split"), str)),
                  key=lambda r: r["step"])  # stable: a step's rows keep their order
    for row in rows:
      sink.log(row["step"], row["split"],
               {k: v for k, v in row.items() if k not in ("step", "split", "time")})
    if rows:
      log(f"Resumed at step {step}: sent {type(sink).__name__} the {len(rows)} row(s) of "
          f"{self.path} after step {held}, the last it held (steps {rows[0]['step']} to "
          f"{rows[-1]['step']}).")

  def write(self, step: int, split: str, metrics: dict) -> None:
    if not self.enabled:
      return
    row = {"step": int(step), "split": split, "time": time.time()}
    row.update({k: v if isinstance(v, str) else float(v) for k, v in metrics.items()})
    paths.append_text(self.path, json.dumps(row) + "\n")
    events = self._events(split)
    for k, v in metrics.items():
      events.add(k, v, int(step))  # a str (e.g. the BLEU signature) is text, the rest scalars
    events.flush()
    for sink in self.sinks:
      sink.log(int(step), split, metrics)

  def write_text(self, step: int, tag: str, text: str) -> None:
    """A text summary (TensorBoard's Text tab) under `<workdir>/tensorboard/samples`."""
    if not self.enabled:
      return
    events = self._events("samples")
    events.add(tag, text, int(step))
    events.flush()

  def write_hparams(self, config: dict, trial_id: str) -> None:
    """The config as TensorBoard hparams (its HParams tab): a session start summary in
    `<workdir>/tensorboard`, the parent of the train and eval runs, with `hparam_values`."""
    if not self.enabled:
      return
    events = EventWriter(self._tb_dir)
    events.add_summary(hparams_summary(hparam_values(config), trial_id))
    events.close()

  def _events(self, split: str) -> "EventWriter":
    if split not in self._tb:
      self._tb[split] = EventWriter(paths.join(self._tb_dir, split))
    return self._tb[split]

  def close(self) -> None:
    for w in self._tb.values():
      w.close()
    for sink in self.sinks:
      sink.close()
    self.sinks = []


def _row(line: str):
  """The metrics row (a dict with an int `step`) the JSON line `line` holds, or None."""
  try:
    row = json.loads(line)
  except ValueError:
    return None
  ok = (isinstance(row, dict) and isinstance(row.get("step"), int)
        and not isinstance(row["step"], bool))
  return row if ok else None


def _row_after(line: str, step: int) -> bool:
  """Whether the JSON line `line` is a metrics row of a step after `step`."""
  row = _row(line)
  return row is not None and row["step"] > step


class EventWriter:
  """One TensorBoard run directory: scalar and text summaries, as `tf.summary` writes them."""

  def __init__(self, logdir: str):
    # Imported here, once per run directory: the sweep runner uses this module and imports
    # neither tensorboard nor JAX.
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.plugins.text import metadata as text_metadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util
    paths.makedirs(logdir)
    self._writer = (_BucketEventFileWriter(logdir) if paths.has_scheme(logdir)
                    else EventFileWriter(logdir))
    self._event, self._tensor = event_pb2.Event, tensor_util.make_tensor_proto
    self._text_meta = text_metadata.create_summary_metadata(display_name=None, description=None)
    self._scalar_meta = scalar_metadata.create_summary_metadata(display_name=None,
                                                                description=None)

  def add(self, tag: str, value, step: int) -> None:
    """`value`: a str (Text tab) or a number (Scalars tab, float32)."""
    if isinstance(value, str):
      tensor, meta = self._tensor(np.array(value.encode("utf-8"), dtype=object)), self._text_meta
    else:
      tensor, meta = self._tensor(np.float32(value)), self._scalar_meta
    event = self._event(wall_time=time.time(), step=step)
    event.summary.value.add(tag=tag, tensor=tensor, metadata=meta)
    self._writer.add_event(event)

  def add_summary(self, summary) -> None:
    """A whole `summary_pb2.Summary` (e.g. `hparams_summary`), at step 0."""
    event = self._event(wall_time=time.time(), step=0)
    event.summary.CopyFrom(summary)
    self._writer.add_event(event)

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def hparam_values(config: dict, prefix: str = "") -> dict:
  """`{"model.norm_placement": "pre", ...}`: the config's leaves as TensorBoard takes hparam
  values (bool, number or str); lists and None are written as JSON text."""
  return flat_config(config, prefix, _hparam_value)


def _hparam_value(v):
  return v if isinstance(v, (bool, int, float, str)) else json.dumps(v)


def hparams_summary(values: dict, trial_id: str):
  """The hparams plugin's session start summary for `values` (the `tensorboard` package's
  protos; no TensorFlow)."""
  from tensorboard.plugins.hparams import summary_v2  # as in EventWriter
  return summary_v2.hparams_pb(values, trial_id=trial_id)
class _BucketEventFileWriter:
  """tensorboard's `EventFileWriter` for a URL folder: the same file name and records (its
  `RecordWriter`), written through epath by `paths.RewrittenFile`, synchronously."""

  def __init__(self, logdir: str):
    import socket
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{id(self)}")
    self._records = RecordWriter(paths.RewrittenFile(paths.join(logdir, name)))
    self.add_event(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
    self.flush()

  def add_event(self, event) -> None:
    self._records.write(event.SerializeToString())

  def flush(self) -> None:
    self._records.flush()

  def close(self) -> None:
    self._records.close()


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def log(message: str) -> None:
  """Prints on process 0 only, flushed so progress shows under pipes and schedulers."""
  import jax  # the sweep runner uses this module and must not import JAX
  if jax.process_index() == 0:
    print(message, flush=True)
