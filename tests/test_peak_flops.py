"""The peak FLOP/s behind MFU: data sheets per dtype, and the CPU's measured, cached matmul rate."""

import json

import jax
import pytest

from transformer.train import peaks


def test_data_sheet_peak_depends_on_the_compute_dtype():
  assert peaks.data_sheet_peak("NVIDIA H100 80GB HBM3", "bfloat16") == 989e12
  assert peaks.data_sheet_peak("NVIDIA H100 80GB HBM3", "float32") == 495e12  # TF32
  # The longest matching prefix wins: a PCIe card is not an SXM one.
  assert peaks.data_sheet_peak("NVIDIA H100 PCIe", "bfloat16") == 756e12
  assert peaks.data_sheet_peak("NVIDIA A100-SXM4-80GB", "float32") == 156e12
  assert peaks.data_sheet_peak("TPU v5p", "float32") == 459e12
  assert peaks.data_sheet_peak("Some Future Chip", "bfloat16") is None


def test_override_wins():
  assert peaks.peak_flops_per_device(1e12, "bfloat16") == (1e12, "train.peak_flops_per_device")


def test_matmul_rate_is_computed_from_the_timings(monkeypatch):
  """With a clock that advances 0.5 s per reading, every run takes 0.5 s: the rate must be
  exactly 2 n^3 / 0.5, so the figure comes from the timed runs, not from a constant."""
  clock = iter(range(1000))
  monkeypatch.setattr(peaks.time, "perf_counter", lambda: 0.5 * next(clock))
  assert peaks.measure_matmul_flops(size=64, repeats=3) == pytest.approx(2 * 64 ** 3 / 0.5)


def test_cpu_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
  calls = []
  real = peaks.measure_matmul_flops

  def measure(*args, **kwargs):
    calls.append(1)
    return real(size=256, repeats=2)

  monkeypatch.setattr(peaks, "measure_matmul_flops", measure)
  peak, how = peaks.peak_flops_per_device(0.0, "float32", cache=str(tmp_path))
  n = jax.local_device_count()
  assert peak > 0 and calls == [1]
  assert "measured float32" in how and str(tmp_path) in how
  (entry,) = json.loads((tmp_path / "cpu_peak.json").read_text()).values()
  assert entry["flops_per_sec"] == pytest.approx(peak * n)  # shared by the fake devices
  # Cached: no second measurement, same figure.
  again, _ = peaks.peak_flops_per_device(0.0, "bfloat16", cache=str(tmp_path))
  assert again == peak and calls == [1]


def test_unusable_cache_file_is_measured_again(tmp_path, monkeypatch):
  (tmp_path / "cpu_peak.json").write_text("{not json")
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda *a, **k: 123e9)
  peak, _ = peaks.cpu_peak_flops(str(tmp_path))
  assert peak == 123e9
  assert list(json.loads((tmp_path / "cpu_peak.json").read_text()).values())[0][
      "flops_per_sec"] == 123e9
