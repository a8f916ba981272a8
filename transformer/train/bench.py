"""`python launch.py --mode=bench`: time the train step of a config on random inputs.

Works for every model kind (`transformer.kinds`; each gives its random inputs). Prints tokens/s,
step time, MFU (FLOPs convention in `transformer/train/flops.py`; the peak and its source are
printed), compile time and peak memory, then one markdown table row (`SUMMARY_HEADER`) to paste
into a table of results. No dataset is read and TensorFlow is never imported: batches are
random token ids with the vocabulary `model.vocab_size` as the config gives it (so a GPT-2
config is timed with GPT-2's 50257-token vocabulary whatever tokenizer its data section
names), or random images of `model.image_size`/`image_channels`, which a vit_classifier
config must then set (in training its dataset sets them). The batch is placed on the devices
once, so the figures are those of the step alone.
"""

from __future__ import annotations

import resource
import time

import jax
import numpy as np

from transformer import kinds
from transformer.config import ConfigError, ExperimentConfig
from transformer.model.models import build_model
from transformer.train import flops, optim
from transformer.train.losses import cross_entropy_sums
from transformer.train.parallel import Parallel
from transformer.train.profiler import StepProfiler
from transformer.train.state import count_params
from transformer.train.writers import log

SUMMARY_HEADER = ("| kind | params | batch x tokens | dtype | attention | remat | scan | devices "
                  "| step ms | tokens/s | MFU | peak | compile s |")


def random_batch(config: ExperimentConfig, rows: int, rng: np.random.Generator) -> dict:
  """Random inputs of the shapes the kind's task feeds its model, as NumPy arrays (the kind's
  `random_batch` in `transformer.kinds`): its model inputs, `targets` and `weights`."""
  return kinds.get(config.model.kind).random_batch(config, rows, rng)


def tokens_per_step(config: ExperimentConfig) -> int:
  """Token positions the model reads per step (source + target for encoder_decoder, patches
  and [CLS] for vit_classifier)."""
  return config.train.batch_size * kinds.get(config.model.kind).tokens_per_row(config)


def model_functions(config: ExperimentConfig):
  """`(init_boxed_params, init_params, loss_sums, eval_sums)` of the config's model on
  `random_batch` inputs; the same pure-function interface the tasks give `Parallel`."""
  import flax.linen as nn  # noqa: PLC0415
  model = build_model(config.model)
  kind = kinds.get(config.model.kind)
  example = random_batch(config, 1, np.random.default_rng(0))

  def logits(params, batch, rng=None):
    out = model.apply({"params": params}, *(batch[k] for k in kind.model_inputs),
                      deterministic=rng is None, rngs=None if rng is None else {"dropout": rng})
    # Classifiers give `[rows, classes]`: scored as one "token" per row (targets `[rows, 1]`).
    return out.reshape(batch["targets"].shape + out.shape[-1:])

  def boxed(rng):
    return model.init({"params": rng}, *(example[k] for k in kind.model_inputs))["params"]

  def loss_sums(params, batch, rng):
    return cross_entropy_sums(logits(params, batch, rng), batch["targets"], batch["weights"])

  def eval_sums(params, batch):
    s, w = cross_entropy_sums(logits(params, batch), batch["targets"], batch["weights"])
    return {"loss_sum": s, "tokens": w}

  return boxed, (lambda rng: nn.meta.unbox(boxed(rng))), loss_sums, eval_sums


