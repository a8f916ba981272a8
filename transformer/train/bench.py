"""`python launch.py --mode=bench`: time the train step of a config on random inputs.

Works for every model kind (`transformer.kinds`). The step is the training step itself: the
kind's task (`transformer.tasks`), with its loss as configured (masked-LM masking, label
smoothing, z-loss), built from facts read off the config instead of a dataset
(`Kind.config_facts`), on the task's `random_batch`. Prints tokens/s, step time, MFU (FLOPs
convention in `transformer/model/flops.py`; the peak and its source are printed; never above
100%: `peaks.checked_mfu`), compile time and peak memory (also returned as numbers:
`memory_figures`), then one markdown table row (`SUMMARY_HEADER`) to paste into a table of
results. No dataset is read and TensorFlow is never imported: batches are random token ids
with the vocabulary `model.vocab_size` as the config gives it (so a GPT-2 config is timed with
GPT-2's 50257-token vocabulary whatever tokenizer its data section names), or random images of
`model.image_size`/`image_channels`, which a vit_classifier config must then set (in training
its dataset sets them). The batch is placed on the devices once, so the figures are those of
the step alone.

The step time is that of `steps` steps dispatched back to back with one block at the end (the
host never makes the device wait, as in training); the median of as many steps each synced
(blocked on) is printed beside it, labelled. `run_benchmarks` times several batch sizes in turn
(`--bench_batch_sizes`), a row each, and names the fastest in tokens/s.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time

import jax
import numpy as np

from transformer import kinds
from transformer.config import ConfigError, ExperimentConfig
from transformer.errors import out_of_memory
from transformer.train import optim, peaks
from transformer.train.parallel import Parallel
from transformer.train.profiler import StepProfiler
from transformer.train.state import count_params
from transformer.train.writers import log

SUMMARY_HEADER = ("| kind | params | batch x tokens | dtype | attention | remat | scan | devices "
                  "| step ms | tokens/s | MFU | peak | compile s |")


def tokens_per_step(config: ExperimentConfig) -> int:
  """Token positions the model reads per step (source + target for encoder_decoder, patches
  and [CLS] for vit_classifier)."""
  return config.train.batch_size * kinds.get(config.model.kind).tokens_per_row(config)


def bench_task(config: ExperimentConfig):
  """The training task of `config`'s kind, on the facts the config gives (no dataset)."""
  kind = kinds.get(config.model.kind)
  return kind.build_task(config, kind.config_facts(config))


def bench_batch(task) -> dict:
  """This process's rows of a random batch of the task's shapes (NumPy)."""
  rows = task.config.train.batch_size // jax.process_count()
  return task.random_batch(rows, np.random.default_rng(0))


def build_parallel(task) -> Parallel:
  """The train step of `task` (its own `loss_sums`) on the config's device layout."""
  config = task.config
  return Parallel(config.parallel, init_params=task.init_params,
                  tx=optim.build_optimizer(config.optim, config.train.num_steps),
                  loss_sums=task.loss_sums, eval_sums=task.eval_sums,
                  global_batch_size=config.train.batch_size,
                  micro_batches=config.train.micro_batches,
                  init_boxed_params=task.init_boxed_params)


# memory_analysis() attribute behind each compiled_* figure of `memory_figures`.
_COMPILED_FIELDS = {"compiled_argument_bytes": "argument_size_in_bytes",
                    "compiled_output_bytes": "output_size_in_bytes",
                    "compiled_temp_bytes": "temp_size_in_bytes",
                    "compiled_alias_bytes": "alias_size_in_bytes",
                    "compiled_generated_code_bytes": "generated_code_size_in_bytes"}


def memory_figures(compiled) -> dict:
  """Memory of the benchmarked step in bytes (ints, None where not reported): the first local
  device's measured `device_peak_bytes` and `device_bytes_limit` (`memory_stats()`), XLA's
  compiled memory analysis of the same step (`compiled_*`; `compiled_total_bytes` = argument +
  output + temp - alias, per device), and this process's `host_max_rss_bytes`."""
  stats = jax.local_devices()[0].memory_stats() or {}
  memory = {"device_peak_bytes": stats.get("peak_bytes_in_use") or None,
            "device_bytes_limit": stats.get("bytes_limit") or None}
  try:
    analysis = compiled.memory_analysis()
  except Exception:  # noqa: BLE001 -- not every backend reports it
    analysis = None
  for field, attr in _COMPILED_FIELDS.items():
    value = getattr(analysis, attr, None)
    memory[field] = int(value) if isinstance(value, (int, np.integer)) else None
  parts = [memory[f"compiled_{k}_bytes"] for k in ("argument", "output", "temp", "alias")]
  memory["compiled_total_bytes"] = (None if None in parts
                                    else parts[0] + parts[1] + parts[2] - parts[3])
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
  memory["host_max_rss_bytes"] = rss * (1 if sys.platform == "darwin" else 1024)
  return memory


