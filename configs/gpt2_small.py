"""GPT-2 small (Radford et al., 2019): 12 layers, d_model 768, 12 heads, d_ff 3072, learned
positions, pre-norm, tied embeddings, sequence 1024; 124M parameters with GPT-2's 50257-token
vocabulary.

`python launch.py --config=configs/gpt2_small.py --mode=bench` times it on random tokens with
that vocabulary. Training it reads the data section's tokenizer, whose vocabulary replaces
`model.vocab_size` (bytes: 259 tokens, 85M parameters; GPT-2's BPE, through
`--config.data.tokenizer=gpt2:<r50k_base.tiktoken>` or `hf:<GPT-2's tokenizer.json>`, or a
nanoGPT / llm.c token file: 50257 + 3 ids, 0-2 being pad, BOS, EOS). Every model field is
GPT-2's (LayerNorm epsilon 1e-5 included), so `--mode=export` writes it as GPT-2 and
`--config.model.init_from=hf:<GPT-2 folder>` loads GPT-2's own weights into it. Variants:
`:gpu` switches to bfloat16 compute and cuDNN attention; `:tiny` is the same architecture at
d_model 64, 2 layers, 128 positions (seconds on a CPU: export / import round trips, tests).
"""

import ml_collections

from configs import default


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = default.get_config()
  c.data.seq_len = 1024
  c.model.vocab_size = 50257  # GPT-2's BPE vocabulary (bench); training uses the tokenizer's
  c.model.vocab_pad_multiple = 64  # 50304 embedding rows / output columns; padded logits dropped
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 768, 12, 12, 3072
  c.model.positions = "learned"
  c.model.max_len = 1024
  c.model.norm_placement = "pre"
  c.model.embed_scale = False  # GPT-2 adds unscaled token and position embeddings
  c.model.norm_epsilon = 1e-5  # GPT-2's layer_norm_epsilon
  c.model.dropout_rate = 0.0
  c.train.batch_size = 8
  c.optim.learning_rate = 6e-4
  c.optim.b2 = 0.95
  c.optim.eps = 1e-8
  if variant == "gpu":
    c.model.dtype = "bfloat16"
    c.model.attention_impl = "cudnn"
    c.train.batch_size = 16
    c.train.prefetch = 2
  elif variant == "tiny":
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 64, 4, 2, 256
    c.model.max_len = c.data.seq_len = 128
    c.data.eval_batches = 4
    c.train.num_steps, c.train.log_every, c.train.eval_every = 20, 5, 10
    c.checkpoint.every_steps = 10
    c.optim.warmup_steps = 5
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/gpt2_small.py; known: 'gpu', "
                     "'tiny'.")
  return c
