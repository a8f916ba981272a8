"""`transformer.metric_columns`: a run's metrics written column by column give back the bytes
the run wrote. References: `json.dumps` (the original text) and NumPy's float32 (the values)."""

import json
import lzma
import math

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
  train = table["columns"][1]
  assert train[table["kinds"][1].index("loss")] == [r["loss"] for r in rows
                                                      if r["split"] == "train"]


def test_odd_values_come_back_bit_for_bit():
  rows = [{"step": 1, "loss": math.nan, "grad_norm": math.inf, "low": -math.inf,
           "per_layer": [float(np.float32(1.1)), 0.3], "meta": {"lr": 3e-3, "ok": True,
                                                               "name": "é", "none": None}},
          {"step": 2, "loss": 0.1, "grad_norm": 5e-324, "low": -0.0, "per_layer": [],
           "meta": {}}]
  text = _text(rows)
  back = metric_columns.decode(metric_columns.encode(text))
  assert back == text
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
])
def test_a_damaged_table_is_refused_not_read_as_other_rows(table):
  with pytest.raises((ValueError, IndexError)):
    metric_columns.decode(json.dumps(table))
