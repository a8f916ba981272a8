"""The seq2seq, masked-LM and classification tasks: masking, exact match, fine-tuning init."""

import flax.linen as nn  # noqa: F401
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import cls_small, mlm_small
from transformer import kinds
from transformer.config import ConfigError, from_config_dict
from transformer.data.facts import DataFacts
from transformer.weights.init_from import load_params
from transformer.tasks.language import bert_mask
from transformer.tasks.seq2seq import Seq2SeqTask
from transformer.train.loop import train_and_evaluate


def test_bert_mask_selects_real_tokens_and_splits_80_10_10():
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, 200, size=(64, 256)).astype(np.int32)
  tokens[:, :2] = [1, 2]  # special tokens are never selected
  weights = np.ones(tokens.shape, np.float32)
  weights[:, -56:] = 0  # padding is never selected
  corrupted, selected = bert_mask(jax.random.PRNGKey(0), jnp.asarray(tokens),
                                  jnp.asarray(weights), 0.15, mask_id=200, vocab_size=200)
  corrupted, selected = np.asarray(corrupted), np.asarray(selected).astype(bool)
  assert not selected[:, :2].any() and not selected[:, -56:].any()
  eligible = 64 * (200 - 2)
  assert abs(selected.sum() / eligible - 0.15) < 0.01
  np.testing.assert_array_equal(corrupted[~selected], tokens[~selected])
  masked = (corrupted == 200) & selected
  kept = (corrupted == tokens) & selected
  n = selected.sum()
  assert abs(masked.sum() / n - 0.8) < 0.03
  # 10% random (a random token may equal the original: 1/197 of them) and 10% kept.
  assert abs(kept.sum() / n - 0.1) < 0.03
  assert abs((selected & ~masked & ~kept).sum() / n - 0.1) < 0.03


def test_exact_match_counts_whole_sequences_only():
  task = object.__new__(Seq2SeqTask)
  task.pad_id = 0
  targets = jnp.array([[5, 6, 2, 0], [5, 6, 2, 0], [5, 6, 2, 0], [7, 2, 0, 0]])
  weights = (targets != 0).astype(jnp.float32)
  decoded = jnp.array([[5, 6, 2, 0, 0],   # right
                       [5, 6, 7, 2, 0],   # longer: wrong
                       [5, 7, 2, 0, 0],   # a wrong token
                       [7, 2, 0, 0, 0]])  # right
  np.testing.assert_array_equal(task.exact_matches(decoded, targets, weights), [1, 0, 0, 1])


@pytest.fixture(scope="module")
def package_corpus(tmp_path_factory):
  """Two 'packages' whose files differ in vocabulary."""
  root = tmp_path_factory.mktemp("pkgs")
  src = root / "src"
  vocab = {"alpha": "async await loop", "beta": "header message mime"}
  for pkg, words in vocab.items():
    (src / pkg).mkdir(parents=True)
    for i in range(10):
      lines = [f"# {pkg} {i}"] + [f"{words} {j}" for j in range(30)]
      (src / pkg / f"m{i}.py").write_text("\n".join(lines) + "\n")
  return {"source_dir": str(src), "data_dir": str(root / "tfds")}


def _smoke(module, corpus, **model):
  c = module.get_config("smoke")
  with c.unlocked():
    c.data.source_dir = corpus["source_dir"]
    c.data.data_dir = corpus["data_dir"]
    c.data.validation_percent = 25
    c.data.shuffle_buffer = 32
    c.train.num_steps = 3
    c.train.eval_every = 3
    c.checkpoint.every_steps = 3
    for k, v in model.items():
      c.model[k] = v
  return from_config_dict(c)


def test_classifier_starts_from_the_masked_lm_encoder(package_corpus, tmp_path):
  mlm_dir = tmp_path / "mlm"
  result = train_and_evaluate(_smoke(mlm_small, package_corpus), str(mlm_dir))
  assert 0.0 <= result["masked_accuracy"] <= 1.0
  pretrained, _, _ = load_params(str(mlm_dir))

  cfg = _smoke(cls_small, package_corpus, init_from=str(mlm_dir))
  _, facts = kinds.build_data(cfg)
  task = kinds.build_task(cfg, facts)
  assert facts.num_classes == 2 and task.config.model.num_classes == 2
  params = task.init_params(jax.random.PRNGKey(0))
  for part in ("embedder", "encoder"):
    for got, want in zip(jax.tree.leaves(params[part]), jax.tree.leaves(pretrained[part])):
      np.testing.assert_array_equal(got, want)
  scratch = kinds.build_task(_smoke(cls_small, package_corpus), facts).init_params(
      jax.random.PRNGKey(0))
  assert not np.array_equal(scratch["encoder"]["stack"]["layer_0"]["feed_forward"]["wi"]["kernel"],
                            pretrained["encoder"]["stack"]["layer_0"]["feed_forward"]["wi"]["kernel"])

  result = train_and_evaluate(_smoke(cls_small, package_corpus, init_from=str(mlm_dir)),
                              str(tmp_path / "cls"))
  assert 0.0 <= result["accuracy"] <= 1.0


def test_init_from_a_missing_run_or_another_model_is_refused(package_corpus, tmp_path):
  cfg = _smoke(cls_small, package_corpus, init_from=str(tmp_path / "none"))
  with pytest.raises(ConfigError, match="init_from"):
    kinds.build_task(cfg, DataFacts(vocab_size=259, num_classes=2))  # no data needed
