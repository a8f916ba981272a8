"""An independent NumPy (float64) implementation of the textbook Transformer equations.

Written from the equations, not from the Flax code: per-head projections Q = X W_q, K = X W_k,
V = X W_v; A = softmax(Q K^T / sqrt(d_k)); heads concatenated and projected by W_O; the
position-wise FFN; LayerNorm(z) = gamma (z - mu) / sqrt(sigma^2 + eps) + beta; and the
post-norm ("Add & Norm") and pre-norm residual arrangements.
"""

import numpy as np


def layer_norm(z, gamma, beta=None, eps=1e-6):
  mu = z.mean(-1, keepdims=True)
  sigma2 = ((z - mu) ** 2).mean(-1, keepdims=True)
  out = gamma * (z - mu) / np.sqrt(sigma2 + eps)
  return out if beta is None else out + beta


def rms_norm(z, gamma, eps=1e-6):
  return gamma * z / np.sqrt((z ** 2).mean(-1, keepdims=True) + eps)


def softmax(e):
  e = e - e.max(-1, keepdims=True)
  p = np.exp(e)
  return p / p.sum(-1, keepdims=True)


def relu(x):
  return np.maximum(x, 0.0)


def gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def multi_head_attention(xq, xkv, p, mask=None):
  """One sequence. xq: [t, d], xkv: [s, d]; p holds query/key/value/out kernels and biases
  with Flax's shapes ([d, heads, d_k], [heads, d_k], [heads, d_k, d], [d]); mask: [t, s]."""
  heads = p["query"]["kernel"].shape[1]
  outputs = []
  for h in range(heads):
    q = xq @ p["query"]["kernel"][:, h, :] + p["query"]["bias"][h]
    k = xkv @ p["key"]["kernel"][:, h, :] + p["key"]["bias"][h]
    v = xkv @ p["value"]["kernel"][:, h, :] + p["value"]["bias"][h]
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
      scores = np.where(mask, scores, -np.inf)
    outputs.append(softmax(scores) @ v)
  concat = np.concatenate(outputs, axis=-1)  # [t, heads * d_k]
  w_o = p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
  return concat @ w_o + p["out"]["bias"]


def feed_forward(x, p, activation=relu):
  return activation(x @ p["wi"]["kernel"] + p["wi"]["bias"]) @ p["wo"]["kernel"] + p["wo"]["bias"]


def block(x, p, placement, mask=None, activation=relu, eps=1e-6):
  """A self-attention + FFN block. post: u = LN(x + MHA(x)), z = LN(u + FFN(u));
  pre: u = x + MHA(LN(x)), z = u + FFN(LN(u))."""
  ln1 = lambda z: layer_norm(z, p["self_attention_norm"]["scale"],
                             p["self_attention_norm"]["bias"], eps)
  ln2 = lambda z: layer_norm(z, p["feed_forward_norm"]["scale"],
                             p["feed_forward_norm"]["bias"], eps)
  attn = lambda z: multi_head_attention(z, z, p["self_attention"], mask)
  ffn = lambda z: feed_forward(z, p["feed_forward"], activation)
  if placement == "post":
    u = ln1(x + attn(x))
    return ln2(u + ffn(u))
  if placement == "pre":
    u = x + attn(ln1(x))
    return u + ffn(ln2(u))
  raise ValueError(placement)
