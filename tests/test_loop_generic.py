"""The training loop without special cases (issue 70): kinds and placements looked up in their
registries, the train row and log line built from whatever the step and the loss's aux sums
return, one `Sampling` value, and one answer to "is this kind generative"."""

import collections
import dataclasses
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.test_norms import _admin_lm_config, _decoder_omegas
from transformer import config as config_module
from transformer import kinds
from transformer.errors import CommandLineError, ConfigError
from transformer.model import placements
from transformer.sampling import Sampling
from transformer.train import loop, steps
from transformer.train.state import create_state

LOOP_FILE = os.path.join(os.path.dirname(loop.__file__), "loop.py")


def test_the_loop_names_no_kind_and_no_placement():
  """Whole words, any case, code and docstrings alike: `admin`, `decoder_lm`, `pre`, ..."""
  with open(LOOP_FILE, encoding="utf-8") as f:
    source = f.read()
  names = config_module.MODEL_KINDS + config_module.NORM_PLACEMENTS
  found = sorted({m.group(0) for name in names
                  for m in re.finditer(rf"(?<![\w.]){re.escape(name)}(?!\w)", source, re.I)})
  assert not found, f"train/loop.py names {found}: look them up in kinds / model.placements"


def test_the_placement_registry_is_the_configs_list_and_refuses_an_unknown_name():
  assert tuple(placements.PLACEMENTS) == config_module.NORM_PLACEMENTS
  assert [p for p in placements.PLACEMENTS if placements.init_profile(p)] == ["admin"]
  with pytest.raises(ConfigError, match=r"norm_placement='sandwich'.*'pre', 'post'"):
    placements.get("sandwich")


def _checkpoint_0_params(workdir):
  import orbax.checkpoint as ocp
  mngr = ocp.CheckpointManager(f"{workdir}/checkpoints", item_names=("state",))
  out = mngr.restore(0, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  mngr.close()
  return out["state"]["params"]


def test_the_loop_profiles_at_init_and_records_baselines_where_the_registries_say(
    tiny_corpus, tmp_path, monkeypatch):
  """A 0-step Admin run saves its initial params as checkpoint 0. With the registries as they
  are, its omegas are the profile of the first training batch and `baselines.json` is written
  (decoder_lm); with Admin's entry saying "no init profile" and the kind's "no baselines", the
  loop reads no batch ahead (the omegas are those of init on synthetic inputs) and writes no
  baselines: the loop asks the registries, it does not know the names."""
  cfg = _admin_lm_config(tiny_corpus, num_steps=1, samples_at_eval=False)
  cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, num_steps=0))
  data, task = kinds.build_data_and_task(cfg, str(tmp_path / "fresh"))
  init_rng = jax.random.split(jax.random.PRNGKey(cfg.seed))[0]
  on_data = _decoder_omegas(jax.jit(task.init_params)(init_rng, data.next_train_batch()), 3)
  synthetic = _decoder_omegas(jax.jit(task.init_params)(init_rng), 3)
  assert max(abs(float(a[0] - b[0])) for a, b in zip(on_data, synthetic)) > 1e-3

  loop.train_and_evaluate(cfg, str(tmp_path / "as_is"))
  for got, want in zip(_decoder_omegas(_checkpoint_0_params(tmp_path / "as_is"), 3), on_data):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  assert os.path.exists(tmp_path / "as_is" / "baselines.json")

  monkeypatch.setitem(placements.PLACEMENTS, "admin", placements.Placement("admin"))
  monkeypatch.setitem(kinds.KINDS, "decoder_lm",
                      dataclasses.replace(kinds.KINDS["decoder_lm"], baselines=False))
  loop.train_and_evaluate(cfg, str(tmp_path / "patched"))
  for got, want in zip(_decoder_omegas(_checkpoint_0_params(tmp_path / "patched"), 3),
                       synthetic):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  assert not os.path.exists(tmp_path / "patched" / "baselines.json")


# ----------------------------------------------------------------- aux sums and the log line


