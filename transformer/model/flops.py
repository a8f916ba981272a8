"""FLOPs of a training step, for MFU (model FLOPs utilization).

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

This module holds the formulas: one block (`block_flops`) and each model kind's forward pass
(`decoder_lm_flops`, ...). It imports no JAX, so the registry (`transformer.kinds`), which names
each kind's formula and sums a step (`experiment_flops_per_step`), stays light. The devices'
peaks are in `transformer.train.peaks`.
"""

from __future__ import annotations

from transformer.config import ModelConfig

# Training = forward (1x) + backward (2x: gradients of activations and of weights).
TRAINING_FACTOR = 3.0


def block_flops(cfg: ModelConfig, batch: int, length: int, *, causal: bool,
                cross_len: int = 0, masked_too: bool = False) -> float:
  """Forward matmul FLOPs of one block on `batch` rows of `length` tokens; `cross_len` > 0
  adds cross-attention to that many encoder tokens. Each kind's forward total (embeddings,
  heads, stacks) is below (`decoder_lm_flops`, ...).

  `masked_too` counts causal attention whole, as XLA computes it (the masked half included):
  what a compiled program's `cost_analysis()` sees (`transformer.train.compile_for_topology`),
  not MFU's convention."""
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


# Forward matmul FLOPs per kind: `(cfg, batch, length, source_length, masked_too=False) ->
# FLOPs`; `masked_too` counts causal attention whole (`block_flops`).

def decoder_lm_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0,
                     masked_too: bool = False) -> float:
  del src_len
  return (block_flops(cfg, b, length, causal=True, masked_too=masked_too)
          * cfg.num_layers + 2 * b * length * cfg.d_model * cfg.padded_vocab_size)


def encoder_decoder_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0,
                          masked_too: bool = False) -> float:
  encoder = block_flops(cfg, b, src_len, causal=False) * cfg.num_layers
  decoder = block_flops(cfg, b, length, causal=True, cross_len=src_len,
                        masked_too=masked_too) * cfg.decoder_layers
  return encoder + decoder + 2 * b * length * cfg.d_model * cfg.padded_vocab_size


def masked_lm_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0,
                    masked_too: bool = False) -> float:
  del src_len, masked_too  # not causal; plus the head's d_model x d_model transform
  return (block_flops(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * length * cfg.d_model * cfg.padded_vocab_size
          + 2 * b * length * cfg.d_model ** 2)


def classifier_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0,
                     masked_too: bool = False) -> float:
  del src_len, masked_too  # not causal; pooled features through one linear layer
  return (block_flops(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * cfg.d_model * cfg.num_classes)


def vit_flops(cfg: ModelConfig, b: int, length: int, src_len: int = 0,
              masked_too: bool = False) -> float:
  """`length` = tokens per image (patches, plus [CLS]); `src_len` = pixels x channels of one
  patch, which the patch embedding maps to d_model. Not causal: `masked_too` changes nothing."""
  del masked_too
  patches = length - (1 if cfg.pooling == "cls" else 0)
  return (2 * b * patches * src_len * cfg.d_model
          + block_flops(cfg, b, length, causal=False) * cfg.num_layers
          + 2 * b * cfg.d_model * cfg.num_classes)
