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


# Dense BF16 and TF32 (GPUs) or bf16 (TPUs) figures, TFLOP/s, as the data sheets print them.
DATA_SHEETS = {
    "NVIDIA H100 80GB HBM3": (989, 495), "NVIDIA H100 PCIe": (756, 378),
    "NVIDIA H100 NVL": (835, 418), "NVIDIA H200": (989, 495), "NVIDIA H200 NVL": (835, 418),
    "NVIDIA A100-SXM4-40GB": (312, 156), "NVIDIA A100-SXM4-80GB": (312, 156),
    "NVIDIA A100-PCIE-40GB": (312, 156), "NVIDIA A100 80GB PCIe": (312, 156),
    "TPU v4": (275, 275), "TPU v5 lite": (197, 197), "TPU v5p": (459, 459),
    "TPU v5": (459, 459), "TPU v6 lite": (918, 918),
}


@pytest.mark.parametrize("device_kind", sorted(DATA_SHEETS))
def test_every_required_device_has_its_dense_data_sheet_peaks(device_kind):
  bf16, tf32 = DATA_SHEETS[device_kind]
  assert peaks.data_sheet_peak(device_kind, "bfloat16") == bf16 * 1e12
  assert peaks.data_sheet_peak(device_kind, "float32") == tf32 * 1e12


def test_every_listed_device_is_consistent_and_names_its_source():
  source = open(peaks.__file__).read()
  for name, figures in peaks.PEAK_FLOPS.items():
    assert set(figures) == {"bfloat16", "float32"}, name
    # Dense, never the 2:4-sparse figure: no accelerator here exceeds 1 PFLOP/s dense bf16.
    assert 100e12 <= figures["float32"] <= figures["bfloat16"] < 1000e12, name
    if name.startswith("NVIDIA"):  # TF32 is half of BF16 on Ampere and Hopper tensor cores
      assert figures["float32"] == pytest.approx(figures["bfloat16"] / 2, rel=0.01), name
  for sheet in ("H100 Tensor Core GPU data sheet", "H200 Tensor Core GPU data sheet",
                "A100 Tensor Core GPU data sheet", "Google Cloud TPU documentation"):
    assert sheet in source


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
