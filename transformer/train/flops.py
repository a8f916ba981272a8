"""FLOPs of a training step and the devices' peak, for MFU (model FLOPs utilization).

Convention (MaxText's `calculate_tflops_training_per_device`): count the matmuls only, 2 FLOPs
per multiply-add, and multiply by 3 for training (forward 1x, backward 2x). Remat recompute is
*not* counted (it is model FLOPs, not hardware FLOPs). Per layer, for `B * S` tokens:

  qkv         2 B S  d_model * (heads + 2 kv_heads) * head_dim
  projection  2 B S  heads * head_dim * d_model
  ffn         2 B S  d_model * d_ff * 2               (wi and wo; x3 for SwiGLU's gate)
  attention   4 B S^2 heads * head_dim / 2          (QK^T and PV; halved for the causal mask)
  cross-attn  queries, keys/values of the encoder's S_src tokens, projection, 4 B S S_src ...

plus the output logits `2 B S d_model * vocab` once (the embedding lookup is a gather, not a
matmul). MFU = (FLOPs per step / step time) / (peak FLOP/s of all devices used).
"""

from __future__ import annotations

import os
from typing import Optional

import jax

from transformer.config import ModelConfig

# Dense peak FLOP/s per device for the dtypes used here (bf16 tensor-core figures for GPUs and
# TPUs, without sparsity), from the vendors' data sheets.
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H100": 989e12, "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12, "NVIDIA A100-SXM4-40GB": 312e12,
    "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
}

# CPU: cores x clock x FP32 FLOPs per cycle per core. 32 = two 256-bit FMA pipes x 8 lanes
# x 2 (AMD Zen 2-4, Intel client cores); AVX-512 server Intel cores with two 512-bit FMA
# units reach 64. This is an estimate of the machine, not a measurement.
CPU_FLOPS_PER_CYCLE = 32


def _block_flops(cfg: ModelConfig, batch: int, length: int, *, causal: bool,
                 cross_len: int = 0) -> float:
  """Forward matmul FLOPs of one block on `batch` rows of `length` tokens."""
  tokens = batch * length
  inner = cfg.num_heads * cfg.head_dim
  kv_inner = (cfg.num_kv_heads or cfg.num_heads) * cfg.head_dim
  qkv = 2 * tokens * cfg.d_model * (inner + 2 * kv_inner)
  projection = 2 * tokens * inner * cfg.d_model
  ffn = 2 * tokens * cfg.d_model * cfg.d_ff * (3 if cfg.activation == "swiglu" else 2)
  attention = 4 * batch * length ** 2 * inner * (0.5 if causal else 1.0)
  total = qkv + projection + ffn + attention
  if cross_len:  # queries from this stack, keys/values from cross_len encoder tokens
    total += (2 * tokens * cfg.d_model * inner + 2 * batch * cross_len * cfg.d_model * 2 * kv_inner
              + projection + 4 * batch * length * cross_len * inner)
  return total


def training_flops_per_step(cfg: ModelConfig, batch_size: int, seq_len: int,
                            src_len: int = 0) -> float:
  """Model FLOPs of one training step on `batch_size` rows: 3x the forward FLOPs that the
  kind declares in `transformer.kinds`.

  `seq_len` is the row length (for `encoder_decoder`, the target length; the encoder reads
  `src_len` tokens).
  """
  from transformer import kinds  # noqa: PLC0415 -- the registry uses _block_flops
  return 3.0 * kinds.get(cfg.kind).forward_flops(cfg, batch_size, seq_len, src_len)


def experiment_flops_per_step(config) -> float:
  """`training_flops_per_step` with the row lengths an `ExperimentConfig`'s data gives."""
  from transformer import kinds  # noqa: PLC0415
  length, src_len = kinds.get(config.model.kind).lengths(config)
  return training_flops_per_step(config.model, config.train.batch_size, length, src_len)


def _cpu_clock_hz() -> Optional[float]:
  try:
    with open("/proc/cpuinfo") as f:
      mhz = [float(line.split(":")[1]) for line in f if line.lower().startswith("cpu mhz")]
    return max(mhz) * 1e6 if mhz else None
  except OSError:
    return None


def cpu_peak_flops() -> tuple[float, str]:
  """Estimated FP32 peak of this machine's CPU cores, and how it was estimated."""
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  clock = _cpu_clock_hz() or 2.5e9
  peak = cores * clock * CPU_FLOPS_PER_CYCLE
  return peak, (f"{cores} cores x {clock / 1e9:.2f} GHz x {CPU_FLOPS_PER_CYCLE} FP32 "
                "FLOPs/cycle (estimate)")


def peak_flops_per_device(override: float = 0.0) -> tuple[Optional[float], str]:
  """Peak FLOP/s of one device of this run, and where the figure comes from.

  On CPU the fake devices of `--xla_force_host_platform_device_count` share the same cores,
  so the machine's peak is divided among them.
  """
  if override > 0:
    return override, "train.peak_flops_per_device"
  device = jax.devices()[0]
  if device.platform == "cpu":
    peak, how = cpu_peak_flops()
    n = jax.local_device_count()
    return peak / n, how + (f", shared by {n} CPU devices" if n > 1 else "")
  for name, value in PEAK_FLOPS.items():
    if device.device_kind.startswith(name):
      return value, f"data sheet for {device.device_kind}"
  return None, f"unknown peak for {device.device_kind}; set train.peak_flops_per_device"
