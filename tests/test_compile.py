"""--mode=compile: the train step compiled ahead of time for TPU slices that are not here
(transformer/train/compile_for_topology.py, transformer/train/topologies.py), and the FLOPs
formula checked against compiled programs on CPU and on a TPU topology."""

import importlib.util
import math
import os
import subprocess
import sys

import jax
import pytest

from configs import gpt2_1b, gpt2_350m, gpt2_small
from transformer import kinds
from transformer.cli.flag_checks import check_flags
from transformer.config import ConfigError, from_config_dict
from transformer.errors import CommandLineError, RunError
from transformer.train import topologies
from transformer.train import compile_for_topology as aot
from transformer.train.state import count_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu (the [test] extra on Python >= 3.12) missing")


def _config(variant="smoke", path=None, **overrides):
  """A config from configs/default.py (or `path`'s module) with `section__field=value`."""
  c = (path or sys.modules["configs.default"]).get_config(variant)
  with c.unlocked():
    for key, value in overrides.items():
      section, field = key.split("__")
      c[section][field] = value
  return from_config_dict(c)


# A matmul-dominated step (wide layers, short rows): the formula's matmuls are nearly all of
# the compiled program's FLOPs. One layer keeps each compile short.
WIDE = dict(model__d_model=256, model__num_heads=4, model__num_layers=1, model__d_ff=1024,
            data__seq_len=64, data__src_len=48, data__tgt_len=32, train__batch_size=8,
            model__vocab_pad_multiple=64)  # 259 -> 320 (to 512, fsdp hits a libtpu bug: README)


# --- the topology table ------------------------------------------------------------------


def test_topology_names_count_chips_as_cloud_tpu_does():
  # v5e / v6e names count chips, v4 / v5p names count cores (two per chip, one megacore device)
  for name, topo in topologies.TOPOLOGIES.items():
    generation, n = name.split("-")
    per_chip = 2 if generation in ("v4", "v5p") else 1
    assert topo.chips * per_chip == int(n), name
  v5p = topologies.get("v5p-8").desc_kwargs()
  assert v5p == dict(platform="tpu", topology_name="v5:2x2x1", chip_config_name="megacore",
                     chips_per_host_bounds=(2, 2, 1), num_slices=1, wrap=(False, False, False))
  assert topologies.get("v5e-256").desc_kwargs(2)["topology_name"] == "v5e:16x16"
  assert topologies.get("v5e-256").wrap() == (True, True, False)
  assert topologies.get("v5e-8").hbm_gib == 16 and topologies.get("v5p-8").hbm_gib == 95
  for wanted in ("v4-8", "v5e-1", "v5e-4", "v5e-8", "v5e-16", "v5e-256", "v5p-8", "v5p-16",
                 "v6e-1", "v6e-4", "v6e-8"):
    assert wanted in topologies.TOPOLOGIES
  with pytest.raises(KeyError, match="v5e-.*v6e-"):
    topologies.get("v7-8")


@needs_libtpu
def test_each_topology_gives_its_chips_as_compile_only_devices():
  kinds_seen = {}
  for name in ("v4-8", "v5e-1", "v5e-8", "v5e-256", "v5p-16", "v6e-8"):
    devices = aot.topology_devices(topologies.get(name))
    assert len(devices) == topologies.get(name).chips, name
    kinds_seen[name.split("-")[0]] = devices[0].device_kind
  assert kinds_seen == {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5",
                        "v6e": "TPU v6 lite"}
  two = aot.topology_devices(topologies.get("v5e-4"), num_slices=2)
  assert len(two) == 8 and sorted({d.slice_index for d in two}) == [0, 1]
  assert "TPU_WORKER_HOSTNAMES" not in os.environ  # libtpu's settings do not outlive the call


# --- flags, config checks, the missing extra ---------------------------------------------


def test_compile_flags_are_checked_in_one_line_before_anything():
  def check(mode="compile", **values):
    check_flags(mode, values, set(values), "runs/x")
  with pytest.raises(CommandLineError, match="needs --topology=NAME.*v5e-"):
    check()
  with pytest.raises(CommandLineError, match="--topology=v5x-8: not a TPU slice"):
    check(topology="v5x-8")
  with pytest.raises(CommandLineError, match="--num_slices=0: must be at least 1"):
    check(topology="v5e-8", num_slices=0)
  with pytest.raises(CommandLineError, match="drop --compile_eval"):
    check(topology="v5e-8", compile_sweep=True, compile_eval=True)
  with pytest.raises(CommandLineError, match="--topology is not read by --mode=train"):
    check("train", topology="v5e-8")
  check(topology="v5p-8", num_slices=2, compile_sweep=True)
  with pytest.raises(ConfigError, match="parallel.dcn_data=2"):
    aot.check_config(_config(), num_slices=2)
  with pytest.raises(ConfigError, match="strategy=pmap"):
    aot.check_config(_config(parallel__strategy="pmap"))


