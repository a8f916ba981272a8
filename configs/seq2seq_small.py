"""A small encoder-decoder Transformer trained to reverse digit strings (1-20 digits).

  python launch.py --config=configs/seq2seq_small.py

Data: `synthetic_seq2seq/reverse`, built offline by our TFDS builder (20k train pairs, 1k
held-out validation pairs whose inputs never occur in train). Byte tokens; one pair per row
(`packing=pad`) so the eval can decode each source and report exact-match accuracy of greedy
and beam-search decoding. Variants: `smoke` (seconds), `sort`, `add` (other tasks, same model).
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config()
  c.data.name = "synthetic_seq2seq/reverse"  # synthetic_seq2seq/<reverse|sort|add>
  c.data.tokenizer = "bytes"
  c.data.packing = "pad"  # one pair per row: needed for exact-match decoding in eval
  c.data.src_len = 24  # source tokens (20 digits + EOS fit)
  c.data.tgt_len = 24  # target tokens
  c.data.shuffle_buffer = 4096
  c.data.eval_split = "validation"
  c.data.eval_batches = 4  # periodic evals decode 4 batches; the final eval the whole split

  m = c.model
  m.kind = "encoder_decoder"
  m.d_model, m.num_heads, m.num_layers, m.num_decoder_layers, m.d_ff = 128, 4, 2, 2, 512
  m.activation = "relu"
  m.norm_placement = "pre"
  m.positions = "sinusoidal"
  m.max_len = 64
  m.dropout_rate = 0.0
  m.beam_size = 4
  m.length_penalty = 0.6
  m.max_decode_len = 0  # decode up to data.tgt_len tokens

  c.optim.learning_rate = 2e-3
  c.optim.warmup_steps = 100
  c.optim.weight_decay = 0.01

  c.train.batch_size = 64
  c.train.num_steps = 1500
  c.train.log_every = 100
  c.train.eval_every = 500
  c.checkpoint.every_steps = 500

  if variant == "smoke":
    m.d_model, m.num_heads, m.num_layers, m.num_decoder_layers, m.d_ff = 32, 2, 1, 1, 64
    c.train.batch_size, c.train.num_steps, c.train.log_every, c.train.eval_every = 8, 10, 5, 10
    c.checkpoint.every_steps = 10
    c.data.eval_batches = 2
    c.optim.warmup_steps = 2
  elif variant in ("sort", "add"):
    c.data.name = f"synthetic_seq2seq/{variant}"
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/seq2seq_small.py; known: "
                     "'smoke', 'sort', 'add'.")
  return c
