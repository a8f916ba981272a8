"""The peak FLOP/s behind MFU: data sheets per dtype, and the CPU's measured, cached matmul rate."""

import json

import jax
import pytest

from transformer.train import peaks


@pytest.fixture(autouse=True)
def _free_cores(monkeypatch):
  """The cores as free as a quiet machine's (the real load average would make whether a cached
  peak is measured again depend on what else this machine runs); busy tests set their own."""
  monkeypatch.setattr(peaks, "_load_average", lambda: 0.0)


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


class _FakeGpu:
  platform, device_kind = "gpu", "NVIDIA H200"


@pytest.mark.parametrize("precision, peak, kind", [
    (None, 495e12, "TF32 tensor-core"), ("highest", 67e12, "FP32 (CUDA-core)"),
    ("float32", 67e12, "FP32 (CUDA-core)"), ("tensorfloat32", 495e12, "TF32 tensor-core")])
def test_a_gpu_float32_peak_follows_the_default_matmul_precision(monkeypatch, precision, peak,
                                                                 kind):
  """`JAX_DEFAULT_MATMUL_PRECISION=highest` runs float32 matmuls without TF32, so MFU is against
  the CUDA-core FP32 peak (7x lower on an H200); bfloat16 keeps its tensor-core peak."""
  monkeypatch.setattr(jax, "devices", lambda *a: [_FakeGpu()])
  with jax.default_matmul_precision(precision):
    got, source = peaks.peak_flops_per_device(0.0, "float32")
    assert got == peak and kind in source
    assert peaks.peak_flops_per_device(0.0, "bfloat16")[0] == 989e12


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


def test_a_cached_figure_no_cpu_core_reaches_is_measured_again(tmp_path, monkeypatch):
  """Multi-process runs once timed another process's device (nothing computed here) and cached
  petaFLOP/s for 2 cores: such a figure is not a measurement, whatever its load average."""
  key = peaks._cpu_key()
  impossible = peaks.IMPOSSIBLE_CPU_FLOPS_PER_CORE * peaks._cpu_cores()
  (tmp_path / "cpu_peak.json").write_text(json.dumps({key: {
      "flops_per_sec": impossible, "matmul_size": 2048, "measured": "2026-12-01 00:00:00 UTC",
      "load_average": 0.0}}))
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda *a, **k: 123e9)
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 123e9
  assert _stored(tmp_path) == [123e9]


# --- A peak only goes up; MFU is never above 100% -------------------------------------------


def _stored(tmp_path) -> list:
  return [e["flops_per_sec"] for e in json.loads((tmp_path / "cpu_peak.json").read_text())
          .values()]


def _measuring(monkeypatch, *figures) -> list:
  """Makes `measure_matmul_flops` return `figures` in turn; the list of calls it returns grows
  by one per measurement."""
  calls, it = [], iter(figures)

  def measure(*args, **kwargs):
    calls.append(1)
    return next(it)
  monkeypatch.setattr(peaks, "measure_matmul_flops", measure)
  return calls


def test_remeasuring_the_cpu_keeps_the_best_figure(tmp_path, monkeypatch):
  calls = _measuring(monkeypatch, 100e9, 50e9, 200e9)
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 100e9
  # A lower measurement (busy cores) does not lower the cached peak...
  peak, how = peaks.remeasure_cpu_peak(str(tmp_path))
  assert peak == 100e9 and "100 GFLOP/s" in how and _stored(tmp_path) == [100e9]
  # ... a higher one raises it, in the cache too, which later runs then read.
  peak, how = peaks.remeasure_cpu_peak(str(tmp_path))
  assert peak == 200e9 and "200 GFLOP/s" in how and _stored(tmp_path) == [200e9]
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 200e9 and len(calls) == 3
  assert [p.name for p in tmp_path.iterdir()] == ["cpu_peak.json"]  # no temporary file left


@pytest.mark.parametrize("cache", ['{"a": 1', "[1, 2]", "\xff\xfe", "", None])
def test_remeasuring_over_a_torn_or_garbage_cache_stores_the_new_figure(tmp_path, monkeypatch,
                                                                        cache):
  _measuring(monkeypatch, 77e9)
  path = tmp_path / "cpu_peak.json"
  if cache is not None:
    path.write_text(cache, encoding="latin-1")
  else:  # this machine's entry, with a figure that is not a number
    path.write_text(json.dumps({peaks._cpu_key(): {"flops_per_sec": "fast", "measured": "x"}}))
  peak, how = peaks.remeasure_cpu_peak(str(tmp_path))
  assert peak == 77e9 and "77 GFLOP/s" in how
  assert 77e9 in _stored(tmp_path)