def _toy_step(aux_names=("sq",), micro_batches=1):
  """A linear model `y = x @ w` on squared error, whose loss also returns aux sums."""
  def loss_sums(params, batch, rng):
    del rng
    err = batch["x"] @ params["w"] - batch["y"]
    weights = batch["weights"]
    aux = {name: jnp.sum(weights * jnp.abs(err)) * (i + 1) for i, name in enumerate(aux_names)}
    return jnp.sum(weights * err ** 2), jnp.sum(weights), aux
  tx = optax.sgd(0.1)
  params = {"w": jnp.asarray([0.5, -1.0, 2.0], jnp.float32)}
  state = create_state(params, tx)
  return steps.make_train_step(loss_sums, tx, micro_batches=micro_batches), state


def _toy_batch():
  rng = np.random.default_rng(0)
  return {"x": rng.normal(size=(4, 3)).astype(np.float32),
          "y": rng.normal(size=(4,)).astype(np.float32),
          "weights": np.asarray([1, 1, 0, 1], np.float32)}


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_the_step_reports_each_aux_sum_over_the_loss_denominator(micro_batches):
  """Each aux sum comes out divided by the weight sum (float64 NumPy reference), whole batch
  or accumulated over micro-batches, between `grad_norm` and `tokens`."""
  step, state = _toy_step(("abs_err", "twice_abs_err"), micro_batches)
  batch = _toy_batch()
  _, metrics = jax.jit(step)(state, batch, jax.random.PRNGKey(0))
  x, y, w = (batch[k].astype(np.float64) for k in ("x", "y", "weights"))
  err = x @ np.asarray([0.5, -1.0, 2.0]) - y
  want = np.sum(w * np.abs(err)) / np.sum(w)
  np.testing.assert_allclose(metrics["abs_err"], want, rtol=1e-6)
  np.testing.assert_allclose(metrics["twice_abs_err"], 2 * want, rtol=1e-6)
  np.testing.assert_allclose(metrics["loss"], np.sum(w * err ** 2) / np.sum(w), rtol=1e-6)
  assert list(metrics) == ["loss", "grad_norm", "abs_err", "twice_abs_err", "tokens", "finite"]


def test_an_aux_sum_named_like_a_step_metric_is_refused():
  step, state = _toy_step(("grad_norm",))
  with pytest.raises(ValueError, match=r"aux sums named \['grad_norm'\].*rename them"):
    step(state, _toy_batch(), jax.random.PRNGKey(0))


def test_the_log_line_prints_every_column_known_ones_first():
  row = collections.OrderedDict(loss=1.23456, grad_norm=0.5, accuracy=0.25, z=3.0,
                                learning_rate=1e-3, tokens_per_sec=1000.0, step_time=0.01)
  line = loop.format_train_row(10, 100, row)
  assert line == ("step     10/100 | loss 1.2346 | lr 1.00e-03 | grad_norm 0.500 | accuracy 0.25 "
                  "| z 3 | 1,000 tok/s | 10 ms/step | ETA 0m00s")
  untimed = loop.format_train_row(1, 100, {"loss": 2.0, "learning_rate": 0.0, "grad_norm": 1.0,
                                           "skipped_steps": 2}, skipped=2)
  assert untimed == ("step      1/100 | loss 2.0000 | lr 0.00e+00 | grad_norm 1.000 | "
                     "compiling step, not timed | skipped 2")


