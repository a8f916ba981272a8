"""The base Transformer of "Attention Is All You Need" with its training recipe.

Architecture (Table 3, row "base"): 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, post-norm,
ReLU, sinusoidal positions, shared and scaled embeddings, tied output layer; ~63M parameters
with a 37k vocabulary.

Training (section 5): WMT 2014 English-German (here `wmt14_translate/de-en`, German -> English
as TFDS's supervised keys give it; swap data.inputs_key / targets_key for En -> De) with one
shared 37k-piece vocabulary (SentencePiece in place of the paper's BPE); batches of ~25k source
+ ~25k target tokens (896 pairs of ~28 pieces on average, padded to 128); Adam beta1 0.9, beta2
0.98, eps 1e-9; lr = d_model^-0.5 * min(step^-0.5, step * 4000^-1.5) (`optim.decay=rsqrt`,
peak (512 * 4000)^-0.5 = 6.99e-4 at step 4000); residual dropout 0.1; label smoothing 0.1; 100k
steps. Decoding: beam 4, length penalty 0.6. Tokenized BLEU on newstest2014 is what the paper
reports; the eval here reports sacreBLEU on detokenized output (its signature beside it).

  python launch.py --config=configs/seq2seq_base.py                # the recipe (accelerators)
  python launch.py --config=configs/seq2seq_base.py:smoke          # same recipe, tiny, on CPU

`smoke`: a 1 + 1 layer, d_model 32 model of the same recipe on the synthetic reverse task
(bytes, offline), a few steps; for checking the pipeline, not the paper's numbers.
"""

import ml_collections

from configs import seq2seq_small


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = seq2seq_small.get_config()
  m = c.model
  m.d_model, m.num_heads, m.num_layers, m.num_decoder_layers, m.d_ff = 512, 8, 6, 6, 2048
  m.activation = "relu"
  m.norm_placement = "post"
  m.norm = "layernorm"
  m.positions = "sinusoidal"
  m.max_len = 256
  m.tie_embeddings = True
  m.embed_scale = True
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.0  # the paper has none (only residual and embedding dropout)
  m.beam_size = 4
  m.length_penalty = 0.6

  c.data.name = "wmt14_translate/de-en"
  c.data.tokenizer = "sentencepiece"
  c.data.spm_vocab_size = 37000
  c.data.src_len = 128
  c.data.tgt_len = 128
  c.data.packing = "pad"  # one pair per row, so the eval decodes and scores BLEU
  c.data.eval_split = "validation"  # newstest2013, the paper's development set
  c.data.eval_batches = 8

  c.optim.decay = "rsqrt"
  c.optim.learning_rate = (512 * 4000) ** -0.5  # = 6.99e-4, the schedule's value at warm-up end
  c.optim.warmup_steps = 4000
  c.optim.b1, c.optim.b2, c.optim.eps = 0.9, 0.98, 1e-9
  c.optim.weight_decay = 0.0
  c.optim.clip_norm = 0.0  # the paper does not clip

  c.train.label_smoothing = 0.1
  c.train.batch_size = 896
  c.train.num_steps = 100_000
  c.train.log_every = 100
  c.train.eval_every = 5000
  c.checkpoint.every_steps = 5000

  if variant == "smoke":
    c.data.name = "synthetic_seq2seq/reverse"
    c.data.tokenizer = "bytes"
    c.data.src_len = c.data.tgt_len = 24
    c.data.eval_batches = 2
    m.d_model, m.num_heads, m.num_layers, m.num_decoder_layers, m.d_ff = 32, 2, 1, 1, 64
    m.max_len = 64
    c.optim.warmup_steps = 4
    c.optim.learning_rate = 3e-3
    c.train.batch_size, c.train.num_steps, c.train.log_every, c.train.eval_every = 8, 10, 5, 10
    c.checkpoint.every_steps = 10
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/seq2seq_base.py; known: 'smoke'.")
  return c
