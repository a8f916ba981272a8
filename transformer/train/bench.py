"""`python launch.py --mode=bench`: time the train step of a config on random tokens.

Prints tokens/s, step time, MFU (FLOPs convention in `transformer/train/flops.py`), compile
time and peak memory. No dataset is read: batches are random token ids, and the vocabulary is
`model.vocab_size` as the config gives it (so a GPT-2 config can be timed with GPT-2's
50257-token vocabulary whatever tokenizer its data section names).
"""

from __future__ import annotations

import resource
import time

import jax
import numpy as np

from transformer.config import ConfigError, ExperimentConfig
from transformer.model.models import build_model
from transformer.train import flops, optim
from transformer.train.losses import cross_entropy_sums
from transformer.train.parallel import Parallel
from transformer.train.state import count_params
from transformer.train.writers import log


def _lm_functions(config: ExperimentConfig):
  import flax.linen as nn  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  model = build_model(config.model)
  tokens = jnp.zeros((1, config.data.seq_len), jnp.int32)

  def boxed(rng):
    return model.init({"params": rng}, tokens)["params"]

  def loss_sums(params, batch, rng):
    logits = model.apply({"params": params}, batch["inputs"], deterministic=False,
                         rngs={"dropout": rng})
    return cross_entropy_sums(logits, batch["targets"], batch["weights"])

  def eval_sums(params, batch):
    s, w = cross_entropy_sums(model.apply({"params": params}, batch["inputs"]),
                              batch["targets"], batch["weights"])
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


def run_benchmark(config: ExperimentConfig, steps: int = 10, warmup: int = 2) -> dict:
  """Compiles and times `steps` train steps (after `warmup`); prints and returns the figures."""
  if config.model.kind != "decoder_lm":
    raise ConfigError(f"--mode=bench times decoder_lm models; model.kind={config.model.kind!r}.")
  if steps < 1:
    raise ConfigError(f"--bench_steps={steps} must be >= 1.")
  boxed, init_params, loss_sums, eval_sums = _lm_functions(config)
  tx = optim.build_optimizer(config.optim, config.train.num_steps)
  par = Parallel(config.parallel, init_params=init_params, tx=tx, loss_sums=loss_sums,
                 eval_sums=eval_sums, global_batch_size=config.train.batch_size,
                 micro_batches=config.train.micro_batches, init_boxed_params=boxed)
  state = par.init_state(jax.random.PRNGKey(config.seed))
  n_params = count_params(par.params(state))
  rows = config.train.batch_size // jax.process_count()
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, config.model.vocab_size, (rows, config.data.seq_len + 1), np.int32)
  batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
           "weights": np.ones((rows, config.data.seq_len), np.float32)}
  dropout_rng = jax.random.PRNGKey(1)

  t0 = time.perf_counter()
  compiled = par.compile_train_step(state, batch, dropout_rng)
  compile_s = time.perf_counter() - t0
  for _ in range(warmup):
    state, metrics = par.run_compiled(compiled, state, batch, dropout_rng)
  jax.block_until_ready(state)
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, metrics = par.run_compiled(compiled, state, batch, dropout_rng)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - t0)
  step_s = float(np.median(times))
  tokens_per_step = config.train.batch_size * config.data.seq_len
  step_flops = flops.experiment_flops_per_step(config)
  peak, peak_source = flops.peak_flops_per_device(
      config.train.peak_flops_per_device, config.model.dtype)
  result = {"params": n_params, "devices": par.num_devices, "compile_s": compile_s,
            "step_s": step_s, "tokens_per_s": tokens_per_step / step_s,
            "model_tflops_per_s": step_flops / step_s / 1e12,
            "mfu": step_flops / step_s / (peak * par.num_devices) if peak else None,
            "loss": float(metrics["loss"])}
  dev = jax.devices()[0]
  log(f"bench: {config.model.kind} {n_params / 1e6:.1f}M params, d_model {config.model.d_model}, "
      f"{config.model.num_layers} layers, vocab {config.model.vocab_size}; batch "
      f"{config.train.batch_size} x {config.data.seq_len} tokens; dtype {config.model.dtype}, "
      f"params {config.model.param_dtype}, attention {config.model.attention_impl}, remat "
      f"{config.model.remat}, scan {config.model.scan_layers}; {par.describe()} "
      f"[{dev.platform}: {dev.device_kind}]")
  log(f"  compile time    {compile_s:.1f} s")
  log(f"  step time       {step_s * 1e3:.1f} ms (median of {steps}; min {min(times) * 1e3:.1f})")
  log(f"  tokens/s        {result['tokens_per_s']:,.0f}")
  log(f"  model FLOPs     {step_flops / 1e12:.4f} TFLOP/step (MaxText convention: 6N-style "
      f"matmul count, causal attention halved) = {result['model_tflops_per_s']:.4f} TFLOP/s")
  if peak:
    log(f"  MFU             {result['mfu']:.1%} of {peak * par.num_devices / 1e12:.3f} TFLOP/s "
        f"({peak_source})")
  else:
    log(f"  MFU             n/a ({peak_source})")
  log(f"  peak memory     {_peak_memory(compiled)}")
  return result
