"""A lossless, smaller text for JSON lines of float32 metrics (issue 46: the tracked tree's 15 MB).

A run logs float32 values (losses, norms, ratios) through `json.dumps`, which writes each as the
float64 it was widened to: 17 significant digits, of which at most 9 carry information. Those
digits are most of what xz cannot compress in a packed study. `encode` rewrites each such value
with the fewest digits that still name it (`0.3058982789516449` -> `0.30589828`); `decode` gives
back the original text, byte for byte. The rule that makes it reversible:

- a number written with at most 9 significant digits whose float64 is not a float32 value is
  read as the float32 nearest to it (the float32 text `encode` wrote);
- every other number is read as the float64 it is (`encode` writes a float64-only value that
  would fall under the first rule, such as `0.1`, with 17 digits instead).

`encode` returns None when its output would not decode to the same bytes (a line that is not a
JSON object, a line `json.dumps` did not write): the caller keeps that text as it is.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Optional

MAX_FLOAT32_DIGITS = 9  # every float32 is named by at most 9 significant digits


def _significant_digits(text: str) -> int:
  mantissa = text.lstrip("-").split("e")[0].split("E")[0]
  return len(mantissa.replace(".", "").lstrip("0"))


def as_float32(value: float) -> float:
  """The float32 nearest to `value`, widened back; inf beyond float32's range."""
  try:
    return struct.unpack("<f", struct.pack("<f", value))[0]
  except OverflowError:  # beyond float32's range
    return math.inf


def decode_number(text: str) -> float:
  """The float a JSON number written by `encode` stands for (`json.loads`' `parse_float`)."""
  value = float(text)
  if _significant_digits(text) <= MAX_FLOAT32_DIGITS and math.isfinite(value):
    narrow = as_float32(value)
    if narrow != value and math.isfinite(narrow):
      return narrow
  return value


def _same(a: float, b: float) -> bool:
  return struct.pack("<d", a) == struct.pack("<d", b)


def encode_number(value: float) -> str:
  """The shortest text that `decode_number` reads back as `value`, bit for bit."""
  if not math.isfinite(value):
    return json.dumps(value)  # NaN, Infinity: never passed to parse_float
  text = repr(value)
  if _same(as_float32(value), value) and _significant_digits(text) > MAX_FLOAT32_DIGITS:
    for digits in range(1, MAX_FLOAT32_DIGITS + 1):
      short = f"{value:.{digits}g}"
      if any(c in short for c in ".e") and _same(decode_number(short), value):
        return short
  if _same(decode_number(text), value):
    return text
  return f"{value:.17g}"  # a float64 value whose repr reads as a float32 text


def dumps(obj) -> str:
  """`json.dumps(obj)` (its default separators) with each float written by `encode_number`."""
  if isinstance(obj, float):
    return encode_number(obj)
  if isinstance(obj, dict):
    return "{" + ", ".join(f"{json.dumps(k)}: {dumps(v)}" for k, v in obj.items()) + "}"
  if isinstance(obj, list):
    return "[" + ", ".join(dumps(v) for v in obj) + "]"
  return json.dumps(obj)


def decode(text: str) -> str:
  """The original text of `encode`'s output: each line read with `decode_number` and written
  back by `json.dumps`."""
  return "\n".join(json.dumps(json.loads(line, parse_float=decode_number)) if line else line
                   for line in text.split("\n"))


def encode(text: str) -> Optional[str]:
  """`text` (JSON lines, as `json.dumps` wrote them) with its numbers shortened; None when the
  result would not `decode` to `text` exactly."""
  try:
    encoded = "\n".join(dumps(json.loads(line)) if line else line for line in text.split("\n"))
    return encoded if decode(encoded) == text else None
  except (ValueError, RecursionError):
    return None