def test_without_libtpu_the_mode_names_the_extra(monkeypatch):
  monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
  monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
  with pytest.raises(RunError, match=r"\.\[tpu\]") as e:
    aot.check_compiler()
  assert "\n" not in str(e.value)


def test_over_hbm_errors_give_the_needed_and_available_bytes():
  libtpu_0_0_50 = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, "
                   "the total memory required for HLO temporaries (17.50G) exceeds available "
                   "HBM (15.75G). HLO module: jit_train_step.")
  oom = aot._over_hbm(RuntimeError(libtpu_0_0_50))
  assert (oom.needed / aot.GIB, oom.available / aot.GIB) == (17.5, 15.75)
  oom = aot._over_hbm(RuntimeError("CompileTimeHbmOom: 15.98G > 15.75G"))
  assert (oom.needed / aot.GIB, oom.available / aot.GIB) == (15.98, 15.75)
  assert aot._over_hbm(RuntimeError("INVALID_ARGUMENT: sharding")) is None


# --- the batch search ---------------------------------------------------------------------


@pytest.mark.parametrize("answer", [0, 1, 2, 3, 7, 64, 100, 200])
def test_largest_fitting_finds_the_boundary_in_few_compiles(answer):
  calls = []

  def fits(k):
    calls.append(k)
    return k <= answer

  limit = 128
  assert aot.largest_fitting(fits, limit) == min(answer, limit)
  assert len(calls) <= 2 * math.log2(limit) + 2
  assert all(1 <= k <= limit for k in calls)


def test_sweep_turns_rows_per_device_into_global_batches(monkeypatch):
  """The search runs on rows per device; the global batch is that times data x fsdp, and
  each (remat, layout) gets its own search. The compiler is replaced by a budget of rows per
  device that grows with remat, so the answers are known."""
  budget = {"none": 5, "minimal": 9, "full": 40}
  seen = []

  def fake_compile(config, devices, where=""):
    par = config.parallel
    ways = len(devices) if (par.data == -1 or par.fsdp == -1) else par.data * par.fsdp
    rows = config.train.batch_size // ways
    seen.append((config.model.remat, par.data, par.fsdp, config.train.batch_size))
    if rows > budget[config.model.remat]:
      raise aot.OverHbm("over", None, None)
    return config, None, [aot.CompiledStep("train step", 0.0, rows, 0, 0, rows, 1.0)]

  monkeypatch.setattr(aot, "compile_steps", fake_compile)
  rows = aot.largest_batches(_config(), [object()] * 8, topologies.get("v5e-8"), limit=32,
                             log=lambda line: None)
  got = {(r["remat"], r["layout"]): (r["per_device"], r["global"], r["capped"]) for r in rows}
  assert got == {("none", "data"): (5, 40, False), ("none", "fsdp"): (5, 40, False),
                 ("minimal", "data"): (9, 72, False), ("minimal", "fsdp"): (9, 72, False),
                 ("full", "data"): (32, 256, True), ("full", "fsdp"): (32, 256, True)}
  assert {(d, f) for _, d, f, _ in seen} == {(-1, 1), (1, -1)}
  assert "| full | data | 32+ | 256 |" in aot.sweep_row(rows[4])


# --- compiles for TPU slices (tiny configs) ----------------------------------------------


@needs_libtpu
def test_tiny_config_compiles_for_a_4_and_an_8_chip_slice_and_fsdp_shards_the_state():
  lines = []
  steps = aot.run_compile(_config(), "v5e-4", eval_step=True, log=lines.append)
  text = "\n".join(lines)
  assert "mesh            jit on mesh data=4, fsdp=1, tensor=1" in text
  assert "4 devices (TPU v5 lite)" in text and "of 16 GiB HBM" in text
  assert [s.name for s in steps] == ["train step", "eval step"]
  assert "compiled FLOPs" in text and "compile time" in text
  train = steps[0]
  assert 0 < train.total_bytes < 16 * aot.GIB and train.flops > 0
  # 8 chips: the state replicated (data) vs sharded (fsdp). Every large leaf is split 8 ways,
  # but TPU layouts pad a shard's minor dimensions to tiles (a 64-wide head to 128), so the
  # fsdp step's arguments come to 1/6 (measured 1.78 vs 10.48 MB), not 1/8.
  v6e = aot.topology_devices(topologies.get("v6e-8"))
  by_layout = {}
  for layout in ("data", "fsdp"):
    config = aot.with_layout(_config(**WIDE), layout=layout)
    _, par, (step,) = aot.compile_steps(config, v6e)
    assert par.num_devices == 8 and par.shape["data" if layout == "data" else "fsdp"] == 8
    by_layout[layout] = step.argument_bytes
  assert by_layout["data"] / 8 <= by_layout["fsdp"] < by_layout["data"] / 4


