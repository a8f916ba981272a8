"""Reads the records of a wandb offline run file (`run-<id>.wandb`) without the network.

wandb >= 0.2x has no Python reader of its own (the writer is Go), so this follows its format:
a 7-byte header (`:W&B`, magic 0xBEE1, version 0), then LevelDB-log-style records in 32 KiB
blocks, each `crc32 (4) | length (2, little endian) | type (1: full, 2: first, 3: middle,
4: last) | data`, a block's tail under 7 bytes being padding. Each whole record is a
`wandb_internal_pb2.Record`. A file cut short by a kill ends in a torn record, which is left
out: `records` returns the whole ones before it.
"""

from __future__ import annotations

import struct

BLOCK = 32768
HEADER = b":W&B"


def records(path: str) -> list:
  """The whole records of the file at `path`, in order (a torn last one left out)."""
  from wandb.proto import wandb_internal_pb2  # optional package
  from google.protobuf.message import DecodeError
  with open(path, "rb") as f:
    data = f.read()
  if data[:4] != HEADER:
    raise ValueError(f"{path} is not a wandb run file (it does not start with {HEADER!r})")
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
    if pos + 7 + length > len(data):
      break  # torn by a kill
    chunk = data[pos + 7:pos + 7 + length]
    pos += 7 + length
    pending = chunk if kind in (1, 2) else pending + chunk
    if kind in (1, 4):
      record = wandb_internal_pb2.Record()
      try:
        record.ParseFromString(pending)
      except DecodeError:
        break
      out.append(record)
      pending = b""
  return out


def history_steps(path: str, key: str | None = None) -> list[int]:
  """The step of every history row of `path` (only those that log `key`, when given)."""
  steps = []
  for r in records(path):
    if r.WhichOneof("record_type") != "history":
      continue
    items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
    if key is None or key in items:
      steps.append(int(r.history.step.num) if r.history.HasField("step")
                   else int(items["_step"]))
  return steps
