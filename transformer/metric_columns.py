"""A run's metrics (JSON lines) written column by column, losslessly: how a packed study keeps
them (`transformer.packed_runs`; issue 69: the tracked tree's 15 MB).

A run's `metrics.jsonl` repeats a few kinds of row (train, eval, diagnostics), each with the
same keys in the same order, hundreds of times. Written as columns, a kind's keys appear once
and each column holds neighbouring values of one metric, which xz packs 5-13% smaller than the
rows (measured on the committed studies). The text `encode` writes is one JSON object:

  {"kinds": [[key, ...], ...],      the keys of each kind of row, in the row's order
   "rows": [kind, ...],             each line's kind, in line order (-1: an empty line)
   "columns": [[[value, ...], ...], ...]}   per kind, per key, the rows' values in order

its numbers in `transformer.float_text`'s shortest form. `decode` gives back the original text
byte for byte; `encode` returns None for a text it could not give back so (a line that is not
a JSON object `json.dumps` wrote), which the caller then keeps in another form.
"""

from __future__ import annotations

import json
from typing import Optional

from transformer import float_text

EMPTY = -1  # the kind of an empty line (the text's last line, after its final newline)


def decode(text: str) -> str:
  """The JSON lines `encode` wrote as `text`."""
  table = json.loads(text, parse_float=float_text.decode_number)
  kinds, order, columns = table["kinds"], table["rows"], table["columns"]
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
    table = {"kinds": [list(k) for k in kinds], "rows": order, "columns": columns}
    encoded = float_text.dumps(table)
    return encoded if decode(encoded) == text else None
  except (ValueError, RecursionError):
    return None