def _cached_cpu_peak(tmp_path, monkeypatch, flops: float) -> tuple[float, str]:
  """This machine's CPU peak cached as `flops`, read back per device as training reads it."""
  (tmp_path / "cpu_peak.json").write_text(json.dumps(
      {peaks._cpu_key(): {"flops_per_sec": flops, "measured": "a busy day"}}))
  monkeypatch.setattr(jax, "devices", lambda *a: [_FakeCpu()])
  return peaks.peak_flops_per_device(0.0, "float32", cache=str(tmp_path))


class _FakeCpu:
  platform, device_kind = "cpu", "cpu"


def test_an_achieved_rate_above_the_cached_cpu_peak_measures_again_and_uses_the_raised_peak(
    tmp_path, monkeypatch):
  peak, source = _cached_cpu_peak(tmp_path, monkeypatch, 10e9)
  n = jax.local_device_count()
  assert peak == 10e9 / n and peaks.peak_is_measured(0.0)
  calls = _measuring(monkeypatch, 40e9)
  check = peaks.checked_mfu(20e9 / n, peak, source, measured_cpu=True, cache=str(tmp_path))
  assert check.mfu == pytest.approx(0.5) and check.problem is None and len(calls) == 1
  assert check.peak == 40e9 / n and "40 GFLOP/s" in check.source
  assert _stored(tmp_path) == [40e9]


def test_an_achieved_rate_above_even_the_remeasured_cpu_peak_gives_no_mfu(tmp_path,
                                                                           monkeypatch):
  peak, source = _cached_cpu_peak(tmp_path, monkeypatch, 10e9)
  n = jax.local_device_count()
  calls = _measuring(monkeypatch, 12e9)
  check = peaks.checked_mfu(50e9 / n, peak, source, measured_cpu=True, cache=str(tmp_path))
  assert check.mfu is None and len(calls) == 1
  assert "below the achieved" in check.problem and "peak is wrong" in check.problem
  assert str(tmp_path / "cpu_peak.json") in check.problem  # the file to delete, named
  assert "train.peak_flops_per_device" in check.problem
  assert _stored(tmp_path) == [12e9]  # still the best measurement kept


def test_an_achieved_rate_within_the_peak_is_not_measured_again(monkeypatch):
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda *a, **k: pytest.fail("measured"))
  check = peaks.checked_mfu(5e9, 10e9, "some peak", measured_cpu=True)
  assert check == (0.5, 10e9, "some peak", None)
  assert peaks.checked_mfu(10e9, 10e9, "some peak", measured_cpu=True).mfu == 1.0


def test_a_data_sheet_or_given_peak_below_the_achieved_rate_gives_no_mfu(monkeypatch):
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda *a, **k: pytest.fail("measured"))
  sheet = "data sheet, bfloat16 dense peak of NVIDIA H100 80GB HBM3"
  check = peaks.checked_mfu(1.5e15, 989e12, sheet)
  assert check.mfu is None and check.peak == 989e12
  assert "below the achieved" in check.problem and "train.peak_flops_per_device" in check.problem
  given = peaks.checked_mfu(2e11, 1e11, "train.peak_flops_per_device")
  assert given.mfu is None and "given peak" in given.problem and "raise it" in given.problem
  # No peak at all: no MFU, and the reason is where the peak would come from.
  unknown = peaks.checked_mfu(1e12, None, "no data-sheet peak for X; set ...")
  assert unknown.mfu is None and unknown.problem == "no data-sheet peak for X; set ..."


@pytest.mark.parametrize("achieved", [0.0, 1e9, 9.99e9, 1e10, 1e10 * (1 + 1e-12), 3e10, 1e30])
def test_checked_mfu_is_never_above_one(achieved):
  mfu = peaks.checked_mfu(achieved, 1e10, "train.peak_flops_per_device").mfu
  assert mfu is None or 0 <= mfu <= 1
  assert (mfu is None) == (achieved > 1e10)


