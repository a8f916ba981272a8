"""Hugging Face GPT-2 weights: export a run (`--mode=export`), import them (`init_from=hf:DIR`).

The layout is PyTorch `GPT2LMHeadModel`'s as `save_pretrained` writes it: `model.safetensors`
with float32 tensors named `transformer.wte.weight` `[vocab, d]`, `transformer.wpe.weight`
`[n_positions, d]`, per layer N `transformer.h.N.ln_1.{weight,bias}` `[d]`,
`transformer.h.N.attn.c_attn.{weight [d, 3d], bias [3d]}` (Conv1D: `[in, out]`, query | key |
value, heads major), `transformer.h.N.attn.c_proj.{weight [d, d], bias [d]}`,
`transformer.h.N.ln_2.*`, `transformer.h.N.mlp.c_fc.{weight [d, d_ff], bias}`,
`transformer.h.N.mlp.c_proj.{weight [d_ff, d], bias}`, `transformer.ln_f.*`; the output layer
is tied to `wte` (no `lm_head.weight`), as GPT-2's. Beside it a GPT-2 `config.json`.

GPT-2 is: pre-norm LayerNorm (with bias) blocks, a final LayerNorm, learned positions added to
unscaled token embeddings, multi-head attention and a GELU MLP with biases, tied embeddings.
`activation_function` is `gelu_new`, the tanh approximation, which is what our "gelu"
(`jax.nn.gelu`, approximate=True by default) computes. `layer_norm_epsilon` carries our
`model.norm_epsilon` (1e-6 by default here, GPT-2's own is 1e-5). Vocabulary padding
(`vocab_pad_multiple`) is dropped on export (the padded rows never reach a logit) and zero-filled
on import.

Token ids (transformer/weights/hf_tokenizer.py has the tokenizer files). A run whose ids are
another tokenizer's shifted up by `id_offset` = 3 (`hf:`, `gpt2:`, nanoGPT / llm.c token files;
0, 1, 2 are our pad, BOS, EOS) is exported without embedding rows 0..2: exported row `i` is
our row `i + 3`, the tokenizer's id `i`, and config.json's `vocab_size` is the tokenizer's.
`model.init_from=hf:DIR` into a run with `id_offset` 3 and `vocab_size` = the folder's + 3
puts the folder's row `i` at row `i + 3` and fills rows 0..2 with the mean of the folder's rows
(computed in float64, cast to the folder's dtype; a zero row would give pad/BOS/EOS a logit of
0, far above a trained GPT-2's usual logits). The shared rows, and every other tensor, are
bitwise what was exported, so export -> import -> export writes the same file. A folder whose
vocabulary is not the run's (`vocab_size` != the folder's + `id_offset`) leaves the embedding
fresh. Runs with `bytes` or `sentencepiece` (`id_offset` 0) keep every row.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from transformer import paths
from transformer.config import ConfigError, ModelConfig
from transformer.errors import RunError

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
PREFIX = "transformer."


# What GPT-2 is, as `(field, its value here, why)`: a run whose model differs in any of these
# cannot be written as GPT-2, nor start from GPT-2's weights.
GPT2_MODEL = (
    ("kind", "decoder_lm", "GPT-2 is a decoder-only LM"),
    ("norm_placement", "pre", "GPT-2 is pre-norm"),
    ("norm", "layernorm", "GPT-2 has LayerNorm"),
    ("norm_bias", True, "GPT-2's LayerNorm has a bias"),
    ("qk_norm", False, "GPT-2 has no query/key norm"),
    ("positions", "learned", "GPT-2 has learned positions"),
    ("activation", "gelu", "GPT-2 has GELU"),
    ("tie_embeddings", True, "GPT-2 ties its output layer to wte"),
    ("use_bias", True, "GPT-2 has biases"),
    ("embed_scale", False, "GPT-2 adds unscaled token embeddings"),
    ("num_kv_heads", 0, "GPT-2 has no grouped-query attention"),
    ("scan_layers", False, "stacked layers: not exported yet; train with scan_layers=False"),
)


def _lacks(cfg: ModelConfig) -> list[tuple[str, str, str]]:
  """`(field, value, why)` of each `GPT2_MODEL` field this model differs in."""
  out = []
  for field, want, why in GPT2_MODEL:
    value = getattr(cfg, field)
    if field == "num_kv_heads" and value == cfg.num_heads:
      continue  # as many key/value heads as heads: plain multi-head attention
    if value != want:
      out.append((field, value, why))
  return out


def gpt2_lacks(cfg: ModelConfig) -> list[str]:
  """What of this model GPT-2 cannot express (empty: exportable), as `field=value (why)`."""
  return [f"{field}={value} ({why})" for field, value, why in _lacks(cfg)]


def check_exportable(cfg: ModelConfig, what: str) -> None:
  """Raises ConfigError (one line) naming what GPT-2 lacks for this run."""
  lacks = gpt2_lacks(cfg)
  if lacks:
    raise ConfigError(f"{what} cannot be written as GPT-2: GPT-2 lacks model."
                      + "; model.".join(lacks) + ".")


# transformers' GPT2Config defaults: what a config.json without the field means.
HF_DEFAULTS = {"n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None, "n_positions": 1024,
               "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
               "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
               "add_cross_attention": False, "tie_word_embeddings": True}
# Activations that are our "gelu" (the tanh approximation): transformers' gelu_new and the same
# formula under its other names. "gelu" there is the exact (erf) GELU, which ours is not.
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
# Flags of config.json no model of this project expresses, with the value it must have.
HF_FIXED = (("scale_attn_weights", True, "scores are always scaled by 1/sqrt(head_dim) here"),
            ("scale_attn_by_inverse_layer_idx", False, "no per-layer score scaling here"),
            ("add_cross_attention", False, "a decoder-only LM has no cross-attention"),
            ("tie_word_embeddings", True, "the output layer is tied to wte here"))


def _hf_value(hf: dict[str, Any], name: str, kind: type, config_path: str) -> Any:
  value = hf.get(name, HF_DEFAULTS[name])
  if value is None and name == "n_inner":
    return 4 * _hf_value(hf, "n_embd", int, config_path)  # transformers' default
  ok = isinstance(value, kind) and not isinstance(value, bool) if kind is not bool else (
      isinstance(value, bool))
  if kind is float and isinstance(value, int) and not isinstance(value, bool):
    value, ok = float(value), True
  if not ok:
    raise ConfigError(f"{config_path}: {name}={value!r} is not a {kind.__name__}; write the "
                      "folder again with --mode=export or save_pretrained.")
  return value


def import_mismatches(cfg: ModelConfig, hf: dict[str, Any], config_path: str = CONFIG_FILE
                      ) -> list[str]:
  """Each way the GPT-2 `hf` (a config.json) and the run's model `cfg` differ, as
  `folder's value vs the run's (the fix)`; empty when the folder's weights are exactly a model
  of this run. The vocabulary is not compared (`embedding_rows`); a folder with more
  positions than `max_len` fits (its first `max_len` rows are taken)."""
  gpt2 = {field: value for field, value, _ in GPT2_MODEL}
  out = [f"the run's model.{f}={v} ({why}; --config.model.{f}={gpt2[f]})"
         for f, v, why in _lacks(cfg)]
  value = lambda name, kind: _hf_value(hf, name, kind, config_path)
  for name, ours, kind in (("n_embd", "d_model", int), ("n_layer", "num_layers", int),
                           ("n_head", "num_heads", int), ("n_inner", "d_ff", int),
                           ("layer_norm_epsilon", "norm_epsilon", float)):
    theirs = value(name, kind)
    if theirs != getattr(cfg, ours):
      out.append(f"{name}={theirs} vs model.{ours}={getattr(cfg, ours)} "
                 f"(--config.model.{ours}={theirs})")
  positions = value("n_positions", int)
  if positions < cfg.max_len:
    out.append(f"n_positions={positions} vs model.max_len={cfg.max_len}, more positions than "
               f"the folder has (--config.model.max_len={positions})")
  activation = value("activation_function", str)
  if activation not in TANH_GELUS:
    out.append(f"activation_function={activation} (not a model of this project: its GPT-2 "
               f"has gelu_new, the tanh GELU)")
  for name, want, why in HF_FIXED:
    if value(name, bool) != want:
      out.append(f"{name}={value(name, bool)} (not a model of this project: {why})")
  return out


def check_importable(cfg: ModelConfig, directory: str, hf: dict[str, Any] | None = None,
                     what: str = "--config.model.init_from") -> dict[str, Any]:
  """Raises a one-line ConfigError naming every field in which the GPT-2 folder's config.json
  (`hf`, read from `directory` when None) and the run's model differ (`import_mismatches`);
  reads no weights. Returns the config.json."""
  config_path = os.path.join(directory, CONFIG_FILE)
  if hf is None:
    hf = read_hf_config(directory, what)
  differ = import_mismatches(cfg, hf, config_path)
  if differ:
    raise ConfigError(f"{what}=hf:{directory}: {config_path} is not this run's model, so its "
                      "weights would load wrong: " + "; ".join(differ) + ". Nothing was loaded.")
  return hf


def hf_config(cfg: ModelConfig, id_offset: int = 0,
              special_ids: dict[str, int] | None = None) -> dict[str, Any]:
  """The GPT-2 `config.json` of `cfg` (transformers' GPT2Config fields): `vocab_size` without
  the first `id_offset` ids, plus `special_ids` (`bos_token_id`, `eos_token_id`) when known."""
  return {
      "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
      "vocab_size": cfg.vocab_size - id_offset, "n_positions": cfg.max_len, "n_ctx": cfg.max_len,
      "n_embd": cfg.d_model, "n_layer": cfg.num_layers, "n_head": cfg.num_heads,
      "n_inner": cfg.d_ff, "activation_function": "gelu_new",
      "layer_norm_epsilon": cfg.norm_epsilon, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
      "attn_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True,
      "torch_dtype": "float32", **(special_ids or {}),
  }


def to_gpt2(cfg: ModelConfig, params: Any, id_offset: int = 0) -> dict[str, np.ndarray]:
  """Our DecoderLM `params` (unboxed; `params["embedder"]`, `params["decoder"]`) -> GPT-2
  tensors by name, float32, C-contiguous; `wte` is our embedding's rows
  `id_offset .. vocab_size - 1` (the module docstring)."""
  f32 = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float32))
  d = cfg.d_model
  emb, dec = params["embedder"], params["decoder"]
  out = {"wte.weight": f32(emb["token_embedding"]["embedding"])[id_offset:cfg.vocab_size],
         "wpe.weight": f32(emb["position_table"]["table"]),
         "ln_f.weight": f32(dec["final_norm"]["scale"]),
         "ln_f.bias": f32(dec["final_norm"]["bias"])}
  for i in range(cfg.num_layers):
    layer, h = dec[f"layer_{i}"], f"h.{i}."
    attn, ff = layer["self_attention"], layer["feed_forward"]
    out[h + "ln_1.weight"] = f32(layer["self_attention_norm"]["scale"])
    out[h + "ln_1.bias"] = f32(layer["self_attention_norm"]["bias"])
    out[h + "attn.c_attn.weight"] = np.concatenate(
        [f32(attn[n]["kernel"]).reshape(d, -1) for n in ("query", "key", "value")], axis=1)
    out[h + "attn.c_attn.bias"] = np.concatenate(
        [f32(attn[n]["bias"]).reshape(-1) for n in ("query", "key", "value")])
    out[h + "attn.c_proj.weight"] = f32(attn["out"]["kernel"]).reshape(-1, d)
    out[h + "attn.c_proj.bias"] = f32(attn["out"]["bias"])
    out[h + "ln_2.weight"] = f32(layer["feed_forward_norm"]["scale"])
    out[h + "ln_2.bias"] = f32(layer["feed_forward_norm"]["bias"])
    out[h + "mlp.c_fc.weight"] = f32(ff["wi"]["kernel"])
    out[h + "mlp.c_fc.bias"] = f32(ff["wi"]["bias"])
    out[h + "mlp.c_proj.weight"] = f32(ff["wo"]["kernel"])
    out[h + "mlp.c_proj.bias"] = f32(ff["wo"]["bias"])
  return {PREFIX + k: np.ascontiguousarray(v) for k, v in out.items()}


def embedding_rows(wte: np.ndarray, padded_vocab_size: int | None = None,
                   vocab_size: int | None = None, id_offset: int = 0) -> np.ndarray | None:
  """The folder's `wte` `[V, d]` as our embedding `[padded_vocab_size, d]`: `id_offset` rows
  of its mean in front, then `wte`, then zero rows (vocabulary padding). None when
  `vocab_size` is given and is not `V + id_offset` (another vocabulary: the embedding starts
  fresh). Without `vocab_size`, `wte` is only zero-padded (`id_offset` is ignored)."""
  if vocab_size is not None:
    if vocab_size != wte.shape[0] + id_offset:
      return None
    if id_offset:
      mean = wte.astype(np.float64).mean(axis=0).astype(wte.dtype)
      wte = np.concatenate([np.broadcast_to(mean, (id_offset, wte.shape[1])), wte])
  if padded_vocab_size and padded_vocab_size > wte.shape[0]:
    wte = np.concatenate([wte, np.zeros((padded_vocab_size - wte.shape[0], wte.shape[1]),
                                        wte.dtype)])
  return wte


def from_gpt2(tensors: dict[str, np.ndarray], hf: dict[str, Any],
              padded_vocab_size: int | None = None, vocab_size: int | None = None,
              id_offset: int = 0, max_len: int | None = None) -> dict[str, Any]:
  """GPT-2 tensors (names with or without the `transformer.` prefix) and their config.json
  -> our DecoderLM params tree (numpy). The embedding is `embedding_rows(wte, ...)` (left out
  of the tree when it is None); the position table `wpe`'s first `max_len` rows (all without
  it). Raises KeyError for a missing tensor, ValueError for an output layer (`lm_head`) that
  is not `wte` (GPT-2's is tied)."""
  t = {k[len(PREFIX):] if k.startswith(PREFIX) else k: v for k, v in tensors.items()}
  head = tensors.get("lm_head.weight")
  if head is not None and not np.array_equal(head, t["wte.weight"]):
    raise ValueError("lm_head.weight is not wte.weight: an untied output layer")
  d, n = int(hf["n_embd"]), int(hf["n_head"])
  wte = embedding_rows(t["wte.weight"], padded_vocab_size, vocab_size, id_offset)
  decoder: dict[str, Any] = {"final_norm": {"scale": t["ln_f.weight"], "bias": t["ln_f.bias"]}}
  for i in range(int(hf["n_layer"])):
    h = f"h.{i}."
    q, k, v = np.split(t[h + "attn.c_attn.weight"], 3, axis=1)
    qb, kb, vb = np.split(t[h + "attn.c_attn.bias"], 3)
    decoder[f"layer_{i}"] = {
        "self_attention_norm": {"scale": t[h + "ln_1.weight"], "bias": t[h + "ln_1.bias"]},
        "self_attention": {
            name: {"kernel": w.reshape(d, n, d // n), "bias": b.reshape(n, d // n)}
            for name, w, b in (("query", q, qb), ("key", k, kb), ("value", v, vb))}
        | {"out": {"kernel": t[h + "attn.c_proj.weight"].reshape(n, d // n, d),
                   "bias": t[h + "attn.c_proj.bias"]}},
        "feed_forward_norm": {"scale": t[h + "ln_2.weight"], "bias": t[h + "ln_2.bias"]},
        "feed_forward": {"wi": {"kernel": t[h + "mlp.c_fc.weight"], "bias": t[h + "mlp.c_fc.bias"]},
                         "wo": {"kernel": t[h + "mlp.c_proj.weight"],
                                "bias": t[h + "mlp.c_proj.bias"]}},
    }
  embedder: dict[str, Any] = {"position_table": {"table": t["wpe.weight"][:max_len]}}
  if wte is not None:
    embedder["token_embedding"] = {"embedding": wte}
  return {"embedder": embedder, "decoder": decoder}


def read_hf_config(directory: str, what: str) -> dict[str, Any]:
  """The config.json of a GPT-2 folder (model.safetensors + config.json), neither file read
  beyond it. A missing file, a config.json that is not a JSON object or not GPT-2's is a
  one-line ConfigError naming it; nothing is written."""
  from transformer import user_files
  weights, config_path = (os.path.join(directory, f) for f in (WEIGHTS_FILE, CONFIG_FILE))
  for path in (config_path, weights):
    if not os.path.isfile(path):
      raise ConfigError(f"{what}: {path} does not exist; give a folder with a Hugging Face "
                        "GPT-2 model.safetensors and config.json (--mode=export writes one).")
  hf = user_files.read_json_object(config_path, "a Hugging Face config.json",
                                   "write it again with --mode=export or save_pretrained")
  if hf.get("model_type") != "gpt2":
    raise ConfigError(f"{what}: {config_path} has model_type={hf.get('model_type')!r}; only "
                      "GPT-2 (model_type gpt2) is read.")
  return hf


def read_hf_dir(directory: str, what: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """`(tensors, config)` of a GPT-2 folder (`read_hf_config`, then model.safetensors). A
  torn or foreign file is a one-line ConfigError naming it; nothing is written."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file
  from transformer import user_files
  hf = read_hf_config(directory, what)
  weights = os.path.join(directory, WEIGHTS_FILE)
  try:
    tensors = load_file(weights)
  except (SafetensorError, OSError, ValueError) as e:
    raise ConfigError(f"{what}: {weights} cannot be read as safetensors ({user_files.one_line(e)}"
                      "); it is torn or not a safetensors file.") from None
  return tensors, hf


def write_hf_dir(cfg: ModelConfig, params: Any, export_dir: str, id_offset: int = 0,
                 special_ids: dict[str, int] | None = None) -> list[str]:
  """Writes `export_dir`/model.safetensors and config.json of our unboxed DecoderLM `params`
  (without embedding rows 0 .. `id_offset` - 1, see the module docstring), each whole or not
  at all (`transformer.paths`' atomic writers: a crash never leaves a torn file under the final
  name, nor a temporary one); returns the paths written."""
  from safetensors.numpy import save
  tensors = to_gpt2(cfg, params, id_offset)
  settings = json.dumps(hf_config(cfg, id_offset, special_ids), indent=2)
  os.makedirs(export_dir, exist_ok=True)
  written = []
  for name, write in (
      (WEIGHTS_FILE, lambda p: paths.write_bytes(p, save(tensors, metadata={"format": "pt"}),
                                                 mode=0o644)),
      (CONFIG_FILE, lambda p: paths.write_text(p, settings + "\n", mode=0o644))):
    path = os.path.join(export_dir, name)
    try:
      write(path)
    except OSError as e:
      raise RunError(f"--export_dir={export_dir}: cannot write {name} ({e}).") from None
    written.append(path)
  return written