def _peak_memory(memory: dict) -> str:
  """The `peak memory` line of the log, from `memory_figures`' dict."""
  parts = []
  if memory["device_peak_bytes"] is not None:
    parts.append(f"device peak {memory['device_peak_bytes'] / 2**30:.2f} GiB")
  if memory["compiled_total_bytes"] is not None:
    parts.append(f"compiled step needs {memory['compiled_total_bytes'] / 2**30:.2f} GiB per "
                 f"device (XLA estimate: args {memory['compiled_argument_bytes'] / 2**30:.2f} "
                 f"+ temps {memory['compiled_temp_bytes'] / 2**30:.2f})")
  parts.append(f"process max RSS {memory['host_max_rss_bytes'] / 2**30:.2f} GiB")
  return "; ".join(parts)


def _check_steps(config: ExperimentConfig, steps: int, workdir: str) -> None:
  if steps < 1:
    raise ConfigError(f"--bench_steps={steps} must be >= 1.")
  profile = config.train.profile_range
  if profile and (not workdir or profile[1] > steps):
    raise ConfigError(f"--config.train.profile_steps={config.train.profile_steps!r}: bench "
                      f"profiles among its {steps} timed steps (--bench_steps) and needs a "
                      "--workdir to write the trace to.")


def _time_dispatched(par: Parallel, compiled, state, batch: dict, steps: int):
  """Seconds per step of `steps` steps dispatched back to back and blocked on once at the
  end; returns it with the state after them."""
  dropout_rng = par.place_replicated(jax.random.PRNGKey(1))  # not copied at each step
  t0 = time.perf_counter()
  for _ in range(steps):
    state, metrics = par.run_compiled(compiled, state, batch, dropout_rng)
  jax.block_until_ready((state, metrics))
  return (time.perf_counter() - t0) / steps, state


def _time_steps(par: Parallel, compiled, state, batch: dict, steps: int, warmup: int,
                profile, workdir: str) -> tuple[float, list[float], dict]:
  """Seconds per step dispatched back to back (`_time_dispatched`, after the synced ones), the
  seconds of each step synced on its own (the profiled ones left out), and the metrics of the
  last synced step."""
  dropout_rng = par.place_replicated(jax.random.PRNGKey(1))  # not copied at each step
  for _ in range(warmup):
    state, metrics = par.run_compiled(compiled, state, batch, dropout_rng)
  jax.block_until_ready(state)
  times = []
  with StepProfiler(profile, workdir) as prof:
    for i in range(1, steps + 1):
      prof.before_step(i)
      t0 = time.perf_counter()
      state, metrics = par.run_compiled(compiled, state, batch, dropout_rng)
      jax.block_until_ready((state, metrics))
      if not (profile and profile[0] <= i <= profile[1]):
        times.append(time.perf_counter() - t0)
      prof.after_step(i, (state, metrics))
  if not times:
    raise ConfigError("Every timed step was profiled; raise --bench_steps beyond "
                      "train.profile_steps to get timings too.")
  dispatched_s, _ = _time_dispatched(par, compiled, state, batch, steps)
  return dispatched_s, times, metrics


def _figures(config: ExperimentConfig, par: Parallel, n_params: int, compile_s: float,
             step_s: float, loss: float) -> dict:
  """Throughput, model FLOP/s and MFU of a step of `step_s` seconds, and the device. `mfu` is
  None (`mfu_problem` says why) without a peak or with one below the achieved rate
  (`peaks.checked_mfu`, which first measures a CPU peak again); never above 1."""
  step_flops = kinds.experiment_flops_per_step(config)
  override = config.train.peak_flops_per_device
  peak, peak_source = peaks.peak_flops_per_device(override, config.model.dtype)
  check = peaks.checked_mfu(step_flops / step_s / par.num_devices, peak, peak_source,
                            peaks.peak_is_measured(override))
  dev = jax.devices()[0]
  return {"kind": config.model.kind, "params": n_params, "devices": par.num_devices,
          "platform": dev.platform, "device_kind": dev.device_kind,
          "compile_s": compile_s, "step_s": step_s,
          "tokens_per_s": tokens_per_step(config) / step_s,
          "model_tflops_per_s": step_flops / step_s / 1e12, "step_flops": step_flops,
          "mfu": check.mfu, "mfu_problem": check.problem,
          "peak": check.peak, "peak_source": check.source, "loss": loss}


