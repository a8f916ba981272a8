"""Encoder-decoder runs: corpus BLEU in the eval (synthetic and wmt14 under mock_data), the
eval and sample modes on their workdirs."""

import math
import os
from collections import Counter

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from configs import seq2seq_base
from transformer import kinds
from transformer.config import from_config_dict
from transformer.data import catalog
from transformer.data.facts import DataFacts
from transformer.data.tokenizers import ByteTokenizer
from transformer.evaluation.evaluate import evaluate_workdir
from transformer.train.eval_loop import evaluate, outputs_step
from transformer.evaluation.sample import sample_from_workdir
from transformer.tasks.seq2seq import Seq2SeqTask
from transformer.weights.init_from import load_params
from transformer.train import optim
from transformer.train.loop import train_and_evaluate
from transformer.train.parallel import build_parallel
from transformer.sampling import Sampling


def _task_without_data():
  task = object.__new__(Seq2SeqTask)
  tok = ByteTokenizer()
  task.facts = DataFacts.of_tokenizer(tok)
  task.bos_id, task.eos_id, task.pad_id = tok.bos_id, tok.eos_id, tok.pad_id
  return task, tok


def _rows(tok, texts, length=24):
  out = np.zeros((len(texts), length), np.int32)
  for i, t in enumerate(texts):
    ids = tok.encode(t) + [tok.eos_id]
    out[i, :len(ids)] = ids
  return out


def test_bleu_and_exact_match_of_decoded_rows():
  task, tok = _task_without_data()
  targets = _rows(tok, ["a b c d e x g", "p q r s t"])
  weights = (targets != 0).astype(np.float32)
  greedy = targets.copy()  # perfect
  beam = _rows(tok, ["a b c d e f g", "p q r s t"])
  filler = {"greedy": np.zeros_like(targets), "beam": np.zeros_like(targets),
            "targets": np.zeros_like(targets), "weights": np.zeros_like(weights)}
  out = task.summarize_outputs([{"greedy": greedy, "beam": beam, "targets": targets,
                                 "weights": weights}, filler, {}])
  assert out["examples"] == 2.0
  assert out["greedy_exact_match"] == 1.0 and out["beam_exact_match"] == 0.5
  assert out["greedy_bleu"] == pytest.approx(100.0)
  # Papineni et al.'s corpus BLEU: n-gram matches and counts summed over the rows, then the
  # geometric mean of the four precisions (no brevity penalty: equal lengths).
  counts = []
  for n in range(1, 5):
    match = total = 0
    for hyp, ref in (("a b c d e f g", "a b c d e x g"), ("p q r s t", "p q r s t")):
      hn = Counter(tuple(hyp.split()[i:i + n]) for i in range(len(hyp.split()) - n + 1))
      rn = Counter(tuple(ref.split()[i:i + n]) for i in range(len(ref.split()) - n + 1))
      match += sum(min(c, rn[g]) for g, c in hn.items())
      total += sum(hn.values())
    counts.append(match / total)
  want = 100 * math.exp(sum(math.log(p) for p in counts) / 4)
  assert out["beam_bleu"] == pytest.approx(want, rel=1e-6)
  assert out["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


@pytest.fixture(scope="module")
def s2s_run(tmp_path_factory):
  """configs/seq2seq_base.py:smoke (the paper's recipe, tiny, on the synthetic reverse task)."""
  root = tmp_path_factory.mktemp("s2s")
  c = seq2seq_base.get_config("smoke")
  with c.unlocked():
    c.data.data_dir = str(root / "tfds")
    c.model.beam_size = 2
    c.train.batch_size = 128  # the 1000-pair splits in 8 eval batches
  cfg = from_config_dict(c)
  workdir = str(root / "run")
  return cfg, workdir, train_and_evaluate(cfg, workdir)


@pytest.mark.slow  # ~90 s of training and decoding on a shared 2-core CPU
def test_seq2seq_run_reports_bleu_and_evaluates_and_samples(s2s_run):
  cfg, workdir, final = s2s_run
  for k in ("greedy_bleu", "beam_bleu", "greedy_exact_match", "beam_exact_match"):
    assert 0.0 <= final[k] <= 100.0, k
  assert "tok:13a" in final["bleu_signature"]

  test = evaluate_workdir(workdir, split="test", log=lambda m: None)
  assert test["split"] == "test" and "greedy_bleu" in test
  assert os.path.exists(os.path.join(workdir, "eval", "test-10.json"))

  # Greedy sampling == argmax of the full (teacher-forced) forward pass, token by token.
  model = kinds.build_model(
      from_config_dict(__import__("json").load(open(os.path.join(workdir, "config.json")))).model)
  params, _, _ = load_params(workdir)
  tok = ByteTokenizer()
  src = _rows(tok, ["31415"], cfg.data.src_len)
  out = [tok.bos_id]
  for _ in range(8):
    logits = model.apply({"params": params}, src, np.asarray([out], np.int32))
    nxt = int(np.argmax(logits[0, -1]))
    if nxt == tok.eos_id:
      break
    out.append(nxt)
  greedy = sample_from_workdir(workdir, "31415", Sampling(max_new=8))
  assert greedy == [tok.decode(out[1:])]
  beams = sample_from_workdir(workdir, "31415", Sampling(max_new=8, beams=2))
  sampled = sample_from_workdir(workdir, "31415", Sampling(max_new=8, temperature=1.0),
                                num_samples=2, seed=3)
  assert len(beams) == 1 and len(sampled) == 2


def test_wmt14_de_en_eval_reports_bleu_under_mock_data(tmp_path, monkeypatch):
  """The periodic / final eval of a wmt14 run (mock_data cannot checkpoint its input, so the
  eval runs on freshly initialized parameters, outside a full training run)."""
  monkeypatch.setattr(catalog, "offline_reason", lambda: None)  # mock_data: no download
  c = seq2seq_base.get_config("smoke")
  with c.unlocked():
    c.data.name = "wmt14_translate/de-en"
    c.data.data_dir = str(tmp_path / "tfds")
    c.data.src_len = c.data.tgt_len = 16
    c.data.shuffle_buffer = 8
    c.model.beam_size = 2
  cfg = from_config_dict(c)
  with tfds.testing.mock_data(num_examples=16):
    data, task = kinds.build_data_and_task(cfg, str(tmp_path / "run"))
    par = build_parallel(task.config, task, optim.build_optimizer(cfg.optim, 10))
    state = par.init_state(jax.random.PRNGKey(0))
    metrics = evaluate(task, data, par.eval_step, state, 2, outputs_step(task, par))
  assert metrics["examples"] == 16.0  # 2 batches of 8 pairs
  assert 0.0 <= metrics["greedy_bleu"] <= 100.0 and 0.0 <= metrics["beam_bleu"] <= 100.0
  assert "nrefs:1" in metrics["bleu_signature"] and math.isfinite(metrics["loss"])