def test_fsdp_keeps_the_batch_split_so_its_temporaries_stay_near_data_parallels():
  """With parameters split over fsdp, XLA's sharding propagation used to carry the d_model
  split into the activations: on 8 CPU devices this config's fsdp step had 161.5 MB of
  temporaries against data parallelism's 71.2 (3.79 vs 0.92 GiB for two GPT-2 small layers at
  batch 8 on a v5e-8). The residual stream's constraint (`model.common.constrain_residual`)
  keeps the batch split: 75.0 MB, fsdp then only adds a layer's gathered weights."""
  config = _config(**{**WIDE, "model__num_layers": 2, "train__batch_size": 64,
                      "data__seq_len": 128})
  temps = {}
  for layout in ("data", "fsdp"):
    _, par, (step,) = aot.compile_steps(aot.with_layout(config, layout=layout),
                                        jax.devices()[:8])
    assert par.shape["data" if layout == "data" else "fsdp"] == 8
    temps[layout] = step.temp_bytes
  assert temps["fsdp"] < 1.5 * temps["data"], temps


@needs_libtpu
def test_over_hbm_fails_in_one_line_without_a_traceback():
  # A 262144-row embedding of width 4096 (1.07B parameters, with Adam's moments and the
  # gradient ~17 GB) cannot fit one 16 GiB v5e chip.
  args = ["--mode=compile", "--topology=v5e-1", "--config=configs/default.py:smoke",
          "--config.model.vocab_pad_multiple=262144", "--config.model.d_model=4096",
          "--config.model.num_heads=32", "--config.model.d_ff=4096",
          "--config.model.num_layers=1", "--config.train.batch_size=1"]
  r = subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, capture_output=True,
                     text=True, timeout=280, env=dict(os.environ))
  assert r.returncode == 1, r.stderr[-2000:]
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert lines[0].startswith("Error: the train step does not fit: it needs ")
  assert "GiB per device and v5e-1 has 15.75 GiB" in lines[0]
  for hint in ("remat=full", "fsdp=-1", "batch_size", "loss_chunk"):
    assert hint in lines[0]


# --- the FLOPs formula against compiled programs -----------------------------------------

FLOPS_CASES = {
    "dense": {},
    "gqa": dict(model__num_kv_heads=2),
    "swiglu": dict(model__activation="swiglu"),
    "encoder_decoder": dict(model__kind="encoder_decoder"),
    "vocab_pad_multiple": dict(model__vocab_pad_multiple=1000),  # 259 -> 1000 rows
    # One chunk: XLA's cost analysis counts a loop's body once, so more chunks would read low.
    "loss_chunk": dict(train__loss_chunk=64),
}
# The formula counts matmuls; the compiled program adds the elementwise work (norms, softmax,
# GELU, Adam): at d_model 256 that is 1-3 %. Stated tolerance: compiled / formula in [1, 1.05].
FLOPS_TOLERANCE = 0.05


def _expected_flops(config) -> float:
  """The formula with the masked half of causal attention (XLA computes it), plus, for
  loss_chunk, the output layer's forward once more: each chunk is rematerialized
  (`jax.checkpoint` in losses.chunked_cross_entropy_sums), so the backward pass recomputes it."""
  flops = kinds.experiment_flops_per_step(config, masked_too=True)
  if config.train.loss_chunk:
    m = config.model
    flops += 2 * config.train.batch_size * config.data.seq_len * m.d_model * m.padded_vocab_size
  return flops


@pytest.mark.parametrize("case", FLOPS_CASES)
def test_flops_formula_matches_the_compiled_train_step_on_cpu(case):
  config = _config(**{**WIDE, **FLOPS_CASES[case]})
  config, _, (step,) = aot.compile_steps(config, jax.devices()[:1])
  ratio = step.flops / _expected_flops(config)
  assert 1.0 <= ratio <= 1 + FLOPS_TOLERANCE, (case, ratio)
  if case == "vocab_pad_multiple":
    assert config.model.padded_vocab_size == 1000


@needs_libtpu
def test_flops_formula_matches_the_compiled_train_step_on_a_tpu_slice():
  """GQA and SwiGLU together, the batch split over a v5e-4: per-device FLOPs x 4."""
  config = _config(**WIDE, model__num_kv_heads=2, model__activation="swiglu")
  config, par, (step,) = aot.compile_steps(config, aot.topology_devices(topologies.get("v5e-4")))
  ratio = step.flops * par.num_devices / _expected_flops(config)
  assert 1.0 <= ratio <= 1 + FLOPS_TOLERANCE, ratio


