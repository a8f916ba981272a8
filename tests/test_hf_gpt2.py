"""Hugging Face GPT-2 export and import (transformer/weights/hf_gpt2.py, `--mode=export`,
`model.init_from=hf:DIR`).

The test of record: the exported files, run by an independent float64 NumPy transcription of
GPT-2's forward pass (tests/gpt2_numpy_reference.py, which reads only the safetensors file and
config.json), give our model's logits within ATOL. Torch is not installed, so Hugging Face's own
GPT2LMHeadModel is not run here.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import meta

from configs import gpt2_small
from tests.gpt2_numpy_reference import gpt2_logits
from transformer import kinds
from transformer.config import ConfigError, from_config_dict
from transformer.weights import hf_gpt2
from transformer.weights import init_from

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# float32 model vs float64 reference, logits of magnitude ~1-10 after the random perturbation
# below (max |logit| 4.8): measured max |difference| 4.0e-6; the bound leaves room for other
# CPUs' reductions.
ATOL = 2e-5
TINY = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, vocab_size=50, max_len=16)


def tiny_config(**model):
  c = gpt2_small.get_config()
  for k, v in {**TINY, **model}.items():
    setattr(c.model, k, v)
  return from_config_dict(c)


def random_params(cfg, seed=0):
  """Init, then every leaf perturbed (LayerNorm gains and all biases away from 1 and 0)."""
  model = kinds.build_model(cfg.model)
  params = meta.unbox(model.init(jax.random.PRNGKey(seed), jnp.zeros((1, 8), jnp.int32))
                      ["params"])
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
  leaves = [np.asarray(x + 0.2 * jax.random.normal(k, x.shape)) for x, k in zip(leaves, keys)]
  return model, jax.tree_util.tree_unflatten(treedef, leaves)


@pytest.mark.parametrize("pad", [0, 64])
def test_independent_gpt2_forward_pass_gives_our_logits(tmp_path, pad):
  cfg = tiny_config(vocab_pad_multiple=pad)
  model, params = random_params(cfg)
  hf_gpt2.write_hf_dir(cfg.model, params, str(tmp_path))
  ids = np.random.default_rng(0).integers(0, TINY["vocab_size"], (2, TINY["max_len"]))
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(ids)), np.float64)
  ref = gpt2_logits(str(tmp_path), ids)
  assert ours.shape == ref.shape == (2, TINY["max_len"], TINY["vocab_size"])
  assert np.abs(ref).max() > 1  # not a vanishing signal
  np.testing.assert_allclose(ours, ref, rtol=0, atol=ATOL)
  saved = json.loads((tmp_path / "config.json").read_text())
  assert saved["activation_function"] == "gelu_new"
  assert saved["layer_norm_epsilon"] == cfg.model.norm_epsilon


def test_export_then_import_is_bitwise(tmp_path):
  cfg = tiny_config(vocab_pad_multiple=64)  # 50 real rows of 64: padding dropped, zero-filled
  _, params = random_params(cfg, seed=3)
  hf_gpt2.write_hf_dir(cfg.model, params, str(tmp_path))
  loaded = init_from.matching_params(f"hf:{tmp_path}", params, log=lambda s: None)
  want = init_from._flat(params)
  assert loaded.keys() == want.keys()
  for path, leaf in want.items():
    got = loaded[path]
    assert got.dtype == leaf.dtype and got.shape == leaf.shape, path
    if path == "embedder/token_embedding/embedding":
      assert np.array_equal(got[:50], leaf[:50]) and not got[50:].any()
    else:
      assert np.array_equal(got, leaf), path
  merged = init_from.merge(params, loaded)
  again = tmp_path / "again"
  hf_gpt2.write_hf_dir(cfg.model, merged, str(again))
  assert (again / "model.safetensors").read_bytes() == (tmp_path / "model.safetensors").read_bytes()


@pytest.mark.parametrize("field,value,named", [
    ("norm_placement", "post", "norm_placement=post"), ("positions", "rope", "positions=rope"),
    ("activation", "swiglu", "activation=swiglu"), ("norm", "rmsnorm", "norm=rmsnorm"),
    ("tie_embeddings", False, "tie_embeddings=False"), ("use_bias", False, "use_bias=False"),
    ("embed_scale", True, "embed_scale=True"), ("qk_norm", True, "qk_norm=True")])
def test_what_gpt2_lacks_is_named(field, value, named):
  cfg = tiny_config(**{field: value})
  with pytest.raises(ConfigError, match=f"GPT-2 lacks model.{named}"):
    hf_gpt2.check_exportable(cfg.model, "the run")
  assert hf_gpt2.gpt2_lacks(tiny_config().model) == []


def test_init_from_a_folder_that_is_not_gpt2_is_one_line(tmp_path):
  cfg = tiny_config()
  _, params = random_params(cfg)
  with pytest.raises(ConfigError, match="does not exist"):
    init_from.matching_params(f"hf:{tmp_path}", params)
  hf_gpt2.write_hf_dir(cfg.model, params, str(tmp_path))
  (tmp_path / "model.safetensors").write_bytes(b"\x00torn")
  with pytest.raises(ConfigError, match="cannot be read as safetensors"):
    init_from.matching_params(f"hf:{tmp_path}", params)


def _launch(*args, timeout=240):
  return subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=dict(os.environ))


def test_export_refuses_a_run_gpt2_cannot_express_in_one_line(tmp_path):
  cfg = gpt2_small.get_config()
  cfg.model.norm_placement = "post"
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "config.json").write_text(json.dumps(cfg.to_dict()))
  r = _launch(f"--workdir={workdir}", "--mode=export", f"--export_dir={tmp_path / 'hf'}")
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert r.returncode != 0 and len(lines) == 1, r.stderr[-2000:]
  assert "GPT-2 lacks model.norm_placement=post" in lines[0]
  assert not (tmp_path / "hf").exists()
  r = _launch(f"--workdir={workdir}", "--mode=export")
  assert r.returncode == 2 and "--mode=export needs --export_dir" in r.stderr


@pytest.mark.slow
def test_train_gpt2_small_scaled_down_export_and_the_independent_logits_match(tmp_path,
                                                                              tiny_corpus):
  """The issue's "done when": train a BPE on the corpus, prepare token files with it, train
  configs/gpt2_small.py scaled down on them, export it with --mode=export (weights and the
  tokenizer), encode a text with the exported tokenizer.json, run the files with the NumPy
  reference and compare with our logits for those ids + 3."""
  from tokenizers import Tokenizer
  from transformer.data.tokenizers import train_bpe
  source = tiny_corpus["source_dir"]
  texts = [open(os.path.join(d, f)).read() for d, _, fs in os.walk(source) for f in fs]
  bpe = train_bpe(texts, str(tmp_path / "bpe" / "tokenizer.json"), vocab_size=300)
  tokens, workdir, out = tmp_path / "tokens", tmp_path / "w", tmp_path / "hf"
  r = _launch("--mode=prepare", f"--prepare_dir={tokens}", f"--config.data.source_dir={source}",
              f"--config.data.data_dir={tiny_corpus['data_dir']}",
              f"--config.data.tokenizer=hf:{bpe}")
  assert r.returncode == 0, r.stderr[-2000:]
  r = _launch("--config=configs/gpt2_small.py", f"--workdir={workdir}",
              "--config.data.name=token_file", f"--config.data.source_dir={tokens}",
              "--config.model.d_model=32", "--config.model.num_heads=2",
              "--config.model.num_layers=2", "--config.model.d_ff=64",
              "--config.model.max_len=64", "--config.data.seq_len=32",
              "--config.train.num_steps=4", "--config.train.batch_size=8",
              "--config.train.eval_every=4", "--config.checkpoint.every_steps=4",
              "--config.data.eval_batches=1", "--config.optim.warmup_steps=1",
              "--config.train.samples_at_eval=False", timeout=280)
  assert r.returncode == 0, r.stderr[-2000:]
  r = _launch("--mode=export", f"--workdir={workdir}", f"--export_dir={out}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "Exported step 4" in r.stdout and "tokenizer.json" in r.stdout
  assert json.loads((out / "config.json").read_text())["vocab_size"] == 300
  ids = np.asarray([Tokenizer.from_file(str(out / "tokenizer.json")).encode(
      open(os.path.join(source, "pkg", "mod_00.py")).read()).ids[:64]])
  assert ids.shape == (1, 64)
  params, _, _ = init_from.load_params(str(workdir))
  from transformer.workdir import run_config
  cfg = run_config(str(workdir))
  assert cfg.model.vocab_size == 303  # the tokenizer's 300 + our pad, BOS, EOS
  ours = kinds.build_model(cfg.model).apply({"params": meta.unbox(params)}, jnp.asarray(ids + 3))
  np.testing.assert_allclose(np.asarray(ours, np.float64)[..., 3:303],
                             gpt2_logits(str(out), ids), rtol=0, atol=ATOL)


def _export_tiny(tmp_path, **hf_changes):
  """A tiny GPT-2 folder of `tiny_config()`'s model, config.json then edited; its params."""
  cfg = tiny_config()
  _, params = random_params(cfg)
  hf_gpt2.write_hf_dir(cfg.model, params, str(tmp_path))
  path = tmp_path / "config.json"
  path.write_text(json.dumps({**json.loads(path.read_text()), **hf_changes}))
  return cfg, params


