"""Validated, frozen views of an ml-collections config.

The ConfigDict from `configs/*.py` (plus command-line overrides) is checked once, here, before
any data is read or anything is compiled. Each part of the code then takes only the frozen
dataclass that belongs to it (`ModelConfig`, `DataConfig`, ...), never the ConfigDict.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Optional

import ml_collections

from transformer.errors import ConfigError  # re-exported: `config.ConfigError`
from transformer.errors import check_choice as _choice
from transformer.errors import check_positive as _positive
# The optimizer's section and its choices, re-exported: `config.OptimConfig`, ...
from transformer.optim_config import (COOLDOWN_SHAPES, DECAY_MASKS, DECAYS,  # noqa: F401
                                      OPTIM_FIELDS_ADDED, OPTIMIZERS, OptimConfig)


# The choices of each option, written here only: the model, diagnostics, studies and tests
# import them, and the mappings from a name to what it means (jnp dtypes, remat policies,
# activation functions) are derived from these or checked against them (tests/test_options.py).
# The model kinds, in the order errors list them; each is declared (model, data, task, FLOPs) in
# transformer.kinds, which checks it declares exactly these.
MODEL_KINDS = ("decoder_lm", "encoder_decoder", "masked_lm", "classifier", "vit_classifier")
NORM_PLACEMENTS = ("pre", "post", "peri", "deepnorm", "mix", "admin", "hybrid", "hybrid_v0")
NORMS = ("layernorm", "rmsnorm", "dyt", "none")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
ACTIVATIONS = ("relu", "gelu", "swiglu")
ATTENTION_IMPLS = ("reference", "xla", "cudnn")
DTYPES = ("float32", "bfloat16")
TOKENIZERS = ("bytes", "sentencepiece", "hf:<tokenizer.json>", "gpt2:<ranks file>")
PACKINGS = ("concat", "pack", "pad")
# Fields added after runs were made: the value a saved config.json without the field was
# made with (what resuming and --reuse_runs_from compare it as).
LEGACY_DEFAULTS = {"optim.decay_mask": "ndim", "model.vocab_pad_multiple": 0,
                   "parallel.dcn_data": 1, "train.loss_chunk": 0, "train.wandb_project": "",
                   "train.wandb_entity": "", "train.wandb_group": "", "train.wandb_tags": "",
                   **OPTIM_FIELDS_ADDED}
# `ModelConfig` fields a kind's task fills in from its data (tokenizer, labels, images): not the
# user's choice, so a resumed run may see them differ from the command line's defaults.
FROM_DATA = ("model.vocab_size", "model.num_classes", "model.image_size", "model.image_channels")
REMAT_POLICIES = ("none", "full", "minimal")
STRATEGIES = ("jit", "pmap")
NONFINITE_MODES = ("stop", "skip")  # train.nonfinite: what a non-finite loss/gradient does
MESH_AXES = ("data", "fsdp", "tensor")
# Logical axis names that parameters carry (`nn.with_logical_partitioning` in transformer/model)
# and the mesh axis each is sharded over by default ("" = replicated).
DEFAULT_LOGICAL_RULES = (("embed", "fsdp"), ("vocab", "tensor"), ("heads", "tensor"),
                         ("mlp", "tensor"), ("head_dim", ""), ("norm", ""), ("position", ""),
                         ("layers", ""))


def options_text(names: tuple[str, ...]) -> str:
  """`a, b or c`: choices as an error message lists them."""
  return f"{', '.join(names[:-1])} or {names[-1]}"


def _as_json_reads(value: Any) -> Any:
  """A tuple as the list JSON reads it back as; any other value as it is."""
  return list(value) if isinstance(value, tuple) else value


def flat_config(d: Mapping, prefix: str = "",
                leaf: Optional[Callable[[Any], Any]] = _as_json_reads) -> dict:
  """`{"a": {"b": 1}}` -> `{"a.b": 1}`: the leaves of nested mappings under dotted keys, in
  the mappings' order, each passed through `leaf` (default: tuples as lists, as JSON reads
  them back; None: as they are). `prefix` starts every key."""
  out = {}
  for k, v in d.items():
    if isinstance(v, Mapping):
      out.update(flat_config(v, f"{prefix}{k}.", leaf))
    else:
      out[f"{prefix}{k}"] = v if leaf is None else leaf(v)
  return out


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of the model; `vocab_size` comes from the tokenizer."""
  kind: str = "decoder_lm"  # decoder_lm | encoder_decoder | masked_lm | classifier | vit_classifier
  vocab_size: int = 259  # set from the tokenizer when the data is read (bytes: 259)
  d_model: int = 192  # residual stream width
  num_heads: int = 6  # attention heads; head_dim = d_model / num_heads
  num_layers: int = 3  # Transformer blocks
  d_ff: int = 768  # hidden width of the position-wise feed-forward net
  activation: str = "gelu"  # feed-forward nonlinearity: relu | gelu | swiglu
  # pre: x + f(LN(x)), final LN; post: LN(x + f(x)) (Vaswani); peri | deepnorm | mix | admin |
  # hybrid: see transformer/model/block.py
  norm_placement: str = "pre"
  norm: str = "layernorm"  # layernorm | rmsnorm | dyt (gamma tanh(alpha x) + beta) | none
  norm_epsilon: float = 1e-6  # added to the variance inside the norm
  norm_bias: bool = True  # LayerNorm has the additive beta parameter
  # Norm-placement study options (issue 9; see transformer/model/block.py).
  mix_post_fraction: float = 0.25  # mix: the first floor(fraction * layers) blocks are post-norm
  dyt_alpha_init: float = 0.5  # norm=dyt: initial value of the learnable scalar alpha
  qk_norm: bool = False  # normalize queries and keys per head (norm of kind `norm`)
  positions: str = "sinusoidal"  # sinusoidal | learned | rope | none
  max_len: int = 2048  # longest position the model supports (learned table size)
  use_bias: bool = True  # biases in attention projections and feed-forward layers
  tie_embeddings: bool = True  # output projection is the transposed token embedding
  embed_scale: bool = True  # multiply token embeddings by sqrt(d_model) (Vaswani et al.)
  dropout_rate: float = 0.0  # dropout on embeddings and on each residual branch
  attention_dropout_rate: float = 0.0  # dropout on attention weights (reference impl only)
  # reference: einsum softmax; xla | cudnn: jax.nn.dot_product_attention
  attention_impl: str = "xla"
  dtype: str = "float32"  # compute dtype: float32 | bfloat16
  param_dtype: str = "float32"  # parameter storage dtype
  scan_layers: bool = False  # one lax.scan over stacked layer params instead of a loop
  remat: str = "none"  # rematerialize in backprop: none | full | minimal (keeps matmuls)
  # Fields added with the model library (issue 3).
  num_kv_heads: int = 0  # key/value heads (grouped-query attention); 0 = num_heads
  num_decoder_layers: int = 0  # encoder_decoder: decoder blocks; 0 = num_layers
  rope_max_timescale: float = 10_000.0  # rope: base of the rotary frequencies
  num_classes: int = 2  # classifier: output classes
  mlm_mask_rate: float = 0.15  # masked_lm: fraction of tokens selected (80/10/10 BERT rule)
  init_from: str = ""  # <workdir>[:step] of a run whose matching parameters start this one
  beam_size: int = 4  # encoder_decoder eval: beams for beam-search accuracy
  length_penalty: float = 0.6  # beam search: score / ((5 + len) / 6) ** alpha (Wu et al., 2016)
  max_decode_len: int = 0  # encoder_decoder eval: longest decoded target; 0 = data.tgt_len
  patch_size: int = 4  # vit_classifier: square patches of patch_size x patch_size pixels
  pooling: str = "cls"  # vit_classifier: cls ([CLS] token) | mean (over patches)
  image_size: int = 0  # vit_classifier: image side in pixels (set from the dataset)
  image_channels: int = 0  # vit_classifier: image channels (set from the dataset)
  # GPU speed (issue 19): embedding/output rows rounded up to a multiple of this (64: GPT-2's
  # 50257 -> 50304) for tensor-core-friendly matmuls; the padded logits are dropped. 0 = off.
  vocab_pad_multiple: int = 0

  def __post_init__(self):
    s = "model"
    _choice(s, "remat", self.remat, REMAT_POLICIES)
    _choice(s, "kind", self.kind, MODEL_KINDS)
    _choice(s, "activation", self.activation, ACTIVATIONS)
    _choice(s, "norm_placement", self.norm_placement, NORM_PLACEMENTS)
    _choice(s, "norm", self.norm, NORMS)
    _choice(s, "positions", self.positions, POSITIONS)
    _choice(s, "attention_impl", self.attention_impl, ATTENTION_IMPLS)
    _choice(s, "dtype", self.dtype, DTYPES)
    _choice(s, "param_dtype", self.param_dtype, DTYPES)
    for f in ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len",
              "norm_epsilon"):
      _positive(s, f, getattr(self, f))
    for f in ("dropout_rate", "attention_dropout_rate"):
      v = getattr(self, f)
      if not 0.0 <= v < 1.0:
        raise ConfigError(f"--config.model.{f}={v!r} must be in [0, 1).")
    if self.d_model % self.num_heads:
      raise ConfigError(
          f"--config.model.d_model={self.d_model} is not divisible by "
          f"--config.model.num_heads={self.num_heads}; each head gets d_model / num_heads dims.")
    for f in ("num_kv_heads", "num_decoder_layers", "max_decode_len", "length_penalty"):
      _positive(s, f, getattr(self, f), allow_zero=True)
    _positive(s, "rope_max_timescale", self.rope_max_timescale)
    _positive(s, "beam_size", self.beam_size)
    if not isinstance(self.vocab_pad_multiple, int) or self.vocab_pad_multiple < 0:
      raise ConfigError(f"--config.model.vocab_pad_multiple={self.vocab_pad_multiple!r} must be "
                        "an int >= 0 (0 = no padding).")
    _positive(s, "patch_size", self.patch_size)
    _choice(s, "pooling", self.pooling, ("cls", "mean"))
    if self.num_classes < 2:
      raise ConfigError(f"--config.model.num_classes={self.num_classes!r} must be >= 2.")
    if not 0.0 < self.mlm_mask_rate < 1.0:
      raise ConfigError(f"--config.model.mlm_mask_rate={self.mlm_mask_rate!r} must be in (0, 1).")
    if self.num_kv_heads and self.num_heads % self.num_kv_heads:
      raise ConfigError(
          f"--config.model.num_heads={self.num_heads} is not a multiple of "
          f"--config.model.num_kv_heads={self.num_kv_heads}; each key/value head serves "
          "num_heads / num_kv_heads query heads.")
    if self.positions == "sinusoidal" and self.d_model % 2:
      raise ConfigError(f"--config.model.positions=sinusoidal needs an even d_model, got "
                        f"{self.d_model}; change d_model or use positions=rope/learned.")
    if self.positions == "rope" and self.head_dim % 2:
      raise ConfigError(
          f"--config.model.positions=rope needs an even head_dim, got d_model / num_heads = "
          f"{self.head_dim}; change d_model or num_heads.")
    self._check_norm_options()
    if self.attention_dropout_rate > 0 and self.attention_impl != "reference":
      raise ConfigError(
          "--config.model.attention_dropout_rate > 0 needs --config.model.attention_impl=reference "
          f"(jax.nn.dot_product_attention, used by {self.attention_impl!r}, has no dropout).")

  @property
  def padded_vocab_size(self) -> int:
    """Rows of the embedding and columns of the output matmul: `vocab_size` rounded up to a
    multiple of `vocab_pad_multiple` (unchanged when 0)."""
    m = self.vocab_pad_multiple
    return -(-self.vocab_size // m) * m if m else self.vocab_size

  def _check_norm_options(self) -> None:
    """Combinations of placement, norm kind and options that cannot run (or mean nothing)."""
    if not 0.0 <= self.mix_post_fraction <= 1.0:
      raise ConfigError(f"--config.model.mix_post_fraction={self.mix_post_fraction!r} must be "
                        "in [0, 1] (the fraction of post-norm layers of norm_placement=mix).")
    _positive("model", "dyt_alpha_init", self.dyt_alpha_init)
    if self.norm == "none" and self.norm_placement != "pre":
      raise ConfigError(
          f"--config.model.norm=none with norm_placement={self.norm_placement!r} leaves no "
          "normalization for the placement to place (it would be the un-normalized residual "
          "network x + f(x), which is norm_placement=pre with norm=none); use "
          "--config.model.norm_placement=pre, or pick a norm (layernorm, rmsnorm, dyt).")
    if self.qk_norm and self.norm_placement in ("hybrid", "hybrid_v0"):
      raise ConfigError(f"--config.model.qk_norm=True with norm_placement="
                        f"{self.norm_placement!r}: HybridNorm already normalizes queries, keys "
                        "and values; set qk_norm=False.")
    if self.qk_norm and self.norm == "none":
      raise ConfigError("--config.model.qk_norm=True normalizes queries and keys with the norm "
                        "of kind model.norm, which is 'none'; pick layernorm, rmsnorm or dyt, "
                        "or set qk_norm=False.")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  @property
  def kv_heads(self) -> int:
    return self.num_kv_heads or self.num_heads

  @property
  def decoder_layers(self) -> int:
    return self.num_decoder_layers or self.num_layers


@dataclasses.dataclass(frozen=True)
class DataConfig:
  # TFDS dataset; local_text is our builder of a local text corpus; token_file: a token file written
  # by --mode=prepare (decoder_lm, no TensorFlow needed)
  name: str = "local_text"
  # local_text: folder of text files; "" = this Python's standard library; token_file: the token
  # file's folder (train.bin, <eval split>.bin, meta.json)
  source_dir: str = ""
  suffixes: str = ".py"  # local_text: comma-separated file suffixes to include
  validation_percent: int = 5  # local_text: percent of files (by path hash) held out
  data_dir: str = ""  # where TFDS prepares datasets; "" = TFDS default (~/tensorflow_datasets)
  tokenizer: str = "bytes"  # bytes (256 byte ids + pad/bos/eos) | sentencepiece | hf: | gpt2:
  seq_len: int = 256  # tokens per training sequence
  shuffle_buffer: int = 4096  # sequences in the training shuffle buffer
  eval_split: str = "validation"  # split used for eval loss and bits per byte
  eval_batches: int = 16  # batches per periodic eval (0 = all); the final eval uses all
  # Added for catalog datasets, seq2seq / classification input, tokenizers and packing
  # (see transformer/data/pipeline.py).
  src_len: int = 64  # seq2seq: source tokens per row (longer sources are truncated)
  tgt_len: int = 64  # seq2seq: target tokens per row
  # concat: cut the document stream (LM only); pack: several examples per row with segment ids and
  # positions; pad: one example per row, padded
  packing: str = "concat"
  bucket_boundaries: str = ""  # pad only: e.g. "32,64,128" pads each batch to the bucket length
  inputs_key: str = ""  # feature holding the input text ("" = the dataset's default)
  targets_key: str = ""  # feature holding the target text or label ("" = default)
  download: bool = True  # catalog datasets: download and prepare if not yet in data_dir
  spm_vocab_size: int = 2048  # sentencepiece: vocabulary trained on the training split
  spm_model: str = ""  # sentencepiece: an existing .model file ("" = train into the workdir)
  spm_train_bytes: int = 20_000_000  # sentencepiece: training text read from the train split

  def __post_init__(self):
    s = "data"
    if self.tokenizer.startswith(("hf:", "gpt2:")):  # transformer/data/tokenizers.py
      if not self.tokenizer.partition(":")[2]:
        raise ConfigError(f"--config.data.tokenizer={self.tokenizer!r} needs a file after the "
                          "colon: hf:<path to tokenizer.json> or gpt2:<path to "
                          "r50k_base.tiktoken>.")
    elif self.tokenizer == "gpt2":
      raise ConfigError("--config.data.tokenizer='gpt2': tiktoken would download GPT-2's BPE "
                        "ranks at run time; give the file instead: gpt2:<path to "
                        "r50k_base.tiktoken>, or hf:<path to GPT-2's tokenizer.json>.")
    else:
      _choice(s, "tokenizer", self.tokenizer, TOKENIZERS)
    _choice(s, "packing", self.packing, PACKINGS)
    for f in ("src_len", "tgt_len", "spm_train_bytes"):
      _positive(s, f, getattr(self, f))
    if self.spm_vocab_size < 300:
      raise ConfigError(
          f"--config.data.spm_vocab_size={self.spm_vocab_size!r} must be >= 300 (SentencePiece "
          "needs 256 byte pieces plus the control symbols).")
    try:
      bounds = self.bucket_lengths
    except ValueError:
      bounds = None
    if bounds is None or any(b <= 0 for b in bounds) or list(bounds) != sorted(set(bounds)):
      raise ConfigError(
          f"--config.data.bucket_boundaries={self.bucket_boundaries!r} must be increasing "
          "positive lengths separated by commas, e.g. '32,64,128' ('' = no bucketing).")
    if self.bucket_boundaries and self.packing != "pad":
      raise ConfigError(
          "--config.data.bucket_boundaries applies to --config.data.packing=pad only "
          f"(packing is {self.packing!r}); set it to '' or use packing=pad.")
    _positive(s, "seq_len", self.seq_len)
    _positive(s, "shuffle_buffer", self.shuffle_buffer)
    _positive(s, "eval_batches", self.eval_batches, allow_zero=True)
    if not 0 < self.validation_percent < 100:
      raise ConfigError(
          f"--config.data.validation_percent={self.validation_percent!r} must be in (0, 100).")
    if self.name == "token_file":  # transformer/data/token_file.py
      if not self.source_dir:
        raise ConfigError("--config.data.name=token_file reads the token file in "
                          "--config.data.source_dir; give that folder (one written by "
                          "--mode=prepare).")
      if self.packing != "concat":
        raise ConfigError(f"--config.data.packing={self.packing!r}: a token file is packed by "
                          "concatenation; use --config.data.packing=concat.")

  @property
  def bucket_lengths(self) -> tuple[int, ...]:
    """`bucket_boundaries` as ints: padded lengths of the buckets below the full length."""
    return tuple(int(b) for b in self.bucket_boundaries.split(",") if b.strip())


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  batch_size: int = 16  # global batch, in sequences
  num_steps: int = 800  # optimizer steps
  log_every: int = 50  # steps between train-metric logs
  eval_every: int = 200  # steps between evaluations (and one at the end)
  micro_batches: int = 1  # gradient accumulation: split each batch into this many pieces
  peak_flops_per_device: float = 0.0  # for MFU; 0 = data sheet (GPU/TPU) or measured (CPU)
  nonfinite: str = "stop"  # stop: end the run at the first non-finite step; skip: skip its update
  # Accelerator performance (issue 11).
  prefetch: int = 0  # batches placed on the devices ahead of their step; 0 = off
  profile_steps: str = ""  # "a,b": jax.profiler trace of steps a..b into <workdir>/profile
  compilation_cache_dir: str = ""  # persistent XLA compilation cache; "" = off
  xla_gpu_flags: bool = True  # launcher adds XLA flags known to help on GPUs (GPU only)
  label_smoothing: float = 0.0  # training loss: eps on the uniform distribution (0 = none)
  samples_at_eval: bool = True  # generative kinds: greedy samples of fixed prompts at every eval
  # Norm-study options (issue 9).
  z_loss: float = 0.0  # coefficient of log(Z)^2 of the output softmax (PaLM); 0 = off
  diagnostics_every: int = 0  # steps between per-layer diagnostics rows; 0 = off
  # GPU speed (issue 19): positions of each row per chunk of the chunked output layer + cross
  # entropy (at most data.seq_len), which never holds the float32 [batch, length, vocab]
  # logits at once; 0 = off (decoder_lm only).
  loss_chunk: int = 0
  # Weights & Biases (transformer/train/wandb_writer.py; needs the [wandb] extra): "" = off.
  wandb_project: str = ""
  wandb_entity: str = ""  # "" = wandb's default entity
  wandb_group: str = ""  # "" = the config without its seed (a sweep's seeds share a group)
  wandb_tags: str = ""  # comma-separated

  def __post_init__(self):
    _choice("train", "nonfinite", self.nonfinite, NONFINITE_MODES)
    for f in ("wandb_project", "wandb_entity", "wandb_group", "wandb_tags"):
      value = getattr(self, f)
      if not isinstance(value, str) or (f != "wandb_tags" and any(c.isspace() for c in value)):
        raise ConfigError(f"--config.train.{f}={value!r} must be a string without spaces "
                          "(\"\" = " + ("off)." if f == "wandb_project" else "wandb's default)."))
    if any(not t.strip() for t in self.wandb_tags.split(",")) and self.wandb_tags:
      raise ConfigError(f"--config.train.wandb_tags={self.wandb_tags!r}: give comma-separated "
                        "non-empty tags, e.g. norm,baseline.")
    for f in ("batch_size", "log_every", "eval_every", "micro_batches"):
      _positive("train", f, getattr(self, f))
    _positive("train", "num_steps", self.num_steps, allow_zero=True)  # 0: see from_config_dict
    if not 0.0 <= self.label_smoothing < 1.0:
      raise ConfigError(f"--config.train.label_smoothing={self.label_smoothing!r} must be in "
                        "[0, 1).")
    _positive("train", "z_loss", self.z_loss, allow_zero=True)
    if not isinstance(self.loss_chunk, int) or self.loss_chunk < 0:
      raise ConfigError(f"--config.train.loss_chunk={self.loss_chunk!r} must be an int >= 0 "
                        "(positions of each row per chunk; 0 = off).")
    if not isinstance(self.diagnostics_every, int) or self.diagnostics_every < 0:
      raise ConfigError(f"--config.train.diagnostics_every={self.diagnostics_every!r} must be an "
                        "int >= 0 (0 = no diagnostics).")
    _positive("train", "peak_flops_per_device", self.peak_flops_per_device, allow_zero=True)
    _positive("train", "prefetch", self.prefetch, allow_zero=True)
    self.profile_range  # noqa: B018 -- validates profile_steps
    if self.batch_size % self.micro_batches:
      raise ConfigError(
          f"--config.train.batch_size={self.batch_size} is not divisible by "
          f"--config.train.micro_batches={self.micro_batches}; each micro-batch must have "
          "batch_size / micro_batches sequences.")

  @property
  def profile_range(self) -> tuple[int, int] | None:
    """`profile_steps` as `(first, last)` step numbers (1-based, inclusive), or None."""
    if not self.profile_steps.strip():
      return None
    try:
      bounds = [int(p) for p in self.profile_steps.split(",")]
    except ValueError:
      bounds = []
    if len(bounds) == 1:
      bounds *= 2
    if len(bounds) != 2 or not 1 <= bounds[0] <= bounds[1]:
      raise ConfigError(
          f"--config.train.profile_steps={self.profile_steps!r} must be 'first,last' step "
          "numbers with 1 <= first <= last (e.g. '5,8'), one step ('5'), or '' (no profile).")
    return bounds[0], bounds[1]


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  every_steps: int = 200  # steps between checkpoints (and one at the end)
  keep: int = 3  # most recent checkpoints kept
  keep_best: int = 1  # also keep this many with the lowest eval loss
  async_save: bool = True  # write checkpoints in the background

  def __post_init__(self):
    _positive("checkpoint", "every_steps", self.every_steps)
    _positive("checkpoint", "keep", self.keep)
    _positive("checkpoint", "keep_best", self.keep_best, allow_zero=True)


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
  """How a run is spread over devices (see `transformer/train/parallel.py`).

  `data`, `fsdp`, `tensor`: mesh axis sizes; one of them may be -1 (fills the devices left).
  `rules`: `(logical axis, mesh axis or "")` pairs; a ConfigDict `{logical: mesh_axis}` works
  too. Batches are sharded over `data` and `fsdp`; parameters by the rules.
  `dcn_data`: of the `data` axis, the ways that cross the slow network between TPU slices (or,
  off TPU, between processes); it must divide `data`, and the mesh comes from
  `mesh_utils.create_hybrid_device_mesh`. 1: one slice, `jax.make_mesh`.
  """
  strategy: str = "jit"  # jit: sharded over a mesh | pmap: replicated data parallel
  data: int = -1  # mesh axis sizes; -1 takes the devices the others leave
  fsdp: int = 1  # parameters and optimizer state sharded over this axis too
  tensor: int = 1  # heads / mlp / vocab dims split over this axis
  # logical parameter axis -> mesh axis ("" = replicated); a config file holds it as a ConfigDict,
  # so --config.parallel.rules.embed=tensor overrides one
  rules: Any = DEFAULT_LOGICAL_RULES
  dcn_data: int = 1  # of `data`, the ways across TPU slices (else processes); 1 = none

  def __post_init__(self):
    s = "parallel"
    _choice(s, "strategy", self.strategy, STRATEGIES)
    sizes = {a: getattr(self, a) for a in MESH_AXES}
    for a, v in sizes.items():
      if not isinstance(v, int) or isinstance(v, bool) or (v < 1 and v != -1):
        raise ConfigError(f"--config.parallel.{a}={v!r} must be a positive int or -1 "
                          "(use the devices the other axes leave).")
    if list(sizes.values()).count(-1) > 1:
      raise ConfigError("Only one of --config.parallel.data/fsdp/tensor may be -1; "
                        f"got {sizes}.")
    rules = self.rules
    if isinstance(rules, Mapping):
      rules = tuple(rules.items())
    try:
      rules = tuple((str(k), "" if v is None else str(v)) for k, v in rules)
    except (TypeError, ValueError):
      raise ConfigError(f"--config.parallel.rules={self.rules!r} must map logical axis names "
                        "to mesh axes, e.g. {'embed': 'fsdp', 'mlp': 'tensor'}.") from None
    for logical, mesh_axis in rules:
      if mesh_axis not in MESH_AXES + ("",):
        raise ConfigError(f"--config.parallel.rules.{logical}={mesh_axis!r} is not a mesh "
                          f"axis; choose one of {list(MESH_AXES)} or '' (replicated).")
    if not isinstance(self.dcn_data, int) or isinstance(self.dcn_data, bool) or self.dcn_data < 1:
      raise ConfigError(f"--config.parallel.dcn_data={self.dcn_data!r} must be a positive int "
                        "(the slices, or processes, the data axis spans; 1 = one).")
    if self.dcn_data > 1 and self.data not in (-1,) and self.data % self.dcn_data:
      raise ConfigError(f"--config.parallel.dcn_data={self.dcn_data} must divide "
                        f"--config.parallel.data={self.data}.")
    if self.strategy == "pmap" and self.dcn_data != 1:
      raise ConfigError("--config.parallel.dcn_data is a mesh setting: it needs "
                        "--config.parallel.strategy=jit.")
    if self.strategy == "pmap" and (self.fsdp, self.tensor) != (1, 1):
      raise ConfigError("--config.parallel.strategy=pmap replicates the state: it needs "
                        "--config.parallel.fsdp=1 and --config.parallel.tensor=1.")
    object.__setattr__(self, "rules", rules)


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything a run needs, validated."""
  seed: int
  model: ModelConfig
  data: DataConfig
  optim: OptimConfig
  train: TrainConfig
  checkpoint: CheckpointConfig
  parallel: ParallelConfig = ParallelConfig()

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)


_SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "checkpoint": CheckpointConfig,
    "parallel": ParallelConfig,
}
# Sections a config file may leave out (their defaults are used).
_OPTIONAL_SECTIONS = ("parallel",)
SEED = 0  # `seed`, the one top-level field: seeds parameter init, data shuffling and dropout


def default_config_dict() -> ml_collections.ConfigDict:
  """Every section's fields at their dataclass defaults (each default is written there only,
  with its one-line help), as the ConfigDict a config file starts from
  (`configs/default.py`); `parallel.rules` as `{logical axis: mesh axis}`, so that
  `--config.parallel.rules.embed=tensor` overrides one rule."""
  c = ml_collections.ConfigDict()
  c.seed = SEED
  for name, cls in _SECTIONS.items():
    section = {f.name: f.default for f in dataclasses.fields(cls)}
    if name == "parallel":
      section["rules"] = ml_collections.ConfigDict(dict(section["rules"]))
    c[name] = ml_collections.ConfigDict(section)
  return c


def _build_section(name: str, cls: type, values: Mapping[str, Any], extra: Mapping[str, Any]):
  known = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - known)
  if unknown:
    raise ConfigError(
        f"Unknown field(s) {unknown} in config section {name!r}; known fields: {sorted(known)}.")
  kwargs = dict(values)
  kwargs.update(extra)
  for f in dataclasses.fields(cls):
    if f.name in kwargs and isinstance(f.default, (bool, int, float, str)):
      kwargs[f.name] = _coerce(name, f.name, kwargs[f.name], type(f.default))
  return cls(**kwargs)


def _coerce(section: str, field: str, value: Any, want: type) -> Any:
  if want is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if not isinstance(value, want) or (want is int and isinstance(value, bool)):
    raise ConfigError(
        f"--config.{section}.{field}={value!r} has type {type(value).__name__}; "
        f"expected {want.__name__}.")
  return value


def from_config_dict(config: ml_collections.ConfigDict | Mapping[str, Any],
                     vocab_size: int | None = None) -> ExperimentConfig:
  """Validates a ConfigDict (or plain nested dict) into an `ExperimentConfig`.

  Args:
    config: the config as returned by `configs/<name>.py:get_config()` plus overrides.
    vocab_size: the tokenizer's vocabulary size, filled into the model config.

  Raises:
    ConfigError: naming the first invalid field and what it accepts.
  """
  d = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
  unknown = sorted(set(d) - set(_SECTIONS) - {"seed"})
  if unknown:
    raise ConfigError(f"Unknown top-level config key(s) {unknown}; known: "
                      f"{sorted(set(_SECTIONS) | {'seed'})}.")
  missing = sorted(set(_SECTIONS) - set(d) - set(_OPTIONAL_SECTIONS))
  if missing:
    raise ConfigError(f"Config is missing section(s) {missing}.")
  sections = {}
  for name, cls in _SECTIONS.items():
    extra = {"vocab_size": vocab_size} if name == "model" and vocab_size else {}
    sections[name] = _build_section(name, cls, d.get(name, {}), extra)
  seed = d.get("seed", SEED)
  if not isinstance(seed, int) or isinstance(seed, bool):
    raise ConfigError(f"--config.seed={seed!r} must be an int.")
  if sections["train"].num_steps == 0 and not sections["model"].init_from:
    raise ConfigError("--config.train.num_steps=0 trains nothing; it writes the model of "
                      "--config.model.init_from as checkpoint 0 (to evaluate, sample or export "
                      "it): give that, or num_steps >= 1.")
  return ExperimentConfig(seed=seed, **sections)
