"""Masked-LM pre-training (BERT-style) of a small bidirectional encoder on Python source.

  python launch.py --config=configs/mlm_small.py --workdir=runs/mlm_small

Data: `local_text` (this interpreter's standard library, built offline), 10% of the files held
out by path hash -- the same files `stdlib_package` holds out at validation_percent=10, so
the classifier fine-tuned from this run (configs/cls_small.py) is never evaluated on text
the encoder was pre-trained on. Byte tokens plus one [MASK] id; 15% of tokens selected, of
which 80% masked, 10% random, 10% kept.
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config()
  c.data.name = "local_text"
  c.data.validation_percent = 10  # keep equal to cls_small's, so held-out files agree
  c.data.tokenizer = "bytes"
  c.data.packing = "concat"  # rows cut from the stream of files (no padding to mask)
  c.data.seq_len = 128
  c.data.eval_batches = 8

  m = c.model
  m.kind = "masked_lm"
  m.d_model, m.num_heads, m.num_layers, m.d_ff = 128, 4, 3, 512
  m.activation = "gelu"
  m.norm_placement = "pre"
  m.positions = "sinusoidal"
  m.max_len = 512
  m.mlm_mask_rate = 0.15
  m.dropout_rate = 0.0

  c.optim.learning_rate = 2e-3
  c.optim.warmup_steps = 100
  c.train.batch_size = 32
  c.train.num_steps = 600
  c.train.log_every = 100
  c.train.eval_every = 300
  c.checkpoint.every_steps = 300

  if variant == "smoke":
    m.d_model, m.num_heads, m.num_layers, m.d_ff = 32, 2, 1, 64
    c.data.seq_len, c.data.eval_batches = 32, 2
    c.train.batch_size, c.train.num_steps, c.train.log_every, c.train.eval_every = 8, 10, 5, 10
    c.checkpoint.every_steps = 10
    c.optim.warmup_steps = 2
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/mlm_small.py; known: 'smoke'.")
  return c
