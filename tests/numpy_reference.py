"""An independent NumPy (float64) implementation of the textbook Transformer equations.

Written from the equations, not from the Flax code: per-head projections Q = X W_q, K = X W_k,
V = X W_v; A = softmax(Q K^T / sqrt(d_k)); heads concatenated and projected by W_O; the
position-wise FFN; LayerNorm(z) = gamma (z - mu) / sqrt(sigma^2 + eps) + beta; and the
post-norm ("Add & Norm") and pre-norm residual arrangements. The norm-placement section below
transcribes each placement, DyT and qk-norm from its own paper, the equation quoted beside it.
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
  """RoPE (RoFormer §3.2): the 2-D case is a complex rotation, f(x_m, m) = (W x_m) e^{i m θ};
  the general form rotates each pair by the block-diagonal R^d_{Θ,m}, Θ = {θ_i = 10000^(-2(i-1)/d),
  i = 1..d/2}. So pair (x_2i, x_2i+1) (0-based) is the complex number x_2i + j x_2i+1, multiplied
  by exp(j pos theta_i), theta_i = base^(-2i/d). x: [t, d_k]. [R and Θ checked against a
  third-party transcription; the paper's equation numbers (12-15) not read here.]"""
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
# Each placement, norm and attention variant below is transcribed from its paper's own equations
# (quoted beside the code, with the paper's section, equation, figure or table), never from
# transformer/model/block.py. `p` is one block's Flax parameter tree as float64 arrays:
# `<sublayer>_norm`, `<sublayer>_out_norm`, `<sublayer>_omega`, `self_attention`, `feed_forward`.
#
# What each quotation was checked against (issue 68 audit, 2026-12-02). The stored copies of the
# arXiv pages could be read only from their beginning (title, abstract, introduction, the first
# figure captions), so an equation in a paper's body was checked against the official code and
# the paper's own figure captions where they exist; what no source read here confirms is marked
# [not read here]. Tags: [paper] read in the paper's text; [code] read in the official code;
# [2nd] a third-party transcription of the paper.
#   post      Vaswani et al. 2017, §3.1 "LayerNorm(x + Sublayer(x))" [2nd: several transcriptions]
#   pre       Xiong et al. 2020, Table 1 and its "Final LayerNorm" [papers.md: read in the paper
#             by an earlier session; not re-read here]
#   peri      Kim et al. 2025, y_l = x_l + Norm(Module(Norm(x_l))) [2nd: a transcription that
#             numbers it eq. (3) after Post-LN (1) and Pre-LN (2)]; abstract "places normalization
#             layer peripherally around sublayers" [paper]; no official code found
#   deepnorm  Wang et al. 2022, Fig. 2 pseudocode and constants table [code: torchscale divides
#             fc1, fc2, v_proj, out_proj by (8M)^(1/4) decoder-only, (12M)^(1/4) enc-dec decoder]
#   admin     Liu et al. 2020, x_i = f_LN(b_i), b_i = x_{i-1} ω_i + f_i(x_{i-1}) [code:
#             Transformer-Clinic `transformer_layer.py`; see `admin_omegas` for where it differs]
#   mix       Li et al. 2024, abstract "Mix-LN applies Post-LN to the earlier layers and Pre-LN to
#             the deeper layers" [paper, arXiv v2]; the count [code: pixeli99/MixLN `POST_NUM`,
#             3 of 12 layers (71M) and 6 of 24 (1B) in its README: α = 0.25]
#   hybrid    Zhuo et al. 2025, Fig. 2(d) of arXiv v1: "Figure 2: Illustrations of different
#             transformer layer structures: (a) Pos..." [paper, the stored page cut there; the
#             full caption, "... (d) HybridNorm architecture", is the official README's; a review
#             of a later version calls it Figure 1] [code: BryceZhuo/HybridNorm
#             dense_model/olmo/model.py with configs/exps/1.2B-dense-HybriedNorm.yaml]
#   dyt       Zhu et al. 2025 [code: jiachenzhu/DyT dynamic_tanh.py; README "DyT(x) = tanh(αx),
#             where α is a learnable scaler"]
#   qk-norm   Dehghani et al. 2023, §2 "QK Normalization" paragraph [2nd: paper reviews quote
#             the paragraph under "Model Architecture"]
#   rope      Su et al. (RoFormer), §3.2 [2nd: the block-diagonal R_{Θ,m} with θ_i =
#             10000^(-2(i-1)/d), i = 1..d/2, pairing dimensions (2i-1, 2i)]


def dyt(z, alpha, gamma, beta=None):
  """Zhu et al. 2025, "Transformers without Normalization", the Dynamic Tanh section:
    DyT(x) = γ * tanh(αx) + β,  α a learnable scalar (α₀ = 0.5 by default), γ, β per channel.
  As the official code computes it (jiachenzhu/DyT dynamic_tanh.py `DynamicTanh`: `alpha =
  ones(1) * alpha_init_value` (0.5), `weight` ones and `bias` zeros of the channel size; forward
  `tanh(alpha * x) * weight + bias`). [Section and equation numbers not read here.]
  """
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
  """Wang et al. 2022, "DeepNet", Fig. 2 (the table of constants beside DeepNorm's pseudocode;
  N encoder layers, M decoder layers): (alpha, beta). Checked against the official code
  (torchscale: decoder init_scale = (8M)^(1/4), or (12M)^(1/4) in an encoder-decoder, dividing
  fc1, fc2, out_proj, v_proj, i.e. gain β = 1 / init_scale). [Figure number not read here.]"""
  if arch == "encoder_only":  # encoder-only: α = (2N)^(1/4), β = (8N)^(-1/4)
    return (2 * n_enc) ** (1 / 4), (8 * n_enc) ** (-1 / 4)
  if arch == "decoder_only":  # decoder-only: α = (2M)^(1/4), β = (8M)^(-1/4)
    return (2 * n_dec) ** (1 / 4), (8 * n_dec) ** (-1 / 4)
  if arch == "encoder":  # enc-dec, encoder: α = 0.81 (N^4 M)^(1/16), β = 0.87 (N^4 M)^(-1/16)
    return 0.81 * (n_enc ** 4 * n_dec) ** (1 / 16), 0.87 * (n_enc ** 4 * n_dec) ** (-1 / 16)
  if arch == "decoder":  # enc-dec, decoder: α = (3M)^(1/4), β = (12M)^(-1/4)
    return (3 * n_dec) ** (1 / 4), (12 * n_dec) ** (-1 / 4)
  raise ValueError(arch)


def general_residual(x, f, p, name, placement, kind, eps=1e-6, alpha=1.0):
  """One residual sublayer f of a placement that is defined per sublayer. N is the norm of
  `kind` with `p["<name>_norm"]`. Returns (output, f's output)."""
  n = make_norm(kind, p.get(f"{name}_norm", {}), eps)
  if placement == "post":
    # Vaswani et al. 2017, §3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))"
    y = f(x)
    return n(x + y), y
  if placement == "pre":
    # Xiong et al. 2020, Table 1 (Pre-LN): x^{pre,1} = LN(x_l); x^{pre,2} = MultiHeadAtt(
    # x^{pre,1}); x^{pre,3} = x_l + x^{pre,2}; likewise for the FFN: x_{l+1} = x^{pre,3} +
    # FFN(LN(x^{pre,3})); "Final LayerNorm: x_Final = LN(x_{L+1})" (see FINAL_NORM)
    y = f(n(x))
    return x + y, y
  if placement == "peri":
    # Kim et al. 2025, "Peri-LN": y_l = x_l + Norm(Module(Norm(x_l))) (eq. 3 in a third-party
    # transcription), the output Norm's γ learnable; a final Norm (FINAL_NORM); the paper's
    # optional embedding Norm is not built. Sandwich-LN's wiring (Ding et al. 2021).
    y = f(n(x))
    return x + make_norm(kind, p[f"{name}_out_norm"], eps)(y), y
  if placement == "deepnorm":
    # Wang et al. 2022, "DeepNet": x_{l+1} = LN(α x_l + G_l(x_l, θ_l)); Fig. 2 pseudocode:
    # deepnorm(x) = LayerNorm(x * α + f(x)); init gain β on ffn, v_proj, out_proj, 1 on q, k
    y = f(x)
    return n(alpha * x + y), y
  if placement == "admin":
    # Liu et al. 2020, "Admin" (Adaptive Model Initialization): x_i = f_LN(b_i),
    # b_i = x_{i-1} · ω_i + f_i(x_{i-1}), ω_i a learnable per-feature vector (profiled at
    # init, `admin_omegas`); the official code: `x + residual * self.attention_ratio_change`
    y = f(x)
    return n(p[f"{name}_omega"] * x + y), y
  if placement == "hybrid_v0":
    # NOT a paper's block: this project's earlier reading of HybridNorm (kept to reproduce the
    # committed hybrid_norm / depth_lr runs): attention x + f(x) with q, k, v normed over all
    # heads inside f (`qkv_normed_attention_v0`), feed-forward N(x + f(x)), no final norm
    y = f(x)
    return (n(x + y), y) if name == "feed_forward" else (x + y, y)
  raise ValueError(placement)


def _heads(x, w, n_heads):
  """[len, d] -> [heads, len, head_dim]: x W^h (+ b^h) for every head h."""
  return np.stack([_project(x, w, h) for h in range(n_heads)])


def _attend(q, k, v, p, mask):
  """q: [heads, t, d_k], k, v: [kv_heads, s, d_k] -> Concat_h(softmax(q_h k_g^T / sqrt(d_k))
  v_g) W_O + b_O, g = h // (heads / kv_heads)."""
  group = q.shape[0] // k.shape[0]
  outputs = []
  for h in range(q.shape[0]):
    scores = q[h] @ k[h // group].T / np.sqrt(q.shape[-1])
    if mask is not None:
      scores = np.where(mask, scores, -np.inf)
    outputs.append(softmax(scores) @ v[h // group])
  out = np.concatenate(outputs, -1) @ p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
  return out + p["out"]["bias"] if "bias" in p["out"] else out


def qkv_normed_attention(xq, xkv, p, kind, mask=None, eps=1e-6):
  """HybridNorm's QKV-Norm (Zhuo et al. 2025; section and equation numbers not read here):
    attn_QKV(Q, K, V) = softmax(Norm(Q) Norm(K)^T / sqrt(d_k)) Norm(V),
  per head, as the official code builds it (dense_model/olmo/model.py `OLMoBlock.__init__` /
  `attention`: `q_norm`, `k_norm`, `v_norm` each `LayerNormBase.build(config, size=d_model //
  n_heads)`, applied to `[B, n_heads, T, head_dim]`: over one head's features, one set of
  parameters for all heads, before RoPE)."""
  heads, kv_heads = p["query"]["kernel"].shape[1], p["key"]["kernel"].shape[1]
  q = make_norm(kind, p["query_norm"], eps)(_heads(xq, p["query"], heads))
  k = make_norm(kind, p["key_norm"], eps)(_heads(xkv, p["key"], kv_heads))
  v = make_norm(kind, p["value_norm"], eps)(_heads(xkv, p["value"], kv_heads))
  return _attend(q, k, v, p, mask)


def qkv_normed_attention_v0(xq, xkv, p, kind, mask=None, eps=1e-6):
  """NOT the paper's QKV-Norm (placement `hybrid_v0`, this project's earlier reading): queries,
  keys and values each normalized over all heads together ([length, heads * head_dim])."""
  heads, kv_heads = p["query"]["kernel"].shape[1], p["key"]["kernel"].shape[1]
  over_all = lambda a, n: make_norm(kind, p[n], eps)(np.concatenate(list(a), -1)).reshape(
      a.shape[1], a.shape[0], a.shape[2]).transpose(1, 0, 2)
  q = over_all(_heads(xq, p["query"], heads), "query_norm")
  k = over_all(_heads(xkv, p["key"], kv_heads), "key_norm")
  v = over_all(_heads(xkv, p["value"], kv_heads), "value_norm")
  return _attend(q, k, v, p, mask)


def qk_normed_attention(xq, xkv, p, kind, mask=None, eps=1e-6):
  """QK-norm. Dehghani et al. 2023 (ViT-22B), §2 "Model Architecture", paragraph "QK
  Normalization" (the paragraph's place from third-party reviews; the formula not read here):
    softmax[(1/sqrt(d)) LN(X W^Q) (LN(X W^K))^T],
  per head with one set of LN parameters over head_dim shared by all heads, as Wortsman et al.
  2023 (qk-layernorm) apply it; the norm of `kind` stands in for LN."""
  heads, kv_heads = p["query"]["kernel"].shape[1], p["key"]["kernel"].shape[1]
  q = make_norm(kind, p["query_norm"], eps)(_heads(xq, p["query"], heads))
  k = make_norm(kind, p["key_norm"], eps)(_heads(xkv, p["key"], kv_heads))
  return _attend(q, k, _heads(xkv, p["value"], kv_heads), p, mask)


def hybridnorm_block(x, p, kind, mask=None, activation=relu, eps=1e-6):
  """HybridNorm (Zhuo et al. 2025, arXiv 2503.04598), one block, Fig. 2(d) of arXiv v1
  ("Illustrations of different transformer layer structures: ... (d) HybridNorm architecture";
  the repository's assets/norm.png):
    Y^l     = MHA_QKV(X^l) + X^l
    X^{l+1} = FFN(Norm(Y^l)) + Norm(Y^l)
  read line by line in the official code (dense_model/olmo/model.py `OLMoSequentialBlock.forward`
  with configs/exps/1.2B-dense-HybriedNorm.yaml: attn_norm false, so h = x feeds att_proj and
  x = x + att; ffn_norm true with ffn_residual_after_norm true, so x = ff_norm(x); og_x = x;
  x = og_x + ff_out(act(ff_proj(x)))). After the last block: a final Norm (`ln_f`, FINAL_NORM).
  [The section and equation numbers of the two lines above not read here.] Returns (X^{l+1},
  [MHA branch, FFN branch])."""
  attn = qkv_normed_attention(x, x, p["self_attention"], kind, mask, eps)
  y = x + attn
  y_normed = make_norm(kind, p["feed_forward_norm"], eps)(y)
  ffn = feed_forward(y_normed, p["feed_forward"], activation)
  return ffn + y_normed, [attn, ffn]


def general_block(x, p, placement, kind, mask=None, activation=relu, eps=1e-6, alpha=1.0,
                  qk_norm=False):
  """Self-attention + FFN block for any placement. Returns (output, [attention branch output,
  FFN branch output])."""
  if placement == "hybrid":
    return hybridnorm_block(x, p, kind, mask, activation, eps)
  if placement == "hybrid_v0":
    attn = lambda z: qkv_normed_attention_v0(z, z, p["self_attention"], kind, mask, eps)
  elif qk_norm:
    attn = lambda z: qk_normed_attention(z, z, p["self_attention"], kind, mask, eps)
  else:
    attn = lambda z: multi_head_attention(z, z, p["self_attention"], mask)
  u, a = general_residual(x, attn, p, "self_attention", placement, kind, eps, alpha)
  z, b = general_residual(u, lambda h: feed_forward(h, p["feed_forward"], activation), p,
                          "feed_forward", placement, kind, eps, alpha)
  return z, [a, b]


def mix_layer_placements(num_layers, post_fraction):
  """Mix-LN (Li et al. 2024; abstract: "Mix-LN applies Post-LN to the earlier layers and Pre-LN
  to the deeper layers"): the first floor(α L) layers post-norm, the other L - floor(α L)
  pre-norm (α = 0.25; the official code takes the count, `POST_NUM`: 3 of 12 layers, 6 of 24).
  [Section and equation numbers not read here.]"""
  k = int(np.floor(post_fraction * num_layers))
  return ["post"] * k + ["pre"] * (num_layers - k)


# Whether a stack of the placement ends in a final norm, each from its paper: post-norm's last
# sublayer already ends in LN (Vaswani §3.1), as DeepNorm's and Admin's do; Pre-LN adds one
# (Xiong Table 1, "Final LayerNorm"); Peri-LN too (its final norm before the head); Mix-LN's
# pre-norm layers end the stack and keep LLaMA's final norm (the official code's `self.norm`);
# HybridNorm's last block ends in Norm(Y) + FFN(Norm(Y)), and the official model applies `ln_f`;
# DeepNet's post-norm stack has none (torchscale: `layer_norm = None` unless normalize_before).
FINAL_NORM = {"post": False, "pre": True, "peri": True, "deepnorm": False, "admin": False,
              "mix": True, "hybrid": True, "hybrid_v0": False}


def decoder_stack(x, p, placement, kind, mask=None, activation=relu, eps=1e-6, alpha=1.0,
                  post_fraction=0.25):
  """x: [t, d] through `p["layer_0"]`, ... and the final norm FINAL_NORM says (`p["final_norm"]`);
  Mix-LN resolves each layer by `mix_layer_placements`."""
  num_layers = len([k for k in p if k.startswith("layer_")])
  placements = (mix_layer_placements(num_layers, post_fraction) if placement == "mix"
                else [placement] * num_layers)
  for i in range(num_layers):
    x = general_block(x, p[f"layer_{i}"], placements[i], kind, mask, activation, eps, alpha)[0]
  if FINAL_NORM[placement] and (placement != "mix" or "pre" in placements):
    x = make_norm(kind, p["final_norm"], eps)(x)
  return x


def admin_omegas(x0, branch_outputs):
  """Admin (Liu et al. 2020): omega_i = sqrt(sum_{j<i} Var[f_j(x_{j-1})]), the branches in
  execution order, with the embeddings x0 counted as the zeroth branch, so omega_1 = sd(x0).

  The official code (Transformer-Clinic fairseq/fairseq/modules/transformer_layer.py, its
  adaptive-profiling pass) differs at the first sublayer only: it starts from `encoder_ratio =
  1.0` (and `decoder_ratio = 1.0`), so omega_1 = 1, then
  omega_{i+1} = sqrt(Var[x_{i-1} omega_i] + Var[f_i(x_{i-1})]), x_{i-1} the sublayer's input:
  the embeddings for i = 1, a LayerNorm output (variance 1 up to eps) after, which gives this
  function's omega_i for every i >= 2. [The paper's own equation not read here.]"""
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
