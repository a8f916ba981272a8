"""The parallel / checkpoint / throughput parts of the config, the multi-host flags, and the
FLOPs count behind MFU."""


import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from configs import gpt2_small
from configs.default import get_config
from transformer.config import ConfigError, ModelConfig, from_config_dict
from transformer.cli.launch import initialize_distributed
from transformer.model.models import DecoderLM
from transformer.kinds import training_flops_per_step


def test_parallel_section_defaults_overrides_and_errors():
  cfg = from_config_dict(get_config())
  assert cfg.parallel.strategy == "jit" and cfg.parallel.data == -1
  assert ("embed", "fsdp") in cfg.parallel.rules and ("head_dim", "") in cfg.parallel.rules
  c = get_config()
  c.parallel.rules.embed = "tensor"  # what --config.parallel.rules.embed=tensor does
  c.parallel.fsdp = 2
  cfg = from_config_dict(c)
  assert dict(cfg.parallel.rules)["embed"] == "tensor" and cfg.parallel.fsdp == 2
  d = get_config().to_dict()
  del d["parallel"]  # config files of other tasks may leave the section out
  assert from_config_dict(d).parallel.strategy == "jit"
  for section, field, value, message in [
      ("parallel", "strategy", "gspmd", "strategy"),
      ("parallel", "tensor", 0, "parallel.tensor=0"),
      ("train", "micro_batches", 3, "not divisible by --config.train.micro_batches=3"),
      ("model", "remat", "some", "remat"),
      ("checkpoint", "keep_best", -1, "keep_best")]:
    d = get_config().to_dict()
    d[section][field] = value
    with pytest.raises(ConfigError, match=message):
      from_config_dict(d)


def test_multihost_flags_are_checked_before_anything_starts():
  assert initialize_distributed() is False  # not in a cluster, no flags: single process
  with pytest.raises(ConfigError, match="go together"):
    initialize_distributed("127.0.0.1:1234", None, 0)
  with pytest.raises(ConfigError, match="--process_id=2 must be in"):
    initialize_distributed("127.0.0.1:1234", 2, 2)


def test_gpt2_small_has_124m_parameters():
  cfg = from_config_dict(gpt2_small.get_config())
  assert (cfg.data.seq_len, cfg.model.vocab_size) == (1024, 50257)
  shapes = jax.eval_shape(lambda r: DecoderLM(cfg.model).init(r, jnp.zeros((1, 8), jnp.int32)),
                          jax.random.PRNGKey(0))
  n = sum(x.size for x in jax.tree.leaves(nn.meta.unbox(shapes)))
  assert abs(n - 124.4e6) < 0.5e6, n  # GPT-2 small: 124,439,808 with tied embeddings


def test_flops_match_xla_cost_analysis_of_the_forward_pass():
  # Wide layers and a short sequence: matmuls dominate, as the MaxText count assumes. XLA
  # computes the full (unmasked) attention matrix, so compare with the causal halving undone.
  cfg = ModelConfig(vocab_size=512, d_model=256, num_heads=4, num_layers=2, d_ff=1024,
                    attention_impl="reference")
  batch, length = 4, 64
  model = DecoderLM(cfg)
  tokens = jnp.zeros((batch, length), jnp.int32)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), tokens)["params"])
  cost = jax.jit(lambda p: model.apply({"params": p}, tokens)).lower(params).compile()
  xla_flops = cost.cost_analysis()["flops"]
  ours = training_flops_per_step(cfg, batch, length) / 3
  causal_half = 4 * batch * length ** 2 * cfg.d_model / 2 * cfg.num_layers
  assert abs((ours + causal_half) / xla_flops - 1) < 0.05, (ours, xla_flops)


def test_encoder_decoder_flops_match_xla_cost_analysis():
  """Encoder on src_len tokens, decoder on tgt_len tokens with cross-attention: the count
  follows the two lengths (a single seq_len would be off by their ratio)."""
  from transformer.model.models import EncoderDecoder
  cfg = ModelConfig(kind="encoder_decoder", vocab_size=512, d_model=256, num_heads=4,
                    num_layers=2, num_decoder_layers=2, d_ff=1024, attention_impl="reference")
  batch, src_len, tgt_len = 4, 48, 16
  model = EncoderDecoder(cfg)
  src = jnp.ones((batch, src_len), jnp.int32)
  tgt = jnp.ones((batch, tgt_len), jnp.int32)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), src, tgt)["params"])
  # Tokens are arguments, not closed-over constants XLA could fold into the program.
  cost = jax.jit(lambda p, s, t: model.apply({"params": p}, s, t)).lower(
      params, src, tgt).compile()
  xla_flops = cost.cost_analysis()["flops"]
  ours = training_flops_per_step(cfg, batch, tgt_len, src_len) / 3
  causal_half = 4 * batch * tgt_len ** 2 * cfg.d_model / 2 * cfg.num_decoder_layers
  assert abs((ours + causal_half) / xla_flops - 1) < 0.05, (ours, xla_flops)