@pytest.mark.parametrize("changes,named", [
    ({"activation_function": "relu"}, "activation_function=relu"),
    ({"activation_function": "gelu"}, "activation_function=gelu"),  # exact GELU is not ours
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ({"scale_attn_weights": False}, "scale_attn_weights=False"),
    ({"n_positions": 8}, "n_positions=8 vs model.max_len=16"),
    ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06 vs model.norm_epsilon=1e-05 "
                                   "(--config.model.norm_epsilon=1e-06)"),
    ({"n_inner": None}, "n_inner=128 vs model.d_ff=64 (--config.model.d_ff=128)"),
])
def test_import_refuses_a_folder_whose_config_is_not_the_runs_model(tmp_path, changes, named):
  cfg, params = _export_tiny(tmp_path, **changes)
  with pytest.raises(ConfigError, match="Nothing was loaded") as e:
    init_from.matching_params(f"hf:{tmp_path}", params, log=lambda s: None, model=cfg.model)
  assert named in str(e.value) and "\n" not in str(e.value)
  with pytest.raises(ConfigError, match="Nothing was loaded"):  # launch.py's preflight
    from transformer.cli.preflight import check_files
    check_files(dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, init_from=f"hf:{tmp_path}")))


def test_import_names_every_field_that_differs_and_what_gpt2_lacks(tmp_path):
  cfg, params = _export_tiny(tmp_path, n_layer=3, n_embd=64)
  run = tiny_config(positions="sinusoidal", embed_scale=True).model
  with pytest.raises(ConfigError) as e:
    hf_gpt2.check_importable(run, str(tmp_path))
  message = str(e.value)
  for part in ("model.positions=sinusoidal", "--config.model.positions=learned",
               "model.embed_scale=True", "--config.model.embed_scale=False",
               "n_layer=3 vs model.num_layers=2 (--config.model.num_layers=3)",
               "n_embd=64 vs model.d_model=32 (--config.model.d_model=64)"):
    assert part in message, message


def test_import_of_tensors_that_do_not_fit_is_refused_not_loaded_in_part(tmp_path):
  cfg, params = _export_tiny(tmp_path)
  big = tiny_config(d_ff=128)
  _, other = random_params(big)
  hf_gpt2.write_hf_dir(big.model, other, str(tmp_path / "big"))
  (tmp_path / "big" / "config.json").write_text((tmp_path / "config.json").read_text())
  with pytest.raises(ConfigError, match="do not fit this model.*mlp|do not fit this model.*wi"):
    init_from.matching_params(f"hf:{tmp_path / 'big'}", params, log=lambda s: None,
                              model=cfg.model)


def test_import_of_a_folder_with_more_positions_takes_the_first_rows(tmp_path):
  long = tiny_config(max_len=32)
  _, params = random_params(long)
  hf_gpt2.write_hf_dir(long.model, params, str(tmp_path))
  short = tiny_config()  # max_len 16
  _, abstract = random_params(short)
  loaded = init_from.matching_params(f"hf:{tmp_path}", abstract, log=lambda s: None,
                                     model=short.model)
  table = np.asarray(params["embedder"]["position_table"]["table"])
  assert np.array_equal(loaded["embedder/position_table/table"], table[:16])
