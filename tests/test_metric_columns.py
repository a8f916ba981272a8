"""`transformer.metric_columns`: a run's metrics written column by column give back the bytes
the run wrote. References: `json.dumps` (the original text) and NumPy's float32 (the values)."""

import json
import lzma
import math
import struct

import numpy as np
import pytest

from transformer import float_text, metric_columns


def _rows(steps: int) -> list[dict]:
  """Rows as a run logs them: train rows, evals and per-layer diagnostics, interleaved."""
  rng = np.random.default_rng(0)
  rows = []
  for step in range(0, steps, 25):
    if step % 100 == 0:
      rows.append({"step": step, "split": "diagnostics", "time": 1796430000.0 + step * 0.2371,
                   **{f"layer_{i}/grad_norm": float(np.float32(rng.random())) for i in range(6)}})
    rows.append({"step": step + 25, "split": "train", "time": 1796430007.6597285 + step * 0.23,
                 "loss": float(np.float32(4 - step / 1000 + rng.random() / 10)),
                 "learning_rate": float(np.float32(1e-3 * min(1, step / 240))),
                 "step_time": 0.23348597685496011 + rng.random() / 100})
    if step % 200 == 0:
      rows.append({"step": step + 25, "split": "eval", "loss": 2.17414184056212 - step / 1e4})
  return rows


def _text(rows, end="\n") -> str:
  return "\n".join(json.dumps(r) for r in rows) + end


@pytest.mark.parametrize("end", ["\n", ""])
def test_metrics_come_back_byte_for_byte_and_each_kind_is_one_set_of_columns(end):
  rows = _rows(1000)
  text = _text(rows, end)
  columns = metric_columns.encode(text)
  assert columns is not None and metric_columns.decode(columns) == text
  table = json.loads(columns, parse_float=float_text.decode_number)
  assert [kind[1] for kind in table["kinds"]] == ["split"] * 3
  splits = [table["columns"][k][1][0] for k in range(3)]
  assert splits == ["diagnostics", "train", "eval"]  # in the order they first appear
  expected = [splits.index(r["split"]) for r in rows] + ([metric_columns.EMPTY] if end else [])
  assert table["rows"] == expected
  train = dict(zip(table["kinds"][1], table["columns"][1]))
  assert train["loss"] is None and train["learning_rate"] is None  # float32: in the matrix
  assert train["step"] == [r["step"] for r in rows if r["split"] == "train"]  # ints: a list
  assert train["time"] == [r["time"] for r in rows if r["split"] == "train"]  # float64: a list
  matrix = _matrix(table["float32"][1], 2)
  assert [row[0] for row in matrix] == [r["loss"] for r in rows if r["split"] == "train"]
  assert [row[1] for row in matrix] == [r["learning_rate"] for r in rows
                                        if r["split"] == "train"]


def _matrix(text: str, columns: int) -> list[list[float]]:
  """The documented form read byte by byte: the k-th big-endian float32 byte of the value at
  (row r, column c) of an [n, columns] matrix is byte k * n * columns + r * columns + c."""
  data = bytes.fromhex(text)
  n = len(data) // (4 * columns)
  return [[struct.unpack(">f", bytes(data[k * n * columns + r * columns + c]
                                     for k in range(4)))[0] for c in range(columns)]
          for r in range(n)]


def test_float32_columns_are_one_hex_matrix_per_kind_and_others_stay_lists():
  rows = [{"loss": float(np.float32(v)), "time": 1796430007.6597285 + v, "mixed": m,
           "norm": float(np.float32(v / 3))}
          for v, m in ((0.5, 1.5), (-2.25, None), (math.inf, 2.0), (3e38, 3.0))]
  text = _text(rows)
  table = json.loads(metric_columns.encode(text), parse_float=float_text.decode_number)
  loss, time, mixed, norm = table["columns"][0]
  assert loss is None and norm is None
  assert isinstance(time, list) and mixed == [1.5, None, 2.0, 3.0]
  # loss's bytes 3f000000, c0100000, 7f800000, 7f61b1e6; norm's 3e2aaaab, bf400000, 7f800000,
  # 7e967699: row by row (loss, norm), first bytes first
  assert table["float32"][0] == ("3f3ec0bf7f7f7f7e" "002a104080806196"
                                 "00aa00000000b176" "00ab00000000e699")
  assert _matrix(table["float32"][0], 2) == [[r["loss"], r["norm"]] for r in rows]
  assert metric_columns.decode(metric_columns.encode(text)) == text