def test_the_report_says_when_loops_make_the_compiled_count_low():
  assert aot.compiled_flops_note(_config()) == ""
  note = aot.compiled_flops_note(_config(model__scan_layers=True, train__loss_chunk=32))
  assert "model.scan_layers, train.loss_chunk" in note and "once" in note


def test_gpu_config_lowers_for_cuda_with_its_padded_vocabulary():
  """No GPU here: JAX lowers for CUDA anyway. GPT-2's :gpu variant (bfloat16; XLA attention,
  since cuDNN's cannot be traced without cuDNN) computes 50304 logit columns and drops the 47
  padding ones."""
  config = _config("gpu", gpt2_small, model__attention_impl="xla", model__num_layers=1,
                   data__seq_len=128, train__batch_size=4)
  text = aot.lower_for_platform(config, jax.devices()[:1], "cuda")
  assert "x50304x" in text and "x50257x" in text and "bf16" in text
  with pytest.raises(ValueError, match="cudnn.*needs a GPU backend"):
    aot.lower_for_platform(_config("gpu", gpt2_small, model__num_layers=1, data__seq_len=128,
                                   train__batch_size=4), jax.devices()[:1], "cuda")


# --- the presets of the README's table ---------------------------------------------------


def _gpt2_parameters(layers: int, d: int, vocab: int = 50257, context: int = 1024) -> int:
  """GPT-2's count in closed form: per block 12 d^2 weights (QKV, projection, a 4d MLP) and
  13 d biases and norm parameters; token and position tables; the final norm (tied output)."""
  return layers * (12 * d * d + 13 * d) + vocab * d + context * d + 2 * d


@pytest.mark.parametrize("module, layers, d", [(gpt2_small, 12, 768), (gpt2_350m, 24, 1024),
                                               (gpt2_1b, 18, 2048)])
def test_gpt2_presets_have_their_parameter_counts(module, layers, d):
  from transformer.train import bench
  config = from_config_dict(module.get_config())
  shapes = jax.eval_shape(bench.bench_task(config).init_params, jax.random.PRNGKey(0))
  padding_rows = config.model.padded_vocab_size - 50257  # 47 rows to 50304
  assert count_params(shapes) == _gpt2_parameters(layers, d) + padding_rows * d
  assert _gpt2_parameters(12, 768) == 124_439_808  # GPT-2 small as published


@pytest.mark.slow
@needs_libtpu
def test_gpt2_small_fits_a_v5p_8_with_remat():
  lines = []
  config = _config("", gpt2_small, train__batch_size=32, model__remat="full")
  (step,) = aot.run_compile(config, "v5p-8", log=lines.append)
  assert step.total_bytes < 95 * aot.GIB
  # remat=full recomputes the blocks' forward pass (not the logits and loss): more than the
  # formula with the masked half of attention, less than its 4/3 (measured: 1.19)
  ratio = step.flops * 4 / kinds.experiment_flops_per_step(config, masked_too=True)
  assert 1.1 < ratio < 4 / 3, ratio


@pytest.mark.slow
@needs_libtpu
def test_remat_cuts_the_temporaries_of_a_deeper_model():
  config = _config(**{**WIDE, "model__num_layers": 4, "data__seq_len": 512})
  devices = aot.topology_devices(topologies.get("v5e-1"))
  temps = {remat: aot.compile_steps(aot.with_layout(config, remat=remat), devices)[2][0].temp_bytes
           for remat in ("none", "full")}
  assert temps["full"] < temps["none"] / 2, temps


@needs_libtpu
def test_the_readmes_fits_table_has_the_scripts_header_and_a_cell_for_every_compile():
  """The README's table is the script's output, not typed: its header is `header()`'s (up to
  the versions, which name the machine that made it), and it has one row per preset, layout
  and remat in the script's order, each cell GiB or OOM."""
  import re
  spec = importlib.util.spec_from_file_location("fits_table",
                                                os.path.join(ROOT, "scripts", "fits_table.py"))
  ft = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ft)
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    block = f.read().split(ft.START, 1)[1].split(ft.END, 1)[0].strip("\n").split("\n")
  devices = {t: aot.topology_devices(topologies.get(t)) for t in ft.TOPOLOGIES}
  head = ft.header(devices)
  unversioned = lambda line: line.split(" jax ")[0]
  assert [unversioned(x) for x in block[:len(head)]] == [unversioned(x) for x in head]
  rows = [line.split(" | ") for line in block[len(head):]]
  assert [(r[0].strip("| "), r[1], r[2]) for r in rows] == [
      (p, layout, remat) for p in ft.PRESETS for layout in ft.LAYOUTS for remat in ft.REMATS]
  for r in rows:
    cells = [c.strip("| ") for c in r[3:]]
    assert len(cells) == len(ft.TOPOLOGIES)
    assert all(re.fullmatch(r"\d+\.\d\d|OOM \(\d+\.\d\)", c) for c in cells), r
