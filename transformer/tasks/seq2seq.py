"""Sequence to sequence (encoder-decoder): teacher-forced loss, beam-search decoding, exact
matches and corpus BLEU at eval."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from transformer.model.models import shift_right
from transformer.sampling import Sampling
from transformer.tasks import decode
from transformer.tasks.base import TaskBase, TokenVocabulary, random_tokens
from transformer.tasks.losses import cross_entropy_sums


class Seq2SeqTask(TokenVocabulary, TaskBase):
  """Source -> target with an encoder-decoder (teacher forcing, loss on the target tokens).

  Eval: loss in nats per target token, and for greedy and beam-search decoding
  (`model.beam_size`, `model.length_penalty`) exact-match accuracy (a row is right when the
  decoded sequence equals the target up to and including its EOS) and corpus BLEU
  (sacreBLEU, detokenized). Packed eval batches (several pairs per row) only report the
  loss; use `data.packing=pad` for the decoding metrics.
  """

  def __init__(self, config, facts, build_model):
    super().__init__(config, facts, build_model)
    self.bos_id, self.eos_id, self.pad_id = facts.bos_id, facts.eos_id, facts.pad_id

  def example_inputs(self):
    """Random sources `[rows, src_len]` and decoder inputs `[rows, tgt_len]`."""
    rows, d = self.rows_per_process, self.config.data
    tokens = self._synthetic_tokens(rows, d.src_len + d.tgt_len)
    return tokens[:, :d.src_len], tokens[:, d.src_len:]

  def model_inputs(self, batch):
    return self._inputs(batch)

  def _inputs(self, batch) -> tuple:
    """The model's inputs: sources, and the targets shifted right (teacher forcing)."""
    decoder_inputs = shift_right(batch["targets"], self.bos_id, batch.get("targets_segment_ids"))
    return (batch["inputs"], decoder_inputs, batch.get("inputs_positions"),
            batch.get("inputs_segment_ids"), batch.get("targets_positions"),
            batch.get("targets_segment_ids"))

  def train_forward(self, params, batch, rng, sow=False):
    return self._forward(params, self._inputs(batch), rng, sow, batch["targets"],
                         batch["weights"])

  def decode(self, params, inputs, beam_size: int, max_new: int):
    """`[batch, src_len]` -> `[batch, max_new]` greedy (beam_size 1) or beam-search output."""
    return decode.seq2seq_decode(self.model, params, inputs,
                                 Sampling(max_new=max_new, beams=beam_size), bos_id=self.bos_id,
                                 eos_id=self.eos_id, pad_id=self.pad_id,
                                 length_penalty=self.config.model.length_penalty)

  def exact_matches(self, decoded, targets, weights):
    """`[batch]` float: 1 where `decoded` equals the (real) target exactly."""
    tgt_len = targets.shape[1]
    if decoded.shape[1] < tgt_len:
      decoded = jnp.pad(decoded, ((0, 0), (0, tgt_len - decoded.shape[1])),
                        constant_values=self.pad_id)
    real = weights > 0
    same = jnp.all(jnp.where(real, decoded[:, :tgt_len] == targets, True), axis=1)
    # Nothing may follow the target's end (a longer decode is wrong).
    tail_ok = jnp.all(jnp.where(real, True, decoded[:, :tgt_len] == self.pad_id), axis=1)
    tail_ok &= jnp.all(decoded[:, tgt_len:] == self.pad_id, axis=1)
    return (same & tail_ok).astype(jnp.float32)

  def eval_sums(self, params, batch):
    loss_sum, tokens = cross_entropy_sums(self.apply(params, *self._inputs(batch)),
                                          batch["targets"], batch["weights"])
    return {"loss_sum": loss_sum, "tokens": tokens}

  def summarize(self, sums):
    tokens = float(sums["tokens"])
    return {"loss": float(sums["loss_sum"]) / max(tokens, 1.0), "tokens": tokens}

  def eval_outputs(self, params, batch):
    """Greedy and beam-search decodings `[batch, max_new]` of the batch's sources, with its
    targets and weights, for the host-side metrics (`summarize_outputs`). Packed batches
    (several pairs per row) give none: one decode per row would mix pairs."""
    if "inputs_segment_ids" in batch:
      return {}
    max_new = self.config.model.max_decode_len or batch["targets"].shape[1]
    return {"greedy": self.decode(params, batch["inputs"], 1, max_new),
            "beam": self.decode(params, batch["inputs"], self.config.model.beam_size, max_new),
            "targets": batch["targets"], "weights": batch["weights"]}

  def summarize_outputs(self, outputs: list[dict]) -> dict:
    """Exact match and corpus BLEU (sacreBLEU on detokenized text) of greedy and beam search
    over all eval rows; rows without target weight (padding, filler batches) are left out."""
    outputs = [o for o in outputs if o]
    if not outputs:
      return {}
    cat = {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in outputs[0]}
    real = np.any(cat["weights"] > 0, axis=1)
    cat = {k: v[real] for k, v in cat.items()}
    tok = self.facts.tokenizer
    references = [tok.decode(decode.until_eos(row, self.eos_id, drop_id=0))
                  for row in cat["targets"]]
    out = {"examples": float(real.sum())}
    for name in ("greedy", "beam"):
      matches = self.exact_matches(jnp.asarray(cat[name]), jnp.asarray(cat["targets"]),
                                   jnp.asarray(cat["weights"]))
      out[f"{name}_exact_match"] = float(np.mean(np.asarray(matches))) if len(matches) else 0.0
      hypotheses = [tok.decode(decode.until_eos(row, self.eos_id, drop_id=0)) for row in cat[name]]
      score, signature = corpus_bleu(hypotheses, references)
      out[f"{name}_bleu"] = score
    out["bleu_signature"] = signature
    return out

  def random_batch(self, rows, rng):
    """`inputs` `[rows, src_len]`; `targets`, `weights` `[rows, tgt_len]`."""
    d = self.config.data
    return {"inputs": random_tokens(self.facts, rows, d.src_len, rng),
            "targets": random_tokens(self.facts, rows, d.tgt_len, rng),
            "weights": np.ones((rows, d.tgt_len), np.float32)}


def corpus_bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
  """sacreBLEU's corpus BLEU (13a tokenization, mixed case, exp smoothing) of detokenized
  strings against one reference each, and its signature."""
  import sacrebleu
  bleu = sacrebleu.metrics.BLEU()
  score = bleu.corpus_score(hypotheses, [references])
  return float(score.score), str(bleu.get_signature())
