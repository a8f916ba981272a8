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

This module holds the formulas (`block_flops`); it imports no JAX, so the registry and the config
that validate against it stay light. Each kind's total per step is declared with the kind, in
`transformer.kinds` (`experiment_flops_per_step`); the devices' peaks are in
`transformer.train.peaks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from transformer.config import ModelConfig

# Training = forward (1x) + backward (2x: gradients of activations and of weights).
TRAINING_FACTOR = 3.0


def block_flops(cfg: ModelConfig, batch: int, length: int, *, causal: bool,
                cross_len: int = 0, masked_too: bool = False) -> float:
  """Forward matmul FLOPs of one block on `batch` rows of `length` tokens; `cross_len` > 0
  adds cross-attention to that many encoder tokens. The per-kind totals (embeddings, heads,
  stacks) are in the registry, `transformer.kinds`.

  `masked_too` counts causal attention whole, as XLA computes it (the masked half included):
  what a compiled program's `cost_analysis()` sees (`transformer.train.aot`), not MFU's
  convention."""
  tokens = batch * length
  inner = cfg.num_heads * cfg.head_dim
  kv_inner = (cfg.num_kv_heads or cfg.num_heads) * cfg.head_dim
  qkv = 2 * tokens * cfg.d_model * (inner + 2 * kv_inner)
  projection = 2 * tokens * inner * cfg.d_model
  ffn = 2 * tokens * cfg.d_model * cfg.d_ff * (3 if cfg.activation == "swiglu" else 2)
  attention = 4 * batch * length ** 2 * inner * (0.5 if causal and not masked_too else 1.0)
  total = qkv + projection + ffn + attention
  if cross_len:  # queries from this stack, keys/values from cross_len encoder tokens
    total += (2 * tokens * cfg.d_model * inner + 2 * batch * cross_len * cfg.d_model * 2 * kv_inner
              + projection + 4 * batch * length * cross_len * inner)
  return total
