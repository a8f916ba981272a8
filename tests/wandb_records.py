"""Reads the records of a wandb offline run file (`run-<id>.wandb`) without the network.

wandb >= 0.2x has no Python reader of its own (the writer is Go), so this follows its format:
a 7-byte header (`:W&B`, magic 0xBEE1, version 0), then LevelDB-log-style records in 32 KiB
blocks, each `crc32 (4) | length (2, little endian) | type (1: full, 2: first, 3: middle,
4: last) | data`, a block's tail under 7 bytes being padding. Each whole record is a
`wandb_internal_pb2.Record`.
"""

import struct
import time

from wandb.proto import wandb_internal_pb2

BLOCK = 32768


def records(path: str) -> list:
  with open(path, "rb") as f:
    data = f.read()
  assert data[:4] == b":W&B", path
  pos, out, pending = 7, [], b""
  while pos + 7 <= len(data):
    room = BLOCK - pos % BLOCK
    if room < 7:
      pos += room
      continue
    length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
    if length == 0 and kind == 0:
      pos += room  # zero padding to the block's end
      continue
    chunk = data[pos + 7:pos + 7 + length]
    pos += 7 + length
    pending = chunk if kind in (1, 2) else pending + chunk
    if kind in (1, 4):
      record = wandb_internal_pb2.Record()
      record.ParseFromString(pending)
      out.append(record)
      pending = b""
  return out


def history_steps(path: str, key: str) -> list[int]:
  """The `_step` of every history row of `path` that logs `key`."""
  steps = []
  for r in records(path):
    if r.WhichOneof("record_type") != "history":
      continue
    items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
    if key in items:
      steps.append(int(r.history.step.num) if r.history.HasField("step")
                   else int(items["_step"]))
  return steps


def settled_history_steps(path: str, key: str, timeout_s: float = 30.0) -> list[int]:
  """`history_steps` once the rows have reached the file, for a run finished in this process.

  wandb's service process writes the `.wandb` file, flushing on an interval
  (`wandb_writer.FLUSH_SECONDS`); once in CI, on 2 busy cores, the file read right after
  `run.finish()` returned held no history row yet. Waits at most `timeout_s` for one.
  """
  deadline = time.monotonic() + timeout_s
  steps = history_steps(path, key)
  while not steps and time.monotonic() < deadline:
    time.sleep(0.2)
    steps = history_steps(path, key)
  return steps


def run_of(path: str):
  """The file's run record (run_id, run_group, tags, config.update)."""
  return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")
