"""The main job: a small byte-level decoder-only LM on the Python standard library's source.

Run it with `python launch.py` (this file is the default `--config`). Override any field from
the command line, e.g. `--config.model.norm_placement=post --config.train.num_steps=500`.
Variants: `--config=configs/default.py:smoke` is a seconds-long run for checking a setup.
"""

import ml_collections


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # seeds parameter init, data shuffling and dropout

  c.data = ml_collections.ConfigDict()
  c.data.name = "local_text"  # TFDS dataset; local_text is our builder of a local text corpus;
  #   token_file: a token file written by --mode=prepare (decoder_lm, no TensorFlow needed)
  c.data.source_dir = ""  # local_text: folder of text files; "" = this Python's standard library;
  #   token_file: the token file's folder (train.bin, <eval split>.bin, meta.json)
  c.data.suffixes = ".py"  # local_text: comma-separated file suffixes to include
  c.data.validation_percent = 5  # local_text: percent of files (by path hash) held out
  c.data.data_dir = ""  # where TFDS prepares datasets; "" = TFDS default (~/tensorflow_datasets)
  c.data.tokenizer = "bytes"  # bytes: 256 byte ids plus pad/bos/eos; sentencepiece
  c.data.seq_len = 256  # tokens per training sequence
  c.data.shuffle_buffer = 4096  # sequences in the training shuffle buffer
  c.data.eval_split = "validation"  # split used for eval loss and bits per byte
  c.data.eval_batches = 16  # batches per periodic eval (0 = all); the final eval uses all
  c.data.packing = "concat"  # concat: cut the document stream (LM only); pack: several examples
  #   per row with segment ids and positions; pad: one example per row, padded
  c.data.bucket_boundaries = ""  # pad only: e.g. "32,64,128" pads each batch to the bucket length
  c.data.src_len = 64  # seq2seq: source tokens per row (longer sources are truncated)
  c.data.tgt_len = 64  # seq2seq: target tokens per row
  c.data.inputs_key = ""  # feature holding the input text ("" = the dataset's default)
  c.data.targets_key = ""  # feature holding the target text or label ("" = default)
  c.data.download = True  # catalog datasets: download and prepare if not yet in data_dir
  c.data.spm_vocab_size = 2048  # sentencepiece: vocabulary trained on the training split
  c.data.spm_model = ""  # sentencepiece: an existing .model file ("" = train into the workdir)
  c.data.spm_train_bytes = 20_000_000  # sentencepiece: training text read from the train split

  c.model = ml_collections.ConfigDict()
  c.model.kind = "decoder_lm"  # decoder_lm | encoder_decoder | masked_lm | classifier
  c.model.d_model = 192  # residual stream width
  c.model.num_heads = 6  # attention heads; head_dim = d_model / num_heads
  c.model.num_layers = 3  # Transformer blocks
  c.model.d_ff = 768  # hidden width of the position-wise feed-forward net
  c.model.num_kv_heads = 0  # key/value heads (grouped-query attention); 0 = num_heads
  c.model.num_decoder_layers = 0  # encoder_decoder: decoder blocks; 0 = num_layers
  c.model.rope_max_timescale = 10_000.0  # positions=rope: base of the rotary frequencies
  c.model.num_classes = 2  # classifier: classes (set from the dataset when it has labels)
  c.model.mlm_mask_rate = 0.15  # masked_lm: fraction of tokens selected (80/10/10 BERT rule)
  c.model.init_from = ""  # <workdir>[:step]: start from that run's matching parameters
  c.model.beam_size = 4  # encoder_decoder eval: beams of the beam-search accuracy
  c.model.length_penalty = 0.6  # beam search: log P / ((5 + len) / 6) ** length_penalty
  c.model.max_decode_len = 0  # encoder_decoder eval: tokens to decode; 0 = data.tgt_len
  c.model.activation = "gelu"  # feed-forward nonlinearity: relu | gelu | swiglu
  c.model.norm_placement = "pre"  # pre: x + f(LN(x)), final LN; post: LN(x + f(x)) (Vaswani)
  #   peri | deepnorm | mix | admin: see transformer/model/block.py
  c.model.norm = "layernorm"  # layernorm | rmsnorm | dyt (gamma tanh(alpha x) + beta) | none
  c.model.mix_post_fraction = 0.25  # mix: the first floor(fraction * layers) blocks are post-norm
  c.model.dyt_alpha_init = 0.5  # norm=dyt: initial value of the learnable scalar alpha
  c.model.qk_norm = False  # normalize queries and keys per head with the chosen norm
  c.model.norm_epsilon = 1e-6  # added to the variance inside the norm
  c.model.norm_bias = True  # LayerNorm has the additive beta parameter
  c.model.positions = "sinusoidal"  # sinusoidal | learned | rope | none
  c.model.max_len = 2048  # longest position the model supports (learned table size)
  c.model.use_bias = True  # biases in attention projections and feed-forward layers
  c.model.tie_embeddings = True  # output projection is the transposed token embedding
  c.model.embed_scale = True  # multiply token embeddings by sqrt(d_model) (Vaswani et al.)
  c.model.dropout_rate = 0.0  # dropout on embeddings and on each residual branch
  c.model.attention_dropout_rate = 0.0  # dropout on attention weights (reference impl only)
  # reference: einsum softmax; xla | cudnn: jax.nn.dot_product_attention
  c.model.attention_impl = "xla"
  c.model.dtype = "float32"  # compute dtype: float32 | bfloat16
  c.model.param_dtype = "float32"  # parameter storage dtype
  c.model.scan_layers = False  # one lax.scan over stacked layer params instead of a loop
  c.model.remat = "none"  # rematerialize in backprop: none | full | minimal (keeps matmuls)
  c.model.vocab_pad_multiple = 0  # pad the output vocab to a multiple of this (GPU speed); 0 = off

  c.optim = ml_collections.ConfigDict()
  c.optim.name = "adamw"  # adamw | adam | sgd | lion | adafactor | muon (README: Optimizers)
  c.optim.learning_rate = 3e-3  # peak learning rate
  c.optim.warmup_steps = 50  # linear warm-up from 0 to the peak
  c.optim.decay = "cosine"  # cosine | linear | constant | rsqrt (1/sqrt(step)) | wsd, after warm-up
  c.optim.end_lr_factor = 0.05  # final learning rate as a fraction of the peak
  c.optim.decay_fraction = 0.2  # wsd: the last fraction of the steps decays (the rest: the peak)
  c.optim.cooldown_shape = "linear"  # wsd: linear | 1-sqrt decay to end_lr_factor * peak
  c.optim.b1 = 0.9  # beta1 (adamw, adam, lion; muon's Adam)
  c.optim.b2 = 0.98  # beta2 (adamw, adam, lion; muon's Adam)
  c.optim.eps = 1e-9  # epsilon (adamw, adam, muon)
  c.optim.weight_decay = 0.1  # decoupled weight decay (adamw, lion, adafactor, muon), decay_mask's
  c.optim.decay_mask = "role"  # role: kernels and embedding tables | ndim: ndim >= 2 (runs before)
  c.optim.clip_norm = 1.0  # global gradient-norm clipping; 0 disables
  c.optim.momentum = 0.9  # sgd: momentum (0 = plain SGD)
  c.optim.nesterov = False  # sgd: Nesterov momentum
  c.optim.muon_momentum = 0.95  # muon: momentum of the orthogonalized matrices' updates
  c.optim.muon_ns_steps = 5  # muon: Newton-Schulz iterations
  c.optim.adafactor_decay_rate = 0.8  # adafactor: second-moment decay 1 - step^-rate
  c.optim.adafactor_clipping = 1.0  # adafactor: update clipping threshold; 0 = none
  c.optim.adafactor_min_dim = 128  # adafactor: factor second moments of dims at least this

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 16  # global batch, in sequences
  c.train.num_steps = 800  # optimizer steps
  c.train.log_every = 50  # steps between train-metric logs
  c.train.eval_every = 200  # steps between evaluations (and one at the end)
  c.train.micro_batches = 1  # gradient accumulation: split each batch into this many pieces
  c.train.peak_flops_per_device = 0.0  # for MFU; 0 = data sheet (GPU/TPU) or measured (CPU)
  c.train.prefetch = 0  # batches copied to the devices ahead of their step (GPU/TPU: 2); 0 = off
  c.train.profile_steps = ""  # "a,b": jax.profiler trace of steps a..b into <workdir>/profile
  c.train.compilation_cache_dir = ""  # persistent XLA compilation cache directory; "" = off
  c.train.xla_gpu_flags = True  # on GPUs, add XLA flags that help (never overrides XLA_FLAGS)
  c.train.nonfinite = "stop"  # non-finite loss/gradient: stop the run | skip the step's update
  c.train.label_smoothing = 0.0  # training loss: eps of the target mass spread over the vocab
  c.train.z_loss = 0.0  # coefficient of log(Z)^2 of the output softmax (PaLM); 0 = off
  c.train.diagnostics_every = 0  # steps between per-layer diagnostics rows; 0 = off
  c.train.samples_at_eval = True  # LMs and translation: greedy samples of fixed prompts per eval
  c.train.loss_chunk = 0  # decoder_lm: positions per row in each chunk of output layer + loss
  c.train.wandb_project = ""  # Weights & Biases project (needs pip install .[wandb]); "" = off
  c.train.wandb_entity = ""  # wandb team or user; "" = wandb's default
  c.train.wandb_group = ""  # "" = a hash of the config without its seed (seeds share a group)
  c.train.wandb_tags = ""  # comma-separated wandb tags

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every_steps = 200  # steps between checkpoints (and one at the end)
  c.checkpoint.keep = 3  # most recent checkpoints kept
  c.checkpoint.keep_best = 1  # also keep this many with the lowest eval loss
  c.checkpoint.async_save = True  # write checkpoints in the background

  c.parallel = ml_collections.ConfigDict()
  c.parallel.strategy = "jit"  # jit: sharded over a mesh | pmap: replicated data parallel
  c.parallel.data = -1  # mesh axis sizes; -1 takes the devices the others leave
  c.parallel.fsdp = 1  # parameters and optimizer state sharded over this axis too
  c.parallel.tensor = 1  # heads / mlp / vocab dims split over this axis
  c.parallel.dcn_data = 1  # of `data`, the ways across TPU slices (else processes); 1 = none
  # logical parameter axis -> mesh axis ("" = replicated); override one with
  # --config.parallel.rules.embed=tensor
  c.parallel.rules = ml_collections.ConfigDict(dict(
      embed="fsdp", vocab="tensor", heads="tensor", mlp="tensor", head_dim="", norm="",
      position="", layers=""))

  if variant == "smoke":
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 64, 4, 2, 128
    c.data.seq_len, c.data.eval_batches = 64, 4
    c.train.batch_size, c.train.num_steps = 8, 20
    c.train.log_every, c.train.eval_every = 5, 10
    c.checkpoint.every_steps = 10
    c.optim.warmup_steps = 5
  elif variant:
    raise ValueError(f"Unknown variant {variant!r} of configs/default.py; known: 'smoke'.")
  return c
