"""GPT-2's forward pass in float64 NumPy, written from the GPT-2 definition (Radford et al.,
2019; the layout and equations of Hugging Face's `GPT2LMHeadModel`), reading a
`model.safetensors` + `config.json` folder. It shares no code with transformer/: an
independent reference for tests/test_hf_gpt2.py.
"""

import json
import os

import numpy as np
from safetensors.numpy import load_file


def gelu_new(x):
  """GPT-2's GELU (the tanh approximation): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, weight, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def gpt2_logits(folder: str, ids: np.ndarray) -> np.ndarray:
  """`ids: [batch, length]` int -> float64 logits `[batch, length, vocab_size]`."""
  with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
    hf = json.load(f)
  assert hf["activation_function"] == "gelu_new" and hf["tie_word_embeddings"]
  t = {k.removeprefix("transformer."): v.astype(np.float64)
       for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
  eps, n_head = hf["layer_norm_epsilon"], hf["n_head"]
  b, length = ids.shape
  h = t["wte.weight"][ids] + t["wpe.weight"][np.arange(length)][None]
  d = h.shape[-1]
  hd = d // n_head
  causal = np.tril(np.ones((length, length), bool))
  for i in range(hf["n_layer"]):
    p = f"h.{i}."
    a = layer_norm(h, t[p + "ln_1.weight"], t[p + "ln_1.bias"], eps)
    qkv = a @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]  # Conv1D: x W + b
    q, k, v = (z.reshape(b, length, n_head, hd).transpose(0, 2, 1, 3)
               for z in np.split(qkv, 3, axis=-1))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    scores = np.where(causal, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    y = (w @ v).transpose(0, 2, 1, 3).reshape(b, length, d)
    h = h + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
    m = layer_norm(h, t[p + "ln_2.weight"], t[p + "ln_2.bias"], eps)
    m = gelu_new(m @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
    h = h + m @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
  h = layer_norm(h, t["ln_f.weight"], t["ln_f.bias"], eps)
  return h @ t["wte.weight"].T  # tied lm_head
