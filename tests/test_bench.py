"""--mode=bench for every model kind, its profile, and the TensorFlow-free import path."""

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs.default import get_config
from transformer import config as config_lib
from transformer import kinds
from transformer.config import ConfigError, from_config_dict
from transformer.data.facts import DataFacts
from transformer.train import bench
from transformer.train.bench import run_benchmark
from transformer.tasks.losses import cross_entropy_sums

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(kind, image_size=8, **train):
  c = get_config("smoke")
  with c.unlocked():
    c.model.kind = kind
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 32, 4, 1, 64
    c.model.num_classes = 3
    c.model.image_size, c.model.image_channels, c.model.patch_size = image_size, 1, 2
    c.data.seq_len, c.data.src_len, c.data.tgt_len = 16, 12, 10
    c.train.batch_size = 8
    c.train.peak_flops_per_device = 1e11  # the CPU's measured peak has its own tests
    for k, v in train.items():
      c.train[k] = v
  return from_config_dict(c)


# Tokens the model reads per row: source + target; 8x8 images in 2x2 patches + [CLS]; seq_len.
TOKENS_PER_ROW = {"encoder_decoder": 12 + 10, "vit_classifier": (8 // 2) ** 2 + 1}


@pytest.mark.parametrize("kind", kinds.names())  # every registered kind
def test_bench_times_every_model_kind(kind, capsys):
  cfg = _config(kind)
  result = run_benchmark(cfg, steps=2, warmup=1)
  assert result["kind"] == kind and result["step_s"] > 0 and result["params"] > 0
  per_row = TOKENS_PER_ROW.get(kind, 16)
  assert result["tokens_per_s"] == pytest.approx(8 * per_row / result["step_s"])
  assert 0 < result["mfu"] < 1
  # A fresh model guesses about uniformly: loss near ln(classes), within 1 nat.
  classes = 3 if kind.endswith("classifier") else cfg.model.vocab_size
  assert abs(result["loss"] - np.log(classes)) < 1.0
  out = capsys.readouterr().out
  row = [line for line in out.splitlines() if line.strip().startswith(f"| {kind} |")]
  assert len(row) == 1 and row[0].count("|") == out.splitlines()[-2].count("|")


def test_bench_times_the_training_loss_of_masked_lm():
  """The loss of bench's first step (masked_lm with label smoothing and z-loss) is the training
  task's `loss_sums` on the same batch and dropout key, the task built as training builds it
  (from the byte tokenizer's facts), and not a plain cross entropy over every token."""
  cfg = _config("masked_lm", label_smoothing=0.1, z_loss=1e-2)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=259 + 1))
  result = run_benchmark(cfg, steps=1, warmup=0)  # its one step: step 0 of fresh params

  byte_facts = DataFacts(vocab_size=259, pad_id=0, bos_id=1, eos_id=2)
  train_task = kinds.build_task(cfg, byte_facts)
  assert train_task.config.model == bench.bench_task(cfg).config.model
  params = train_task.init_params(jax.random.PRNGKey(cfg.seed))
  batch = bench.bench_batch(train_task)
  step_rng = jax.random.fold_in(jax.random.PRNGKey(1), 0)  # bench's key, as the step folds it
  loss_sum, weight_sum, _ = train_task.loss_sums(params, batch, step_rng)
  training_loss = float(loss_sum / weight_sum)
  np.testing.assert_allclose(result["loss"], training_loss, rtol=1e-5)
  assert 0 < float(weight_sum) < batch["weights"].sum()  # only the masked tokens are scored

  logits = train_task.model.apply({"params": params}, batch["inputs"])
  plain_sum, plain_weight = cross_entropy_sums(logits, batch["targets"], batch["weights"])
  assert abs(float(plain_sum / plain_weight) - result["loss"]) > 1e-2
  plain_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, label_smoothing=0.0,
                                                                 z_loss=0.0))
  masked_only = kinds.build_task(plain_cfg, byte_facts).loss_sums(params, batch, step_rng)
  assert abs(float(masked_only[0] / masked_only[1]) - result["loss"]) > 1e-3


def test_bench_needs_the_image_shape_a_dataset_would_give():
  with pytest.raises(ConfigError, match="image_size.*image_channels"):
    run_benchmark(_config("vit_classifier", image_size=0), steps=1)
  with pytest.raises(ConfigError, match="patch_size"):
    run_benchmark(_config("vit_classifier", image_size=9), steps=1)


def test_bench_times_a_kind_known_only_to_the_registry(monkeypatch):
  toy = dataclasses.replace(kinds.KINDS["encoder_decoder"], name="toy_seq2seq")
  monkeypatch.setitem(kinds.KINDS, "toy_seq2seq", toy)
  monkeypatch.setattr(config_lib, "MODEL_KINDS", config_lib.MODEL_KINDS + ("toy_seq2seq",))
  result = run_benchmark(_config("toy_seq2seq"), steps=1, warmup=0)
  assert result["kind"] == "toy_seq2seq"
  assert result["tokens_per_s"] == pytest.approx(8 * (12 + 10) / result["step_s"])


def test_bench_profiles_the_requested_steps(tmp_path):
  result = run_benchmark(_config("decoder_lm", profile_steps="2,2"), steps=3, warmup=1,
                         workdir=str(tmp_path))
  assert result["step_s"] > 0
  assert glob.glob(str(tmp_path / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))


def test_bench_profile_needs_a_workdir_and_timed_steps():
  with pytest.raises(ConfigError, match="profile_steps"):
    run_benchmark(_config("decoder_lm", profile_steps="2,5"), steps=3, workdir="/tmp/x")
  with pytest.raises(ConfigError, match="workdir"):
    run_benchmark(_config("decoder_lm", profile_steps="1,1"), steps=3)


