"""One measurement of `scripts/accelerator_report.py`, in a process of its own:

  python scripts/accelerator_worker.py probe '{"matmul": "gpu"|"cpu"|"tiny"}'
  python scripts/accelerator_worker.py bench '{"config": "configs/x.py[:variant]",
                                               "overrides": {...}, "steps": N}'

Prints its result as one JSON line after `ACCELERATOR_RESULT ` (the parent reads the last such
line), `{"oom": true, "error": ...}` for a bench that does not fit in device memory, or
`{"error": ...}` for any other failure (exit status 1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

STARTED = time.monotonic()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

import accelerator_trace  # noqa: E402 -- pure: no JAX

MARK = "ACCELERATOR_RESULT "
# The matmul of the probe per profile: (size, dtype). On CPU it is the peak MFU is read against
# (transformer/train/peaks.py), so it is peaks' own float32 2048 x 2048.
MATMUL = {"gpu": (8192, "bfloat16"), "cpu": (2048, "float32"), "tiny": (256, "float32")}


def load_config(config_arg: str, overrides: dict):
  """The ExperimentConfig of `configs/x.py[:variant]` with `overrides` ('section.field')."""
  from transformer.config import from_config_dict
  from transformer.sweep.points import apply_point
  path, _, variant = config_arg.partition(":")
  spec = importlib.util.spec_from_file_location("bench_config", os.path.join(ROOT, path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return from_config_dict(apply_point(module.get_config(variant), overrides))


def probe(spec: dict) -> dict:
  """The devices, and a matmul's achieved rate; on CPU also the peak MFU is read against,
  measured again (kept only if higher: a busy machine measures too low)."""
  from transformer.train import runtime
  runtime.skip_absent_tpu()
  import jax
  from transformer.train import peaks
  dev = jax.devices()[0]
  size, dtype = MATMUL[spec["matmul"]]
  out = {"platform": dev.platform, "device_kind": dev.device_kind,
         "device_count": jax.device_count(),
         "bytes_limit": (dev.memory_stats() or {}).get("bytes_limit"),
         "matmul": {"size": size, "dtype": dtype,
                    "flops_per_s": peaks.measure_matmul_flops(size, 10, dev, dtype)}}
  if dev.platform == "cpu":
    peak, source = peaks.remeasure_cpu_peak()
  else:
    peak, source = peaks.peak_flops_per_device(0.0, "bfloat16")
  out["peak"] = {"flops_per_s": peak, "source": source}
  return out


def bench(spec: dict) -> dict:
  """bench.run_benchmark's figures for one config, made JSON-able."""
  from transformer.errors import out_of_memory
  from transformer.train import bench as bench_lib
  from transformer.train import runtime
  profile = spec.get("trace_steps")  # [first, last] timed steps to trace
  overrides = dict(spec["overrides"], **({"train.profile_steps": f"{profile[0]},{profile[1]}"}
                                         if profile else {}))
  config = load_config(spec["config"], overrides)
  # As launch.py does before a backend starts: bench times what training would run.
  runtime.add_gpu_xla_flags(config.train.xla_gpu_flags)
  runtime.skip_absent_tpu()
  if config.train.compilation_cache_dir:
    runtime.enable_compilation_cache(config.train.compilation_cache_dir)
  started = time.monotonic()
  workdir = tempfile.mkdtemp(prefix="accelerator-trace-") if profile else ""
  try:
    result = bench_lib.run_benchmark(config, steps=spec["steps"], warmup=2, workdir=workdir)
    if profile:
      result["profile"] = accelerator_trace.read_profile(workdir, profile[1] - profile[0] + 1)
  except Exception as e:  # XLA's OOM is many lines; anything else re-raised
    oom = out_of_memory(e, f"batch {config.train.batch_size}", "")
    if oom is None:
      raise
    return {"oom": True, "error": str(oom)}
  finally:
    if workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  m = config.model
  result["config"] = {"kind": m.kind, "dtype": m.dtype, "attention": m.attention_impl,
                      "remat": m.remat, "scan": m.scan_layers,
                      "batch": config.train.batch_size, "length": config.data.seq_len,
                      "vocab_pad_multiple": m.vocab_pad_multiple,
                      "loss_chunk": config.train.loss_chunk}
  result["xla_flags"] = os.environ.get("XLA_FLAGS", "")
  # Where a row's time goes: imports and config, then run_benchmark (init, compile, steps).
  result["phases_s"] = {"startup": round(started - STARTED, 1),
                        "run_benchmark": round(time.monotonic() - started, 1),
                        "init": round(result["init_s"], 1),
                        "compile": round(result["compile_s"], 1)}
  return json.loads(json.dumps(result, default=float))


def main(argv) -> int:
  kind, spec = argv[1], json.loads(argv[2])
  try:
    result = {"probe": probe, "bench": bench}[kind](spec)
  except Exception as e:  # noqa: BLE001 -- the parent reads the line, the trace stays in the log
    import traceback
    traceback.print_exc()
    print(MARK + json.dumps({"error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
    return 1
  result["process_s"] = round(time.monotonic() - STARTED, 1)  # imports, init, compile, steps
  print(MARK + json.dumps(result), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
