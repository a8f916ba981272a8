"""`transformer.float_text`: the packed metrics' short float32 text gives back the bytes the
run wrote. References: `json.dumps` (the original text) and NumPy's float32 (the values)."""

import json
import math

import numpy as np
import pytest

from transformer import float_text


def _line(**values) -> str:
  return json.dumps({"step": 25, "split": "train", **values})


@pytest.mark.parametrize("value", [
    float(np.float32(0.30589828)),       # a logged float32: 17 digits as float64
    float(np.float32(4.746221e10)),       # large, written with an exponent
    float(np.float32(3.0517578125e-05)),  # a power of two: exact in both
    0.1, 2.5e-4, 1e-05,                   # float64 values whose repr looks like float32 text
    1795784164.9568214, 2.17414184056212,  # a time stamp, a float64 mean
    273536.0, -0.0, 0.0, 5e-324, 1e300, -3.4028234663852886e38,
    math.inf, -math.inf,
])
def test_every_value_comes_back_bit_for_bit(value):
  text = _line(loss=value)
  short = float_text.encode(text)
  assert short is not None and float_text.decode(short) == text
  back = json.loads(short, parse_float=float_text.decode_number)["loss"]
  assert np.float64(back).tobytes() == np.float64(value).tobytes()


def test_logged_float32_values_take_at_most_nine_digits():
  rng = np.random.default_rng(0)
  logged = (rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 8, 2000)).astype(np.float32)
  values = [float(v) for v in logged]
  text = "\n".join(_line(loss=v) for v in values) + "\n"
  short = float_text.encode(text)
  assert float_text.decode(short) == text
  for line, v in zip(short.splitlines(), values):
    written = line.split('"loss": ')[1].rstrip("}")
    digits = written.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    assert len(digits) <= 9, written
    assert np.float32(written) == np.float32(v)  # NumPy's float32 reading names the same value
  assert len(text) - len(short) >= 5 * len(values)  # 17 digits down to at most 9


def test_nan_and_nested_values_and_a_float64_sum_survive():
  text = (json.dumps({"step": 1, "loss": math.nan, "per_layer": [float(np.float32(1.1)), 0.3],
                      "meta": {"lr": 3e-3, "ok": True, "name": "é", "none": None}}) + "\n")
  assert float_text.decode(float_text.encode(text)) == text


@pytest.mark.parametrize("text", [
    '{"loss": 1.5}\n{"loss": ',         # a torn last line
    '{"loss":1.25}\n',                   # not json.dumps' separators
    '[1.5, {"loss": 2.0}',               # not JSON
    '{"a": 1.0, "a": 2.0}\n',            # a repeated key json.loads drops
])
def test_text_that_would_not_come_back_is_refused(text):
  assert float_text.encode(text) is None