def test_a_metric_the_tasks_loss_adds_is_a_train_column(tiny_corpus, tmp_path, capsys):
  """A task's `train_aux` (here the weighted next-token accuracy) reaches every train row of
  metrics.jsonl and the log line. At a learning rate of 1e-30 the params stay the initial
  ones, so each row's accuracy is NumPy's on the batches of its steps."""
  cfg = _admin_lm_config(tiny_corpus, num_steps=2, log_every=1, eval_every=2,
                         samples_at_eval=False)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, norm_placement="pre"),
                            optim=dataclasses.replace(cfg.optim, learning_rate=1e-30))
  data, task = kinds.build_data_and_task(cfg, str(tmp_path / "w"))

  def accuracy(forward):
    hit = jnp.argmax(forward.logits, -1) == forward.targets
    return {"accuracy": jnp.sum(hit * forward.weights)}
  task.train_aux = accuracy
  loop.train_and_evaluate(cfg, str(tmp_path / "w"), task=task, data=data)
  rows = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()]
  train = [r for r in rows if r["split"] == "train"]
  assert [r["step"] for r in train] == [1, 2]
  assert list(train[0])[3:6] == ["loss", "grad_norm", "accuracy"]
  assert "| accuracy " in capsys.readouterr().out

  fresh, _ = kinds.build_data_and_task(cfg, str(tmp_path / "fresh"))
  init_rng = jax.random.split(jax.random.PRNGKey(cfg.seed))[0]
  params = task.init_params(init_rng)
  for row in train:
    batch = fresh.next_train_batch()
    logits = np.asarray(task.apply(params, batch["inputs"]), np.float64)
    hit = logits.argmax(-1) == batch["targets"]
    want = np.sum(hit * batch["weights"]) / np.sum(batch["weights"])
    np.testing.assert_allclose(row["accuracy"], want, rtol=1e-6)


# -------------------------------------------------------------------- Sampling, generative


@pytest.mark.parametrize("fields, message", [
    (dict(max_new=0), "--max_new_tokens=0: must be at least 1."),
    (dict(beams=0), "--beam_size=0: must be at least 1."),
    (dict(top_k=-2), "--top_k=-2: must be at least 0."),
    (dict(temperature=-0.5), "--temperature=-0.5: must be >= 0 (0 = greedy)."),
    (dict(temperature=float("inf")), "--temperature=inf: must be >= 0 (0 = greedy)."),
    (dict(top_p=0.0), "--top_p=0.0: must be in (0, 1] (1 = all tokens)."),
])
def test_sampling_is_validated_where_it_is_built_in_one_line(fields, message):
  with pytest.raises(CommandLineError) as e:
    Sampling(**fields)
  assert str(e.value) == message


def test_sampling_from_flags_and_back():
  flags = {"max_new_tokens": 7, "temperature": 0.8, "top_k": 3, "top_p": 0.9, "beam_size": 2,
           "num_samples": 4}
  sampling = Sampling.from_flags(flags)
  assert sampling == Sampling(max_new=7, temperature=0.8, top_k=3, top_p=0.9, beams=2)
  assert sampling.as_flags() == {k: v for k, v in flags.items() if k != "num_samples"}
  assert Sampling.from_flags({"top_k": None}) == Sampling()
  assert hash(sampling) == hash(Sampling.from_flags(flags))  # a static argument of jit


def _random_lm():
  from tests.test_sample import _random_lm as build
  return build(max_len=16)


def test_generative_is_answered_by_the_kind_registry_alone(monkeypatch):
  """`generate_texts` dispatches on the registry's answer its callers pass (it used to dispatch
  on the model's class; tasks/ does not import the registry, which names tasks): the same
  decoder model under a kind the registry calls non-generative is refused by
  `kinds.check_generative`, naming the generative kinds, and by `generate_texts` without an
  answer; beam search on a kind that continues a prompt is refused too."""
  from transformer.tasks.generate import generate_texts
  config, model, params, tok = _random_lm()
  lm = kinds.check_generative(config.model.kind, "--mode=sample")
  assert lm == "lm"
  with pytest.raises(CommandLineError, match="--beam_size=2: beam search is for kinds that"):
    generate_texts(config, model, params, tok, ["a"], Sampling(max_new=2, beams=2),
                   generative=lm)
  monkeypatch.setitem(kinds.KINDS, "decoder_lm",
                      dataclasses.replace(kinds.KINDS["decoder_lm"], generative=""))
  with pytest.raises(ConfigError, match=r"needs a generative run \(encoder_decoder\); this is "
                     r"a 'decoder_lm' run"):
    kinds.check_generative(config.model.kind, "--mode=sample")
  with pytest.raises(ConfigError, match="a generative kind's answer is 'lm' or 'seq2seq'"):
    generate_texts(config, model, params, tok, ["a"], Sampling(max_new=2),
                   generative=kinds.generative(config.model.kind))
  assert kinds.generative("decoder_lm") == ""