def _train_log_rows(tmp_path, monkeypatch, capsys, cached: float, *measured: float):
  """Two `train` rows of the train loop's `_ThroughputLog` (smoke config, one CPU device) whose
  CPU peak is cached as `cached` and measured again as `measured`: (rows, log, measurements)."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.train import loop

  par = type("Par", (), {"num_devices": 1})()
  guard = type("Guard", (), {"skipped": 0, "mode": "raise"})()
  rows = []
  writer = type("Writer", (), {"write": lambda self, step, split, row: rows.append(row)})()
  monkeypatch.setenv("TRANSFORMER_CACHE_DIR", str(tmp_path))
  _cached_cpu_peak(tmp_path, monkeypatch, cached)
  monkeypatch.setattr(jax, "local_device_count", lambda *a: 1)
  calls = _measuring(monkeypatch, *measured)
  throughput = loop._ThroughputLog(from_config_dict(get_config("smoke")), par,
                                   lambda s: 1e-3, guard, writer)
  for step in (1, 2):
    throughput.add({"tokens": 8.0, "loss": 1.0, "grad_norm": 1.0, "finite": True})
    throughput.write(step, 2)
  return rows, capsys.readouterr().out, calls


def test_the_train_log_measures_again_once_then_warns_once_and_drops_mfu(tmp_path, monkeypatch,
                                                                        capsys):
  """The train loop's MFU goes through `checked_mfu`: a cached CPU peak below the achieved rate
  is measured again once; still below, one warning and no `mfu` in this or later rows."""
  rows, out, calls = _train_log_rows(tmp_path, monkeypatch, capsys, 1e3, 2e3, 3e3)
  assert len(calls) == 1 and out.count("WARNING: MFU n/a:") == 1
  assert "below the achieved" in out
  steps = [line for line in out.splitlines() if line.startswith("step ")]
  assert len(steps) == 2 and not any("MFU" in line for line in steps)
  assert all("mfu" not in row for row in rows) and len(rows) == 2
  assert _stored(tmp_path) == [2e3]


def test_the_train_log_uses_a_cpu_peak_raised_by_measuring_again(tmp_path, monkeypatch,
                                                                 capsys):
  rows, out, calls = _train_log_rows(tmp_path, monkeypatch, capsys, 1e3, 1e30)
  assert len(calls) == 1 and "WARNING" not in out and "measured again, is now" in out
  assert all(0 < row["mfu"] <= 1 for row in rows) and len(rows) == 2
  assert _stored(tmp_path) == [1e30]


def test_a_peak_measured_on_busy_cores_says_so_and_is_measured_again_once_they_are_free(
    tmp_path, monkeypatch):
  cores = peaks._cpu_cores()
  monkeypatch.setattr(peaks, "_load_average", lambda: 2.0 * cores)  # a sweep's other runs
  calls = _measuring(monkeypatch, 10e9, 30e9)
  peak, source = peaks.cpu_peak_flops(str(tmp_path))
  assert peak == 10e9 and f"load average {2.0 * cores} on {cores} cores" in source
  assert "likely low and MFU high" in source
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 10e9 and len(calls) == 1  # still busy
  monkeypatch.setattr(peaks, "_load_average", lambda: 0.1)
  peak, source = peaks.cpu_peak_flops(str(tmp_path))
  assert peak == 30e9 and len(calls) == 2 and "likely low" not in source
  assert _stored(tmp_path) == [30e9]
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 30e9 and len(calls) == 2  # cached, quiet


def test_a_busy_peak_that_free_cores_do_not_beat_is_kept_and_no_longer_marked(tmp_path,
                                                                             monkeypatch):
  cores = peaks._cpu_cores()
  monkeypatch.setattr(peaks, "_load_average", lambda: 1.0 * cores)
  calls = _measuring(monkeypatch, 20e9, 18e9)
  peaks.cpu_peak_flops(str(tmp_path))
  monkeypatch.setattr(peaks, "_load_average", lambda: 0.0)
  peak, source = peaks.cpu_peak_flops(str(tmp_path))
  assert peak == 20e9 and len(calls) == 2 and "likely low" not in source
  assert peaks.cpu_peak_flops(str(tmp_path))[0] == 20e9 and len(calls) == 2  # not a third time
