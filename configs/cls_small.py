"""Classification fine-tuning: which standard-library package a chunk of source comes from.

  python launch.py --config=configs/cls_small.py --workdir=runs/cls_small \
      --config.model.init_from=runs/mlm_small      # encoder from the masked-LM run
  python launch.py --config=configs/cls_small.py --workdir=runs/cls_scratch   # from scratch

Data: `stdlib_package` (8 packages: asyncio, email, idlelib, importlib, multiprocessing,
tkinter, unittest, xml), built offline; files are split between train and validation by
path hash (validation_percent=10, as in configs/mlm_small.py). The model is the masked-LM's
encoder (same widths, vocabulary with [MASK], positions), mean-pooled, and a linear head.
"""

import ml_collections

from configs import mlm_small


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = mlm_small.get_config(variant)
  c.data.name = "stdlib_package"
  c.data.packing = "pad"  # one labelled chunk per row
  c.data.eval_batches = 0

  c.model.kind = "classifier"
  c.model.init_from = ""  # --config.model.init_from=<masked_lm workdir> to fine-tune
  c.model.dropout_rate = 0.1

  c.optim.learning_rate = 5e-4
  c.optim.warmup_steps = 50
  c.train.batch_size = 32
  c.train.num_steps = 400
  c.train.log_every = 50
  c.train.eval_every = 200
  c.checkpoint.every_steps = 200
  if variant == "smoke":
    c.train.num_steps, c.train.eval_every, c.checkpoint.every_steps = 6, 6, 6
    c.optim.warmup_steps = 2
  return c