@pytest.mark.parametrize("float32_only", [False, True])
def test_odd_values_come_back_bit_for_bit(float32_only):
  """NaN, infinities, -0.0, a subnormal float64, nested values; with `float32_only` every
  float is a float32, so the odd values go through the float32 matrix."""
  tiny = float(np.float32(1e-45)) if float32_only else 5e-324
  other = float(np.float32(0.1)) if float32_only else 0.1
  rows = [{"step": 1, "loss": math.nan, "grad_norm": math.inf, "low": -math.inf,
           "per_layer": [float(np.float32(1.1)), 0.3], "meta": {"lr": 3e-3, "ok": True,
                                                               "name": "é", "none": None}},
          {"step": 2, "loss": other, "grad_norm": tiny, "low": -0.0, "per_layer": [],
           "meta": {}}]
  text = _text(rows)
  encoded = metric_columns.encode(text)
  back = metric_columns.decode(encoded)
  assert back == text
  matrix = json.loads(encoded)["float32"][0]
  # hex of 2 rows of 4 bytes per float32 column: loss, grad_norm and low, or low alone
  assert len(matrix) == 2 * 4 * 2 * (3 if float32_only else 1)
  for row, read in zip(rows, (json.loads(line) for line in back.splitlines())):
    for key in ("grad_norm", "low"):
      assert np.float64(read[key]).tobytes() == np.float64(row[key]).tobytes()


def test_columns_pack_smaller_than_rows():
  """What the form is for (issue 69): the same metrics, xz-compressed, take fewer bytes."""
  text = _text(_rows(10_000))
  rows = lzma.compress(float_text.encode(text).encode(), preset=9 | lzma.PRESET_EXTREME)
  columns = lzma.compress(metric_columns.encode(text).encode(), preset=9 | lzma.PRESET_EXTREME)
  assert len(columns) < 0.95 * len(rows)


@pytest.mark.parametrize("text", [
    '{"loss": 1.5}\n{"loss": ',         # a torn last line
    '{"loss":1.25}\n',                   # not json.dumps' separators
    '[1.5, {"loss": 2.0}]\n',            # a line that is not an object
    '{"a": 1.0, "a": 2.0}\n',            # a repeated key json.loads drops
])
def test_text_that_would_not_come_back_is_refused(text):
  assert metric_columns.encode(text) is None


def test_an_empty_line_inside_comes_back_where_it_was():
  text = '{"loss": 1.5}\n\n{"loss": 2.5}'
  assert metric_columns.decode(metric_columns.encode(text)) == text


@pytest.mark.parametrize("table", [
    {"kinds": [["loss"]], "rows": [-2], "columns": [[[1.5]]]},     # a kind that is not there
    {"kinds": [["loss"]], "rows": [0, 0], "columns": [[[1.5]]]},   # a row with no values
    {"kinds": [["loss"]], "rows": [0], "columns": [[[1.5, 2.5]]]},  # values with no row
    {"kinds": [["loss"]], "rows": [0], "columns": [[None]], "float32": ["3fc0"]},  # torn
    {"kinds": [["loss"]], "rows": [0], "columns": [[None]], "float32": ["3fc0zz00"]},  # not hex
    {"kinds": [["loss"]], "rows": [0, 0], "columns": [[None]], "float32": ["3fc00000"]},
    {"kinds": [["loss"]], "rows": [0], "columns": [[[1.5]]], "float32": ["3fc00000"]},
    {"kinds": [["loss"]], "rows": [0], "columns": [[None]], "float32": []},  # no matrix
])
def test_a_damaged_table_is_refused_not_read_as_other_rows(table):
  with pytest.raises((ValueError, IndexError)):
    metric_columns.decode(json.dumps(table))
