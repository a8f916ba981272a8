"""`--mode=sample`: continuing a prompt with a trained LM checkpoint."""

import json
import os

import jax
import numpy as np
import pytest

from tests.test_train import _tiny_config
from transformer.config import ConfigError
from transformer.data.tokenizers import ByteTokenizer
from transformer.evaluation.sample import sample_from_workdir
from transformer import kinds
from transformer.data.facts import DataFacts
from transformer.weights.init_from import load_params
from transformer.train.loop import train_and_evaluate
from transformer.sampling import Sampling


def test_sample_continues_the_prompt_with_the_checkpoint(tiny_corpus, tmp_path):
  cfg = _tiny_config(tiny_corpus, num_steps=4, log_every=2, eval_every=4)
  workdir = str(tmp_path / "lm")
  train_and_evaluate(cfg, workdir)

  greedy = sample_from_workdir(workdir, "def ", Sampling(max_new=6))
  # Greedy re-derived from the full forward pass of the restored model, token by token.
  task = kinds.build_task(cfg, DataFacts.of_tokenizer(ByteTokenizer()))  # no data needed
  params, _, _ = load_params(workdir)
  tok = ByteTokenizer()
  ids = [tok.eos_id] + tok.encode("def ")  # concat packing: documents follow an EOS
  for _ in range(6):
    logits = task.model.apply({"params": params}, np.asarray([ids], np.int32))
    nxt = int(np.argmax(logits[0, -1]))
    if nxt == tok.eos_id:
      break
    ids.append(nxt)
  assert greedy == [tok.decode(ids[5:])]

  sampled = sample_from_workdir(workdir, "def ", Sampling(max_new=6, temperature=1.0, top_k=5),
                                num_samples=3, seed=1)
  assert len(sampled) == 3 and all(isinstance(s, str) for s in sampled)
  with open(os.path.join(workdir, "samples.txt")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows if "step" in r] == [4, 4, 4]  # the run's eval samples
  rows = [r for r in rows if "step" not in r]  # those of --mode=sample
  assert len(rows) == 4 and rows[0]["prompt"] == "def " and rows[-1]["top_k"] == 5


def test_sample_refuses_a_workdir_without_a_run(tmp_path):
  with pytest.raises(ConfigError, match="config.json"):
    sample_from_workdir(str(tmp_path), "x", Sampling())


def _random_lm(max_len):
  """A tiny decoder LM at initialization, with the byte tokenizer (no training needed)."""
  import jax
  from configs.default import get_config
  from transformer import kinds
  from transformer.config import from_config_dict
  c = get_config("smoke")
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
  c.model.max_len = max_len
  config = from_config_dict(c, vocab_size=ByteTokenizer().vocab_size)
  model = kinds.get(config.model.kind).build_model(config.model)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 4), np.int32))["params"]
  return config, model, params, ByteTokenizer()


def test_a_prompt_longer_than_the_context_keeps_its_last_tokens_and_says_so():
  from transformer.tasks.generate import generate_texts
  config, model, params, tok = _random_lm(max_len=16)
  notes = []
  long = generate_texts(config, model, params, tok, ["abcdefghijklmnopqrstuvwxyz"],
                        Sampling(max_new=5), generative="lm", log=notes.append)
  # 16 positions = the start token + 10 prompt tokens + 5 new ones: 16 of 26 dropped.
  assert len(notes) == 1
  assert "the prompt is 26 tokens" in notes[0] and "kept its last 10 tokens" in notes[0]
  assert "dropped the first 16" in notes[0]
  tail = generate_texts(config, model, params, tok, ["qrstuvwxyz"], Sampling(max_new=5),
                        generative="lm",
                        log=notes.append)
  assert long == tail and len(notes) == 1  # what was kept is what the model saw; no note


def test_max_new_tokens_that_fill_the_context_are_a_command_line_error():
  from transformer.errors import CommandLineError
  from transformer.tasks.generate import generate_texts
  config, model, params, tok = _random_lm(max_len=16)
  with pytest.raises(CommandLineError, match="--max_new_tokens=16 does not fit the model's "
                     "context of max_len=16 tokens .* give at most 15"):
    generate_texts(config, model, params, tok, ["a"], Sampling(max_new=16), generative="lm")
  # The whole context for new tokens after the start token: the prompt is dropped, said once.
  notes = []
  out = generate_texts(config, model, params, tok, ["ab"], Sampling(max_new=15), generative="lm",
                       log=notes.append)
  assert len(out) == 1 and "kept its last 0 tokens, dropped the first 2" in notes[0]