def test_bench_model_step_and_parallel_code_import_no_tensorflow():
  code = ("import sys, transformer.train.bench, transformer.train.steps, "
          "transformer.train.parallel, transformer.model.models, transformer.train.peaks, "
          "transformer.train.prefetch, transformer.train.profiler, transformer.train.runtime\n"
          "tf = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', "
          "'tensorflow_datasets'))\n"
          "print('TF-MODULES', tf)\n"
          "sys.exit(1 if tf else 0)\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
  assert "TF-MODULES []" in proc.stdout, proc.stdout + proc.stderr
  assert proc.returncode == 0


def test_bench_times_each_batch_size_dispatched_and_synced_and_names_the_best(capsys):
  results = bench.run_benchmarks(_config("decoder_lm"), [8, 16], steps=2, warmup=1)
  assert [r["tokens_per_s"] * r["step_s"] for r in results] == pytest.approx([8 * 16, 16 * 16])
  assert all(r["synced_step_s"] > 0 for r in results)
  out = capsys.readouterr().out
  assert "dispatched: 2 steps back to back" in out and "per-step synced: median of 2" in out
  best = max((8, 16), key=lambda b: results[(8, 16).index(b)]["tokens_per_s"])
  assert f"best: batch {best}," in out
  assert sum(line.strip().startswith("| decoder_lm |") for line in out.splitlines()) == 4


def test_a_batch_out_of_memory_is_one_line_naming_it(monkeypatch):
  """XLA's RESOURCE_EXHAUSTED is ~27 lines of buffer assignment; bench names the batch and the
  memory in one line (issue 31). Other errors pass through unchanged."""
  from transformer.errors import RunError
  xla = ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3221225472 bytes.\n"
         "BufferAssignment OOM Debugging.\nBufferAssignment stats:\n" + "  x\n" * 25)

  def fake(config, *args):
    if config.train.batch_size == 64:
      raise jax.errors.JaxRuntimeError(xla)
    raise KeyError("other")
  monkeypatch.setattr(bench, "run_benchmark", fake)
  config = from_config_dict(get_config("smoke"))
  with pytest.raises(RunError) as e:
    bench.run_benchmarks(config, [64])
  message = str(e.value)
  assert "\n" not in message and message.startswith("--mode=bench: batch 64 on ")
  assert "(asked for 3.00 GiB more)" in message and "--bench_batch_sizes" in message
  with pytest.raises(KeyError):
    bench.run_benchmarks(config, [8])


def test_bench_returns_the_measured_and_compiled_memory_as_numbers(capsys):
  result = run_benchmark(_config("decoder_lm"), steps=1, warmup=0)
  memory = result["memory"]
  assert set(memory) == {"device_peak_bytes", "device_bytes_limit", "compiled_argument_bytes",
                         "compiled_output_bytes", "compiled_temp_bytes", "compiled_alias_bytes",
                         "compiled_generated_code_bytes", "compiled_total_bytes",
                         "host_max_rss_bytes"}
  parts = [memory[f"compiled_{k}_bytes"] for k in ("argument", "output", "temp", "alias")]
  assert all(type(v) is int and v > 0 for v in parts)  # the donated state is aliased
  assert type(memory["compiled_generated_code_bytes"]) is int
  assert memory["compiled_total_bytes"] == parts[0] + parts[1] + parts[2] - parts[3]
  assert type(memory["host_max_rss_bytes"]) is int and memory["host_max_rss_bytes"] > 2**20
  for key in ("device_peak_bytes", "device_bytes_limit"):  # CPU devices report no stats
    assert memory[key] is None or (type(memory[key]) is int and memory[key] > 0)
  assert (result["platform"], result["device_kind"]) == (jax.devices()[0].platform,
                                                         jax.devices()[0].device_kind)
  # The printed line is made from the same figures.
  line = [x for x in capsys.readouterr().out.splitlines() if "peak memory" in x][0]
  assert line.endswith(bench._peak_memory(memory))
  assert f"compiled step needs {memory['compiled_total_bytes'] / 2**30:.2f} GiB" in line


def test_bench_prints_no_mfu_above_100_percent_from_a_too_low_cpu_peak(tmp_path, monkeypatch,
                                                                       capsys):
  """A CPU peak cached while other jobs shared the cores (here 1 kFLOP/s) is measured again
  once; still below the achieved rate (2 kFLOP/s), bench prints "MFU n/a (why)", never a
  percentage above 100, and the peak cache keeps the higher figure."""
  from transformer.train import peaks
  if jax.devices()[0].platform != "cpu":
    pytest.skip("the measured peak is the CPU's")
  monkeypatch.setenv("TRANSFORMER_CACHE_DIR", str(tmp_path))
  path = tmp_path / "cpu_peak.json"
  path.write_text(json.dumps({peaks._cpu_key(): {"flops_per_sec": 1e3, "measured": "busy"}}))
  calls = []
  monkeypatch.setattr(peaks, "measure_matmul_flops", lambda *a, **k: calls.append(1) or 2e3)
  result = run_benchmark(_config("decoder_lm", peak_flops_per_device=0.0), steps=1, warmup=0)
  out = capsys.readouterr().out
  assert result["mfu"] is None and len(calls) == 1
  assert "below the achieved" in result["mfu_problem"] and str(path) in result["mfu_problem"]
  assert f"MFU             n/a ({result['mfu_problem']})" in out
  percents = [float(p) for p in re.findall(r"MFU\s+([\d.]+)%", out)]
  assert percents == []
  row = [line for line in out.splitlines() if line.strip().startswith("| decoder_lm |")][0]
  assert "| n/a | measured |" in row
  assert [e["flops_per_sec"] for e in json.loads(path.read_text()).values()] == [2e3]
