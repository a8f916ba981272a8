"""Count-model baselines of a language model's eval split, recorded when a run starts.

A run that ends at the unigram or bigram level has learned token frequencies, or which token
follows which, and nothing a Transformer is for. The studies judge a claim about optimisation
only on runs that end clearly below these levels, so every decoder-LM run records them in
`<workdir>/baselines.json` at its first start (reports read that file; they never rebuild the
data pipeline):

  {"split": "validation", "scored_tokens": N,
   "unigram_nats": H(y), "bigram_nats": H(y | x), "definition": "...",
   "train_tokens": num_steps * batch_size * seq_len, "params": P, "tokens_per_param": T / P}

Both entropies are *plug-in* estimates on the eval split itself, in nats per scored token: `y`
is a scored target (weight > 0) and `x` the input token at the same position, i.e. the token
before `y` (the row's first input is BOS or the previous row's last token). They are the
cross-entropies of the unigram and bigram count models *fitted on the very tokens they score*,
so no count model of that order, fitted on the training split, scores lower in expectation: a
run below them has learned more than counts of that order.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Optional

import numpy as np

from transformer import packed_runs, paths, user_files

FILE = "baselines.json"
DEFINITION = ("plug-in entropies (nats/token) of the eval split's scored targets y: unigram "
              "H(y), bigram H(y | x) with x the input token at y's position (the token before "
              "it); count models fitted on the tokens they score")


def plug_in_entropies(batches: Iterable[Mapping[str, np.ndarray]]) -> tuple[float, float, int]:
  """(unigram H(y), bigram H(y | x), scored tokens) of `batches`' scored positions.

  Args:
    batches: dicts with `inputs`, `targets` and `weights`, each `[batch, length]`; a position
      counts when its weight is > 0.
  Returns:
    The two entropies in nats per scored token, and the number of scored tokens.
  """
  pairs = []
  for batch in batches:
    scored = np.asarray(batch["weights"]) > 0
    x = np.asarray(batch["inputs"], np.int64)[scored]
    y = np.asarray(batch["targets"], np.int64)[scored]
    pairs.append((x << 32) | y)  # one int64 code per (previous, next) pair: any vocabulary
  if not pairs:
    raise ValueError("the eval split has no scored tokens")
  codes = np.concatenate(pairs)
  n = codes.size
  _, pair_counts = np.unique(codes, return_counts=True)
  targets, target_counts = np.unique(codes & 0xFFFFFFFF, return_counts=True)
  contexts, context_counts = np.unique(codes >> 32, return_counts=True)
  del targets, contexts

  def entropy_sum(counts: np.ndarray) -> float:  # sum c log c
    c = counts.astype(np.float64)
    return float((c * np.log(c)).sum())

  unigram = np.log(n) - entropy_sum(target_counts) / n
  # H(y | x) = H(x, y) - H(x) = -(1/n) [sum c(x,y) log c(x,y) - sum c(x) log c(x)]
  bigram = (entropy_sum(context_counts) - entropy_sum(pair_counts)) / n
  return float(unigram), float(bigram), int(n)


def record(workdir: str, data, split: str, *, train_tokens: int, params: int) -> Optional[dict]:
  """Writes `<workdir>/baselines.json` from `data.eval_batches()` (the whole split) unless it
  is already there (a resumed run keeps its first start's record). Returns the record, or None
  when the workdir already held a readable one."""
  path = paths.join(workdir, FILE)
  if paths.exists(path):
    try:
      return None if read(workdir) is not None else _write(path, data, split, train_tokens,
                                                             params)
    except user_files.UserFileError:  # torn by a crash while written: measure it again
      pass
  return _write(path, data, split, train_tokens, params)


def _write(path: str, data, split: str, train_tokens: int, params: int) -> dict:
  unigram, bigram, scored = plug_in_entropies(data.eval_batches())
  payload = {"split": split, "scored_tokens": scored, "unigram_nats": unigram,
             "bigram_nats": bigram, "definition": DEFINITION, "train_tokens": int(train_tokens),
             "params": int(params), "tokens_per_param": train_tokens / params}
  text = json.dumps(payload, indent=1) + "\n"
  paths.write_text(path, text)  # a crash leaves the old file or none, never half of one
  return payload


def read(workdir: str) -> Optional[dict]:
  """The run's recorded baselines; None when it recorded none (a run from before this file,
  or not a decoder LM). A torn or malformed file is a one-line `UserFileError`."""
  path, text = paths.join(workdir, FILE), None
  if not paths.exists(path):
    text = packed_runs.text(workdir, FILE)  # a run of a packed study
    if text is None:
      return None
  record_ = user_files.read_json_object(
      path, "the run's baselines record",
      "Delete it: the next start of the run measures it again.", text=text)
  for key in ("unigram_nats", "bigram_nats", "train_tokens", "params"):
    if not isinstance(record_.get(key), (int, float)):
      raise user_files.UserFileError(
          f"{path}: the run's baselines record has no number '{key}'; delete the file: the "
          "next start of the run measures it again.")
  return record_
