"""`--mode=sample`: continuing a prompt with a trained LM checkpoint."""

import json
import os

import numpy as np
import pytest

from tests.test_train import _tiny_config
from transformer.config import ConfigError
from transformer.data.tokenizers import ByteTokenizer
from transformer.evaluation.sample import sample_from_workdir
from transformer import kinds
from transformer.data.facts import DataFacts
from transformer.tasks import load_params
from transformer.train.loop import train_and_evaluate


def test_sample_continues_the_prompt_with_the_checkpoint(tiny_corpus, tmp_path):
  cfg = _tiny_config(tiny_corpus, num_steps=4, log_every=2, eval_every=4)
  workdir = str(tmp_path / "lm")
  train_and_evaluate(cfg, workdir)

  greedy = sample_from_workdir(workdir, "def ", max_new_tokens=6, temperature=0.0)
  # Greedy re-derived from the full forward pass of the restored model, token by token.
  task = kinds.build_task(cfg, DataFacts.of_tokenizer(ByteTokenizer()))  # no data needed
  params, _ = load_params(workdir)
  tok = ByteTokenizer()
  ids = [tok.eos_id] + tok.encode("def ")  # concat packing: documents follow an EOS
  for _ in range(6):
    logits = task.model.apply({"params": params}, np.asarray([ids], np.int32))
    nxt = int(np.argmax(logits[0, -1]))
    if nxt == tok.eos_id:
      break
    ids.append(nxt)
  assert greedy == [tok.decode(ids[5:])]

  sampled = sample_from_workdir(workdir, "def ", max_new_tokens=6, temperature=1.0, top_k=5,
                                num_samples=3, seed=1)
  assert len(sampled) == 3 and all(isinstance(s, str) for s in sampled)
  with open(os.path.join(workdir, "samples.txt")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows if "step" in r] == [4, 4, 4]  # the run's eval samples
  rows = [r for r in rows if "step" not in r]  # those of --mode=sample
  assert len(rows) == 4 and rows[0]["prompt"] == "def " and rows[-1]["top_k"] == 5


def test_sample_refuses_a_workdir_without_a_run(tmp_path):
  with pytest.raises(ConfigError, match="config.json"):
    sample_from_workdir(str(tmp_path), "x")
