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
  """Softmax over the last axis; a row that is -inf everywhere (a query that may see no key)
  gives all-zero weights instead of NaN."""
  top = e.max(-1, keepdims=True)
  p = np.exp(e - np.where(np.isfinite(top), top, 0.0))
  total = p.sum(-1, keepdims=True)
  return np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)


def relu(x):
  return np.maximum(x, 0.0)


def gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def swish(x):
  return x / (1.0 + np.exp(-x))


def sinusoidal(num_positions, d_model):
  """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)), written
  as loops over the formula of "Attention Is All You Need", section 3.5."""
  pe = np.zeros((num_positions, d_model))
  for pos in range(num_positions):
    for i in range(d_model // 2):
      angle = pos / 10000.0 ** (2 * i / d_model)
      pe[pos, 2 * i] = np.sin(angle)
      pe[pos, 2 * i + 1] = np.cos(angle)
  return pe


def rope(x, positions, base=10000.0):
  """RoPE as complex rotation (RoFormer eq. 12-13): pair (x_2i, x_2i+1) is the complex number
  x_2i + j x_2i+1, multiplied by exp(j pos theta_i), theta_i = base^(-2i/d). x: [t, d_k]."""
  d = x.shape[-1]
  theta = base ** (-np.arange(0, d, 2) / d)
  z = (x[:, 0::2] + 1j * x[:, 1::2]) * np.exp(1j * np.asarray(positions)[:, None] * theta)
  out = np.empty_like(x)
  out[:, 0::2], out[:, 1::2] = z.real, z.imag
  return out


def _project(x, p, h):
  out = x @ p["kernel"][:, h, :]
  return out + p["bias"][h] if "bias" in p else out


def multi_head_attention(xq, xkv, p, mask=None, positions=None):
  """One sequence. xq: [t, d], xkv: [s, d]; p holds query/key/value/out kernels and biases
  with Flax's shapes ([d, heads, d_k], [heads, d_k], [heads, d_k, d], [d]); mask: [t, s].

  Grouped-query: when key/value have fewer heads, query head h uses key/value head
  h // (heads / kv_heads). `positions` ([t] = [s], self-attention) applies RoPE to q and k."""
  heads = p["query"]["kernel"].shape[1]
  group = heads // p["key"]["kernel"].shape[1]
  outputs = []
  for h in range(heads):
    q = _project(xq, p["query"], h)
    k = _project(xkv, p["key"], h // group)
    v = _project(xkv, p["value"], h // group)
    if positions is not None:
      q, k = rope(q, positions), rope(k, positions)
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
      scores = np.where(mask, scores, -np.inf)
    outputs.append(softmax(scores) @ v)
  concat = np.concatenate(outputs, axis=-1)  # [t, heads * d_k]
  w_o = p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
  out = concat @ w_o
  return out + p["out"]["bias"] if "bias" in p["out"] else out


def feed_forward(x, p, activation=relu):
  return activation(x @ p["wi"]["kernel"] + p["wi"]["bias"]) @ p["wo"]["kernel"] + p["wo"]["bias"]


def swiglu_feed_forward(x, p):
  """FFN_SwiGLU(x) = (swish(x W + b) * (x V + c)) W_2 + b_2 (Shazeer, 2020)."""
  gate = swish(x @ p["wi"]["kernel"] + p["wi"]["bias"])
  linear = x @ p["wi_linear"]["kernel"] + p["wi_linear"]["bias"]
  return (gate * linear) @ p["wo"]["kernel"] + p["wo"]["bias"]


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


def residual(x, f, norm, placement):
  """post: LN(x + f(x)) ("Add & Norm"); pre: x + f(LN(x))."""
  if placement == "post":
    return norm(x + f(x))
  if placement == "pre":
    return x + f(norm(x))
  raise ValueError(placement)


def _ln(p, eps):
  return lambda z: layer_norm(z, p["scale"], p.get("bias"), eps)


def decoder_block(y, enc, p, placement, self_mask, cross_mask, activation=relu, eps=1e-6):
  """Masked self-attention, cross-attention to the encoder output, FFN; each a residual."""
  y = residual(y, lambda z: multi_head_attention(z, z, p["self_attention"], self_mask),
               _ln(p["self_attention_norm"], eps), placement)
  y = residual(y, lambda z: multi_head_attention(z, enc, p["cross_attention"], cross_mask),
               _ln(p["cross_attention_norm"], eps), placement)
  return residual(y, lambda z: feed_forward(z, p["feed_forward"], activation),
                  _ln(p["feed_forward_norm"], eps), placement)


def encoder_decoder(src, tgt_in, p, placement, num_layers, eps=1e-6):
  """The whole Transformer of Vaswani et al. for one example, with ReLU FFNs, sinusoidal
  positions, embeddings scaled by sqrt(d_model) and shared by source, target and the (tied)
  output layer. src: [s] ints (0 = padding), tgt_in: [t] ints (shifted-right targets).
  p: the Flax parameter tree as float64 arrays. Returns logits [t, vocab]."""
  table = p["embedder"]["token_embedding"]["embedding"]
  d = table.shape[1]
  pe = sinusoidal(max(len(src), len(tgt_in)), d)
  x = table[src] * np.sqrt(d) + pe[:len(src)]
  real = src != 0
  enc_mask = real[:, None] & real[None, :]
  for i in range(num_layers):
    x = block(x, p["encoder"]["stack"][f"layer_{i}"], placement, enc_mask, relu, eps)
  if placement == "pre":
    x = _ln(p["encoder"]["stack"]["final_norm"], eps)(x)
  y = table[tgt_in] * np.sqrt(d) + pe[:len(tgt_in)]
  causal = np.tril(np.ones((len(tgt_in), len(tgt_in)), bool))
  cross = np.broadcast_to(real[None, :], (len(tgt_in), len(src)))
  for i in range(num_layers):
    y = decoder_block(y, x, p["decoder"][f"layer_{i}"], placement, causal, cross, relu, eps)
  if placement == "pre":
    y = _ln(p["decoder"]["final_norm"], eps)(y)
  return y @ table.T


# ------------------------------------------------------------------ norm-placement study (issue 9)
# Written from the papers' formulas (see transformer/model/block.py for the sources).


def dyt(z, alpha, gamma, beta=None):
  """DyT(z) = gamma * tanh(alpha * z) + beta (Zhu et al., 2025)."""
  out = gamma * np.tanh(alpha * z)
  return out if beta is None else out + beta


def make_norm(kind, p, eps=1e-6):
  """The norm of `kind` with parameters p (a dict: scale, bias, alpha) as a function."""
  if kind == "layernorm":
    return lambda z: layer_norm(z, p["scale"], p.get("bias"), eps)
  if kind == "rmsnorm":
    return lambda z: rms_norm(z, p["scale"], eps)
  if kind == "dyt":
    return lambda z: dyt(z, p["alpha"], p["scale"], p.get("bias"))
  if kind == "none":
    return lambda z: z
  raise ValueError(kind)


def deepnorm_alpha_beta(arch, n_enc, n_dec):
  """DeepNet (Wang et al., 2022) Table 1, written out: (alpha, beta)."""
  if arch == "encoder_only":
    return (2 * n_enc) ** (1 / 4), (8 * n_enc) ** (-1 / 4)
  if arch == "decoder_only":
    return (2 * n_dec) ** (1 / 4), (8 * n_dec) ** (-1 / 4)
  if arch == "encoder":
    return 0.81 * (n_enc ** 4 * n_dec) ** (1 / 16), 0.87 * (n_enc ** 4 * n_dec) ** (-1 / 16)
  if arch == "decoder":
    return (3 * n_dec) ** (1 / 4), (12 * n_dec) ** (-1 / 4)
  raise ValueError(arch)


def general_residual(x, f, p, name, placement, kind, eps=1e-6, alpha=1.0):
  """One residual sublayer for every placement; p holds `<name>_norm`, `<name>_out_norm`,
  `<name>_omega`.
    post: N(x + f(x)); pre: x + f(N(x)); peri: x + N_out(f(N_in(x)));
    deepnorm: N(alpha x + f(x)); admin: N(omega * x + f(x));
    hybrid: x + f(x) for attention (QKV-Norm inside f), N(x + f(x)) for the feed-forward.
  Returns (output, f's output)."""
  n = make_norm(kind, p.get(f"{name}_norm", {}), eps)
  if placement == "post":
    y = f(x)
    return n(x + y), y
  if placement == "pre":
    y = f(n(x))
    return x + y, y
  if placement == "peri":
    y = f(n(x))
    return x + make_norm(kind, p[f"{name}_out_norm"], eps)(y), y
  if placement == "deepnorm":
    y = f(x)
    return n(alpha * x + y), y
  if placement == "admin":
    y = f(x)
    return n(p[f"{name}_omega"] * x + y), y
  if placement == "hybrid":  # HybridNorm: attention bare (its Q, K, V normed inside), FFN post
    y = f(x)
    return (n(x + y), y) if name == "feed_forward" else (x + y, y)
  raise ValueError(placement)


def qkv_normed_attention(xq, xkv, p, kind, mask=None, eps=1e-6):
  """HybridNorm's QKV-Norm (Zhuo et al., 2025): multi-head attention whose queries, keys and
  values are each normalized over all heads together ([length, heads * head_dim]) right after
  their projections, then split into heads."""
  heads, kv_heads = p["query"]["kernel"].shape[1], p["key"]["kernel"].shape[1]
  group = heads // kv_heads
  full = lambda x, w, n: make_norm(kind, p[n], eps)(
      np.concatenate([_project(x, w, h) for h in range(w["kernel"].shape[1])], -1))
  q, k, v = (full(xq, p["query"], "query_norm"), full(xkv, p["key"], "key_norm"),
             full(xkv, p["value"], "value_norm"))
  d = q.shape[-1] // heads
  outputs = []
  for h in range(heads):
    g = h // group
    scores = q[:, h * d:(h + 1) * d] @ k[:, g * d:(g + 1) * d].T / np.sqrt(d)
    if mask is not None:
      scores = np.where(mask, scores, -np.inf)
    outputs.append(softmax(scores) @ v[:, g * d:(g + 1) * d])
  out = np.concatenate(outputs, -1) @ p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
  return out + p["out"]["bias"]


def qk_normed_attention(xq, xkv, p, kind, mask=None, eps=1e-6):
  """multi_head_attention with the norm of `kind` applied to every head's query and key
  (over head_dim, one set of parameters for all heads) before the dot product."""
  heads = p["query"]["kernel"].shape[1]
  group = heads // p["key"]["kernel"].shape[1]
  nq, nk = make_norm(kind, p["query_norm"], eps), make_norm(kind, p["key_norm"], eps)
  outputs = []
  for h in range(heads):
    q = nq(_project(xq, p["query"], h))
    k = nk(_project(xkv, p["key"], h // group))
    v = _project(xkv, p["value"], h // group)
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
      scores = np.where(mask, scores, -np.inf)
    outputs.append(softmax(scores) @ v)
  out = np.concatenate(outputs, -1) @ p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
  return out + p["out"]["bias"]


def general_block(x, p, placement, kind, mask=None, activation=relu, eps=1e-6, alpha=1.0,
                  qk_norm=False):
  """Self-attention + FFN block for any placement. Returns (output, [attention branch output,
  FFN branch output])."""
  if placement == "hybrid":
    attn = lambda z: qkv_normed_attention(z, z, p["self_attention"], kind, mask, eps)
  elif qk_norm:
    attn = lambda z: qk_normed_attention(z, z, p["self_attention"], kind, mask, eps)
  else:
    attn = lambda z: multi_head_attention(z, z, p["self_attention"], mask)
  u, a = general_residual(x, attn, p, "self_attention", placement, kind, eps, alpha)
  z, b = general_residual(u, lambda h: feed_forward(h, p["feed_forward"], activation), p,
                          "feed_forward", placement, kind, eps, alpha)
  return z, [a, b]


def mix_layer_placements(num_layers, post_fraction):
  """Mix-LN (Li et al., 2024): the first floor(fraction * L) layers post-norm, the rest pre."""
  k = int(np.floor(post_fraction * num_layers))
  return ["post"] * k + ["pre"] * (num_layers - k)


def admin_omegas(x0, branch_outputs):
  """Admin (Liu et al., 2020): omega_i = sqrt(Var[x0] + sum_{j<i} Var[f_j]) for the stack's
  sublayers in order (the embeddings x0 count as the zeroth branch)."""
  total = np.var(x0)
  out = []
  for y in branch_outputs:
    out.append(np.sqrt(total))
    total += np.var(y)
  return out


def z_loss_cross_entropy(logits, targets, z_coef):
  """Per-token -log p(target) + z_coef * log(Z)^2, Z = sum exp(logits) (PaLM)."""
  top = logits.max(-1, keepdims=True)
  log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
  nll = log_z - np.take_along_axis(logits, targets[..., None], -1)[..., 0]
  return nll + z_coef * log_z ** 2