def _log_figures(config: ExperimentConfig, par: Parallel, result: dict,
                 times: list[float]) -> None:
  dev = jax.devices()[0]
  m = config.model
  rows_desc = kinds.get(m.kind).row_shape(config)
  log(f"bench: {m.kind} {result['params'] / 1e6:.1f}M params, d_model {m.d_model}, "
      f"{m.num_layers} layers, vocab {m.vocab_size}; batch "
      f"{config.train.batch_size} x {rows_desc} tokens; dtype {m.dtype}, "
      f"params {m.param_dtype}, attention {m.attention_impl}, remat "
      f"{m.remat}, scan {m.scan_layers}; {par.describe()} "
      f"[{dev.platform}: {dev.device_kind}]")
  log(f"  compile time    {result['compile_s']:.1f} s")
  log(f"  step time       {result['step_s'] * 1e3:.1f} ms (dispatched: {len(times)} steps back "
      f"to back, blocked once at the end)")
  log(f"  synced step     {result['synced_step_s'] * 1e3:.1f} ms (per-step synced: median of "
      f"{len(times)}; min {min(times) * 1e3:.1f})")
  log(f"  tokens/s        {result['tokens_per_s']:,.0f}")
  log(f"  model FLOPs     {result['step_flops'] / 1e12:.4f} TFLOP/step (MaxText convention: "
      f"6N-style matmul count, causal attention halved) = "
      f"{result['model_tflops_per_s']:.4f} TFLOP/s")
  if result["mfu"] is not None:
    log(f"  MFU             {result['mfu']:.1%} of "
        f"{result['peak'] * par.num_devices / 1e12:.3f} TFLOP/s ({result['peak_source']})")
  else:
    log(f"  MFU             n/a ({result['mfu_problem']})")
  log(f"  peak memory     {_peak_memory(result['memory'])}")
  log(f"  table row       {SUMMARY_HEADER}")
  log(f"                  {summary_row(config, result, dev)}")


def run_benchmark(config: ExperimentConfig, steps: int = 10, warmup: int = 2,
                  workdir: str = "") -> dict:
  """Compiles and times `steps` train steps (after `warmup`); prints and returns the figures
  (`_figures`' dict, with `synced_step_s` and `memory`: `memory_figures`).

  With `train.profile_steps=a,b` (counted among the timed steps, 1-based) and a `workdir`,
  those steps are traced into `<workdir>/profile` (and then not timed).
  """
  _check_steps(config, steps, workdir)
  task = bench_task(config)  # a config without a usable image shape fails here
  config = task.config
  host_batch = bench_batch(task)
  par = build_parallel(task)
  t0 = time.perf_counter()
  state = par.init_state(jax.random.PRNGKey(config.seed))
  n_params = count_params(par.params(state))
  batch = par.place_batch(host_batch)
  jax.block_until_ready((state, batch))
  init_s = time.perf_counter() - t0  # compiling and running the initializer, placing the batch

  t0 = time.perf_counter()
  compiled = par.compile_train_step(state, batch, jax.random.PRNGKey(1))
  compile_s = time.perf_counter() - t0
  dispatched_s, times, metrics = _time_steps(par, compiled, state, batch, steps, warmup,
                                             config.train.profile_range, workdir)
  result = _figures(config, par, n_params, compile_s, dispatched_s, float(metrics["loss"]))
  result["synced_step_s"] = float(np.median(times))
  result["init_s"] = init_s
  result["memory"] = memory_figures(compiled)
  _log_figures(config, par, result, times)
  return result


def run_benchmarks(config: ExperimentConfig, batch_sizes: list[int], steps: int = 10,
                   warmup: int = 2, workdir: str = "") -> list[dict]:
  """`run_benchmark` at each global batch size in turn (none given: the config's), then the
  table rows together and the batch size with the most tokens/s. Returns the results."""
  results, rows = [], []
  for size in batch_sizes or [config.train.batch_size]:
    sized = dataclasses.replace(config, train=dataclasses.replace(config.train,
                                                                  batch_size=size))
    try:
      results.append(run_benchmark(sized, steps, warmup, workdir))
    except Exception as e:  # XLA's OOM is many lines; anything else re-raised
      oom = out_of_memory(e, f"--mode=bench: batch {size} on {jax.devices()[0].device_kind}",
                          "Give smaller --bench_batch_sizes, or more --config.train."
                          "micro_batches.")
      if oom is None:
        raise
      raise oom from None
    rows.append(summary_row(sized, results[-1], jax.devices()[0]))
  if len(results) > 1:
    best = max(range(len(results)), key=lambda i: results[i]["tokens_per_s"])
    log(f"bench: {len(results)} batch sizes")
    log(f"  {SUMMARY_HEADER}")
    for row in rows:
      log(f"  {row}")
    log(f"  best: batch {batch_sizes[best]}, {results[best]['tokens_per_s']:,.0f} tokens/s, "
        f"step {results[best]['step_s'] * 1e3:.1f} ms (dispatched)")
  return results


def summary_row(config: ExperimentConfig, result: dict, device) -> str:
  """One markdown row under `SUMMARY_HEADER`."""
  m = config.model
  length = kinds.get(m.kind).row_shape(config)
  mfu = f"{result['mfu']:.1%}" if result["mfu"] is not None else "n/a"
  peak = "measured" if device.platform == "cpu" else "data sheet"
  if config.train.peak_flops_per_device > 0:
    peak = "given"
  return (f"| {m.kind} | {result['params'] / 1e6:.1f}M | {config.train.batch_size} x {length} "
          f"| {m.dtype} | {m.attention_impl} | {m.remat} | {m.scan_layers} "
          f"| {result['devices']} x {device.device_kind} | {result['step_s'] * 1e3:.1f} "
          f"| {result['tokens_per_s']:,.0f} | {mfu} | {peak} | {result['compile_s']:.1f} |")
