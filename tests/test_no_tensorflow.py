"""Training without TensorFlow: a subprocess in which `import tensorflow` and
`import tensorflow_datasets` raise ImportError trains a small LM from a token file,
checkpoints, resumes bitwise, evaluates and samples (tests/no_tensorflow.py blocks them)."""

import json
import os
import subprocess
import sys

import jax
import numpy as np

from tests.test_train import _final_params
from transformer.data import token_file
from transformer.data.tokenizers import ByteTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 8
OVERRIDES = {"data.name": "token_file", "data.seq_len": 32, "data.eval_batches": 2,
             "model.d_model": 32, "model.num_heads": 4, "model.num_layers": 2, "model.d_ff": 64,
             "model.dropout_rate": 0.1, "train.batch_size": 8, "train.num_steps": NUM_STEPS,
             "train.log_every": 1, "train.eval_every": 4, "checkpoint.every_steps": 3,
             "checkpoint.keep": 10}


def _token_dir(tmp_path) -> str:
  """A token file of made-up 'source files', written with NumPy alone."""
  tok = ByteTokenizer()
  words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else"]
  docs = [tok.encode("\n".join(" ".join(words[(i * 7 + j * 3 + k) % 10] for k in range(6))
                               for j in range(30))) for i in range(40)]
  directory = str(tmp_path / "tokens")
  token_file.write_token_file(directory, {"train": docs[4:], "validation": docs[:4]},
                              vocab_size=tok.vocab_size)
  return directory


def _no_tf(*args: str) -> str:
  """Runs tests/no_tensorflow.py ARGS; its output (asserting exit status 0)."""
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "no_tensorflow.py"),
                         *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                        env=dict(os.environ))
  out = proc.stdout + proc.stderr
  assert proc.returncode == 0, out
  assert "NO-TF CHECK FAILED" not in out
  return out


def _flags(workdir: str, token_dir: str) -> list[str]:
  return ["--config=configs/default.py:smoke", f"--workdir={workdir}",
          f"--config.data.source_dir={token_dir}"] + [
              f"--config.{k}={v}" for k, v in OVERRIDES.items()]


def _stop_after(workdir: str, token_dir: str, step: int) -> str:
  """Trains in the blocked subprocess and ends the process after `step`, as a preemption."""
  overrides = dict(OVERRIDES, **{"data.source_dir": token_dir})
  return _no_tf("-c", f"""
from configs.default import get_config
from transformer.config import from_config_dict
from transformer.train.loop import train_and_evaluate
c = get_config("smoke")
with c.unlocked():
  for k, v in {overrides!r}.items():
    section, field = k.split(".")
    c[section][field] = v
train_and_evaluate(from_config_dict(c), {workdir!r}, stop_after={step})
""")


def _tensorboard_tags(logdir: str) -> dict:
  from tensorboard.backend.event_processing import event_accumulator as ea
  acc = ea.EventAccumulator(logdir, size_guidance={ea.TENSORS: 0})
  acc.Reload()
  return {t: acc.SummaryMetadata(t).plugin_data.plugin_name for t in acc.Tags()["tensors"]}


def test_train_resume_eval_sample_without_tensorflow(tmp_path):
  tokens = _token_dir(tmp_path)
  straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
  _no_tf(*_flags(straight, tokens))

  _stop_after(resumed, tokens, 4)
  first_baselines = open(f"{resumed}/baselines.json").read()  # written at the first start
  out = _no_tf(*_flags(resumed, tokens))
  assert open(f"{resumed}/baselines.json").read() == first_baselines  # not re-measured
  baselines = json.loads(first_baselines)
  assert 0 < baselines["bigram_nats"] < baselines["unigram_nats"] < np.log(256), baselines
  assert baselines["train_tokens"] == NUM_STEPS * OVERRIDES["train.batch_size"] \
      * OVERRIDES["data.seq_len"]
  assert baselines["scored_tokens"] > 0 and baselines["params"] > 0
  assert f"Resumed from {resumed}/checkpoints at step 4" in out  # saved where it stopped
  a, b = _final_params(straight, NUM_STEPS), _final_params(resumed, NUM_STEPS)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))

  state = json.loads(open(f"{resumed}/checkpoints/{NUM_STEPS}/data/process_0.json").read())
  assert state["step"] == NUM_STEPS  # the input position: one batch per step
  rows = [json.loads(line) for line in open(f"{resumed}/metrics.jsonl")]
  assert any(r["split"] == "eval" and np.isfinite(r["bits_per_byte"]) for r in rows)
  assert _tensorboard_tags(f"{straight}/tensorboard/train")["loss"] == "scalars"
  assert set(_tensorboard_tags(f"{straight}/tensorboard/samples").values()) == {"text"}

  out = _no_tf("--mode=eval", f"--workdir={resumed}")
  assert f"eval of step {NUM_STEPS} on 'validation'" in out
  evaluated = json.loads(open(f"{resumed}/eval/validation-{NUM_STEPS}.json").read())
  assert np.isfinite(evaluated["loss"]) and evaluated["step"] == NUM_STEPS
  out = _no_tf("--mode=sample", f"--workdir={resumed}", "--prompt=def ", "--max_new_tokens=8")
  assert "--- sample 0" in out
