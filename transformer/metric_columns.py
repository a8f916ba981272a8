"""A run's metrics (JSON lines) written column by column, losslessly: how a packed study keeps
them (`transformer.packed_runs`; issue 69: the tracked tree's 15 MB).

A run's `metrics.jsonl` repeats a few kinds of row (train, eval, diagnostics), each with the
same keys in the same order, hundreds of times. Written as columns, a kind's keys appear once
and each column holds neighbouring values of one metric, which xz packs 5-13% smaller than the
rows (measured on the committed studies). The text `encode` writes is one JSON object:

  {"kinds": [[key, ...], ...],      the keys of each kind of row, in the row's order
   "rows": [kind, ...],             each line's kind, in line order (-1: an empty line)
   "columns": [[column, ...], ...]} per kind, per key, the rows' values in order

A column is a list of the values (numbers in `transformer.float_text`'s shortest form) or, when
every value is a float32 (widened to the float64 `json.dumps` wrote; NaN and infinities too),
null: its values are then in the kind's float32 matrix, `"float32": [text, ...]` (per kind; ""
when it has none), the [rows, such columns] matrix (the columns in key order) of big-endian
float32 values written as hex byte plane by byte plane: every value's first byte (sign and
high exponent, which change slowly), in row-major order, then every second byte, and so on.
It took 19% off the committed packs (6-25% a study; issue 69): xz packs depth_post's metrics
22% smaller so than as shortest decimal text, where planes per column gave 15% and XOR or
differences along the rows no more. `decode` gives back the original text byte for byte;
`encode` returns None for a text it could not give back so (a line that is not a JSON object
`json.dumps` wrote), which the caller then keeps in another form.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np

from transformer import float_text

EMPTY = -1  # the kind of an empty line (the text's last line, after its final newline)


def _is_float32(column: list) -> bool:
  """Whether every value is a float (not an int, a bool, None) that a float32 holds exactly."""
  if not all(type(value) is float for value in column):
    return False
  values = np.array(column, dtype=np.float64)
  with np.errstate(over="ignore"):
    narrow = values.astype(np.float32)
  return np.array_equal(narrow.astype(np.float64), values, equal_nan=True)


def _float32_text(columns: list[list]) -> str:
  """`columns` (float32 values, rows of each) as the hex of the [rows, columns] matrix's
  big-endian float32 bytes, byte plane by byte plane; "" for no columns."""
  if not columns:
    return ""
  matrix = np.ascontiguousarray(np.array(columns, dtype=np.float64).T, dtype=">f4")  # [rows, cols]
  return matrix.view(np.uint8).reshape(*matrix.shape, 4).transpose(2, 0, 1).tobytes().hex()


def _float32_columns(text: str, count: int) -> list[list]:
  """The `count` columns of floats `_float32_text` wrote as `text`."""
  if not count:
    if text:
      raise ValueError("a float32 matrix for a kind with no float32 column")
    return []
  planes = np.frombuffer(bytes.fromhex(text), dtype=np.uint8).reshape(4, -1, count)
  matrix = np.ascontiguousarray(planes.transpose(1, 2, 0)).view(">f4")[..., 0]
  return matrix.T.astype(np.float64).tolist()


def _columns(table: dict) -> list[list[list]]:
  """Per kind, per key, the rows' values: the lists, with the float32 matrices' in place."""
  kinds = []
  matrices = table.get("float32", [""] * len(table["columns"]))
  if len(matrices) != len(table["columns"]):
    raise ValueError("float32 matrices for more or fewer kinds than there are")
  for kind, text in zip(table["columns"], matrices):
    floats = iter(_float32_columns(text, sum(column is None for column in kind)))
    kinds.append([next(floats) if column is None else column for column in kind])
  return kinds


def decode(text: str) -> str:
  """The JSON lines `encode` wrote as `text`."""
  table = json.loads(text, parse_float=float_text.decode_number)
  kinds, order = table["kinds"], table["rows"]
  columns = _columns(table)
  taken = [0] * len(kinds)
  lines = []
  for kind in order:
    if kind == EMPTY:
      lines.append("")
      continue
    if not 0 <= kind < len(kinds):
      raise ValueError(f"a row of kind {kind}, of {len(kinds)} kinds")
    index = taken[kind]
    taken[kind] += 1
    lines.append(json.dumps({key: column[index]
                             for key, column in zip(kinds[kind], columns[kind])}))
  if any(len(column) != n for n, kind in zip(taken, columns) for column in kind):
    raise ValueError("columns longer or shorter than their rows")
  return "\n".join(lines)


def encode(text: str) -> Optional[str]:
  """`text` (JSON lines of objects, as `json.dumps` wrote them) as columns; None when that
  would not `decode` to `text` exactly."""
  kinds: dict[tuple, int] = {}
  order, columns = [], []
  try:
    for line in text.split("\n"):
      if not line:
        order.append(EMPTY)
        continue
      row = json.loads(line)
      if not isinstance(row, dict):
        return None
      kind = kinds.setdefault(tuple(row), len(kinds))
      if kind == len(columns):
        columns.append([[] for _ in row])
      for column, value in zip(columns[kind], row.values()):
        column.append(value)
      order.append(kind)
    narrow = [[_is_float32(column) for column in kind] for kind in columns]
    table = {"kinds": [list(k) for k in kinds], "rows": order,
             "columns": [[None if f else c for c, f in zip(kind, flags)]
                         for kind, flags in zip(columns, narrow)],
             "float32": [_float32_text([c for c, f in zip(kind, flags) if f])
                         for kind, flags in zip(columns, narrow)]}
    encoded = float_text.dumps(table)
    return encoded if decode(encoded) == text else None
  except (ValueError, RecursionError):
    return None
