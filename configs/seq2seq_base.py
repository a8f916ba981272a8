"""The base Transformer of "Attention Is All You Need" (Table 3, row "base"): 6 + 6 layers,
d_model 512, 8 heads, d_ff 2048, dropout 0.1, post-norm, ReLU, sinusoidal positions, shared
and scaled embeddings, tied output layer; ~63M parameters with a 37k vocabulary.

It trains on the synthetic seq2seq dataset (as configs/seq2seq_small.py) unless pointed at
another one; it is here for its architecture (see tests/test_models.py for its size).
"""

import ml_collections

from configs import seq2seq_small


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = seq2seq_small.get_config(variant)
  m = c.model
  m.d_model, m.num_heads, m.num_layers, m.num_decoder_layers, m.d_ff = 512, 8, 6, 6, 2048
  m.activation = "relu"
  m.norm_placement = "post"
  m.norm = "layernorm"
  m.positions = "sinusoidal"
  m.tie_embeddings = True
  m.embed_scale = True
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.0  # the paper has none (only residual and embedding dropout)
  c.optim.learning_rate = 7e-4  # ~ d_model^-0.5 * warmup^-0.5 at the peak of the paper's schedule
  c.optim.warmup_steps = 4000
  c.optim.b2 = 0.98
  c.optim.eps = 1e-9
  c.optim.weight_decay = 0.0
  return c
