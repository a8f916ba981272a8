"""A small Vision Transformer (Dosovitskiy et al., 2020) on scikit-learn's 8x8 digits, on CPU.

  python launch.py --config=configs/vit_digits.py --workdir=runs/vit_digits
  python launch.py --mode=eval --workdir=runs/vit_digits --eval_split=test

Data: `sklearn_digits`, our TFDS builder of the digits bundled with scikit-learn (offline;
1,257 train, 270 validation, 270 test images). 2x2 patches -> 16 tokens plus [CLS]; the
encoder is the text models' (any model.norm_placement works). TFDS image catalogs work too when
prepared: `--config.data.name=mnist --config.model.patch_size=4` (28x28 -> 49 patches), or
`cifar10` (32x32x3). Variant `smoke`: a few steps.
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config()
  c.data.name = "sklearn_digits"
  c.data.eval_split = "validation"
  c.data.shuffle_buffer = 2048
  c.data.eval_batches = 0

  m = c.model
  m.kind = "vit_classifier"
  m.d_model, m.num_heads, m.num_layers, m.d_ff = 64, 4, 4, 128
  m.patch_size = 2
  m.image_size, m.image_channels = 8, 1  # the digits' shape: training takes it from the data,
                                         # --mode=bench (no dataset) from here
  m.pooling = "cls"
  m.activation = "gelu"
  m.norm_placement = "pre"
  m.positions = "none"  # the ViT adds its own learned position table
  m.dropout_rate = 0.1

  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 100
  c.optim.decay = "cosine"
  c.optim.weight_decay = 0.05

  c.train.batch_size = 64
  c.train.num_steps = 1500
  c.train.log_every = 100
  c.train.eval_every = 500
  c.checkpoint.every_steps = 500

  if variant == "smoke":
    c.train.num_steps, c.train.log_every, c.train.eval_every = 10, 5, 10
    c.checkpoint.every_steps = 10
    c.optim.warmup_steps = 2
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/vit_digits.py; known: 'smoke'.")
  return c