def test_decoding_compiles_once_per_model_settings_and_prompt_length():
  # Every eval of a run writes samples, and --mode=sample --num_samples=N decodes N times:
  # each call must reuse the program, not trace and compile a new one.
  from transformer.tasks import generate
  config, model, params, tok = _random_lm(max_len=32)
  compiled = generate._lm_continue._cache_size
  before = compiled()
  first = generate.generate_texts(config, model, params, tok, ["abc"], Sampling(max_new=5),
                                  generative="lm")
  assert compiled() == before + 1
  # An equal model built again, new parameter values, another seed and prompt: no new program.
  again = kinds.get(config.model.kind).build_model(config.model)
  doubled = jax.tree.map(lambda x: 2 * x, params)
  for m, p, seed, text in ((model, params, 0, "abc"), (again, doubled, 3, "xyz")):
    generate.generate_texts(config, m, p, tok, [text], Sampling(max_new=5),
                            generative="lm", seed=seed)
  assert compiled() == before + 1
  assert generate.generate_texts(config, again, params, tok, ["abc"],
                                 Sampling(max_new=5), generative="lm") == first
  generate.generate_texts(config, model, params, tok, ["abc"], Sampling(max_new=6), generative="lm")
  generate.generate_texts(config, model, params, tok, ["abcd"], Sampling(max_new=5),
                          generative="lm")
  assert compiled() == before + 3  # another length of output, another length of prompt


def _ids_only_run(tmp_path):
  """A run trained 1 step on a nanoGPT folder described
  without a tokenizer, so its prompts are the files' ids; its workdir."""
  from configs.default import get_config
  from transformer.config import from_config_dict
  from transformer.data import foreign_meta
  data = tmp_path / "data"
  data.mkdir()
  rng = np.random.default_rng(0)
  for split, n in (("train", 3000), ("val", 600)):
    rng.integers(0, 300, n).astype("<u2").tofile(data / f"{split}.bin")
  foreign_meta.describe(str(data), "nanogpt", 300)
  c = get_config("smoke")
  c.data.name, c.data.source_dir, c.data.seq_len = "token_file", str(data), 16
  c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
  c.train.batch_size, c.train.num_steps, c.data.eval_batches = 8, 1, 1
  c.train.samples_at_eval = False
  workdir = str(tmp_path / "run")
  train_and_evaluate(from_config_dict(c), workdir)
  return workdir


@pytest.mark.slow  # a training step and a launch.py process: ~70 s on 2 loaded cores
def test_a_blank_prompt_of_an_ids_only_run_is_one_line(tmp_path):
  """`--mode=sample --prompt='   '` on an ids-only run (its prompts are ids; blank holds none,
  and such a run has no start token of its own) ended in a 49-line JAX traceback; now one
  line naming the prompt and what to give, before anything is compiled or written. A blank
  prompt has no meaning there: the model never saw our pad / BOS / EOS rows as inputs."""
  import subprocess
  import sys
  workdir = _ids_only_run(tmp_path)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "launch.py", "--mode=sample", f"--workdir={workdir}",
                         "--prompt=   ", "--max_new_tokens=4"], cwd=root, capture_output=True,
                        text=True, timeout=280)
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
  assert "--prompt='   ' holds no ids" in lines[0], lines[0]
  assert "e.g. --prompt='149 299'" in lines[0], lines[0]
  samples = os.path.join(workdir, "samples.txt")
  assert not os.path.exists(samples) or "   " not in open(samples).read()
  sampled = sample_from_workdir(workdir, "7 8", Sampling(max_new=4))
  assert all(w.isdigit() and int(w) < 300 for w in sampled[0].split())  # ids work


def test_a_prompt_with_nothing_to_continue_is_refused_before_compiling():
  """A run without a start token of its own (ids another tokenizer's) fed the model an empty
  row for a blank ids prompt, or with no room left for the prompt: JAX failed inside the
  decoding loop. Now a one-line error, before anything is compiled."""
  from transformer.data.foreign_tokens import IdsTokenizer
  from transformer.errors import CommandLineError
  from transformer.tasks import generate
  config, model, params, _ = _random_lm(max_len=16)
  tok = IdsTokenizer(259)  # ids only: its prompts are ids 0..255 written with spaces
  before = generate._lm_continue._cache_size()
  for blank in ("", "   ", "\n"):
    with pytest.raises(ConfigError, match="holds no ids.*e.g. --prompt='127 255'") as e:
      generate.generate_texts(config, model, params, tok, [blank], Sampling(max_new=5),
                              generative="lm")
    assert "\n" not in str(e.value)
  with pytest.raises(CommandLineError, match="--max_new_tokens=15 leaves no room.*at most 14"):
    generate.generate_texts(config, model, params, tok, ["7 8"], Sampling(max_new=15),
                            generative="lm")
  assert generate._lm_continue._cache_size() == before