def _peak_memory(compiled) -> str:
  parts = []
  stats = jax.local_devices()[0].memory_stats() or {}
  if "peak_bytes_in_use" in stats:
    parts.append(f"device peak {stats['peak_bytes_in_use'] / 2**30:.2f} GiB")
  try:
    m = compiled.memory_analysis()
    total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
             - m.alias_size_in_bytes)
    parts.append(f"compiled step needs {total / 2**30:.2f} GiB per device (XLA estimate: "
                 f"args {m.argument_size_in_bytes / 2**30:.2f} + temps "
                 f"{m.temp_size_in_bytes / 2**30:.2f})")
  except Exception:  # noqa: BLE001 -- not every backend reports it
    pass
  parts.append(f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
  return "; ".join(parts)


def run_benchmark(config: ExperimentConfig, steps: int = 10, warmup: int = 2,
                  workdir: str = "") -> dict:
  """Compiles and times `steps` train steps (after `warmup`); prints and returns the figures.

  With `train.profile_steps=a,b` (counted among the timed steps, 1-based) and a `workdir`,
  those steps are traced into `<workdir>/profile` (and then not timed).
  """
  if steps < 1:
    raise ConfigError(f"--bench_steps={steps} must be >= 1.")
  profile = config.train.profile_range
  if profile and (not workdir or profile[1] > steps):
    raise ConfigError(f"--config.train.profile_steps={config.train.profile_steps!r}: bench "
                      f"profiles among its {steps} timed steps (--bench_steps) and needs a "
                      "--workdir to write the trace to.")
  rows = config.train.batch_size // jax.process_count()
  host_batch = random_batch(config, rows, np.random.default_rng(0))  # bad shapes fail here
  boxed, init_params, loss_sums, eval_sums = model_functions(config)
  tx = optim.build_optimizer(config.optim, config.train.num_steps)
  par = Parallel(config.parallel, init_params=init_params, tx=tx, loss_sums=loss_sums,
                 eval_sums=eval_sums, global_batch_size=config.train.batch_size,
                 micro_batches=config.train.micro_batches, init_boxed_params=boxed)
  state = par.init_state(jax.random.PRNGKey(config.seed))
  n_params = count_params(par.params(state))
  batch = par.place_batch(host_batch)
  dropout_rng = jax.random.PRNGKey(1)

  t0 = time.perf_counter()
  compiled = par.compile_train_step(state, batch, dropout_rng)
  compile_s = time.perf_counter() - t0
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
  step_s = float(np.median(times))
  step_flops = flops.experiment_flops_per_step(config)
  peak, peak_source = flops.peak_flops_per_device(
      config.train.peak_flops_per_device, config.model.dtype)
  result = {"kind": config.model.kind, "params": n_params, "devices": par.num_devices,
            "compile_s": compile_s, "step_s": step_s,
            "tokens_per_s": tokens_per_step(config) / step_s,
            "model_tflops_per_s": step_flops / step_s / 1e12,
            "mfu": step_flops / step_s / (peak * par.num_devices) if peak else None,
            "peak_source": peak_source, "loss": float(metrics["loss"])}
  dev = jax.devices()[0]
  m = config.model
  rows_desc = kinds.get(m.kind).row_shape(config)
  log(f"bench: {m.kind} {n_params / 1e6:.1f}M params, d_model {m.d_model}, "
      f"{m.num_layers} layers, vocab {m.vocab_size}; batch "
      f"{config.train.batch_size} x {rows_desc} tokens; dtype {m.dtype}, "
      f"params {m.param_dtype}, attention {m.attention_impl}, remat "
      f"{m.remat}, scan {m.scan_layers}; {par.describe()} "
      f"[{dev.platform}: {dev.device_kind}]")
  log(f"  compile time    {compile_s:.1f} s")
  log(f"  step time       {step_s * 1e3:.1f} ms (median of {len(times)}; "
      f"min {min(times) * 1e3:.1f})")
  log(f"  tokens/s        {result['tokens_per_s']:,.0f}")
  log(f"  model FLOPs     {step_flops / 1e12:.4f} TFLOP/step (MaxText convention: 6N-style "
      f"matmul count, causal attention halved) = {result['model_tflops_per_s']:.4f} TFLOP/s")
  if peak:
    log(f"  MFU             {result['mfu']:.1%} of {peak * par.num_devices / 1e12:.3f} TFLOP/s "
        f"({peak_source})")
  else:
    log(f"  MFU             n/a ({peak_source})")
  log(f"  peak memory     {_peak_memory(compiled)}")
  log(f"  table row       {SUMMARY_HEADER}")
  log(f"                  {summary_row(config, result, dev)}")
  return result


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
