"""Golden step-one numbers (nanodo's `test_train_step`, DESIGN.md): per model kind and norm
placement, the loss and gradient norm of the project's train step at init, with dropout, on a
fixed batch, and the loss after that step, against the numbers committed in
`golden_step_one.json`. Tests that randomize the weights cannot see a change of init (a
scale, a zero-initialized layer, Admin's omegas) or of the dropout wiring (a mask moved, a
key reused); these numbers can. When such a change is meant, write the file again with
`python -m tests.test_golden_step --write` and say in the commit why the numbers moved.

The tolerance (relative 1e-4) absorbs float32 summation order across XLA versions and
machines; every change of init or dropout seen so far moves them by far more."""

import json
import os
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

from transformer.config import NORM_PLACEMENTS, ModelConfig, OptimConfig
from transformer.model import models
from transformer.tasks.losses import cross_entropy_sums
from transformer.train import optim, steps
from transformer.train.state import create_state

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_step_one.json")
RTOL = 1e-4
V, BATCH, LENGTH = 37, 4, 12
# case name -> ModelConfig fields beyond the shared small model
CASES = {
    **{f"decoder_lm/{p}": dict(kind="decoder_lm", norm_placement=p) for p in NORM_PLACEMENTS},
    "decoder_lm/pre/rmsnorm": dict(kind="decoder_lm", norm_placement="pre", norm="rmsnorm"),
    "decoder_lm/pre/dyt": dict(kind="decoder_lm", norm_placement="pre", norm="dyt"),
    "decoder_lm/post/qk_norm": dict(kind="decoder_lm", norm_placement="post", qk_norm=True),
    "encoder_decoder/post": dict(kind="encoder_decoder", norm_placement="post"),
    "encoder_decoder/pre": dict(kind="encoder_decoder", norm_placement="pre"),
    "masked_lm/post": dict(kind="masked_lm", norm_placement="post"),
    "classifier/pre": dict(kind="classifier", norm_placement="pre", num_classes=3),
    "vit_classifier/pre": dict(kind="vit_classifier", norm_placement="pre", num_classes=3,
                               image_size=8, image_channels=3, patch_size=4),
}


def _batch(kind: str) -> dict:
  """A fixed batch for `kind`: model inputs (a tuple), integer targets and their weights."""
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, V, size=(BATCH, LENGTH + 1)).astype(np.int32)
  ones = np.ones((BATCH, LENGTH), np.float32)
  if kind == "decoder_lm":
    return {"inputs": (tokens[:, :-1],), "targets": tokens[:, 1:], "weights": ones}
  if kind == "encoder_decoder":
    target = rng.integers(3, V, size=(BATCH, LENGTH + 1)).astype(np.int32)
    return {"inputs": (tokens[:, :-1], target[:, :-1]), "targets": target[:, 1:],
            "weights": ones}
  if kind == "masked_lm":
    masked = tokens[:, :-1].copy()
    masked[:, ::3] = 1  # the mask token's id; the loss is on the masked positions
    weights = np.zeros((BATCH, LENGTH), np.float32)
    weights[:, ::3] = 1
    return {"inputs": (masked,), "targets": tokens[:, :-1], "weights": weights}
  labels = {"targets": rng.integers(0, 3, size=(BATCH, 1)).astype(np.int32),
            "weights": np.ones((BATCH, 1), np.float32)}  # one label a row
  if kind == "classifier":
    return {"inputs": (tokens[:, :-1],), **labels}
  return {"inputs": (rng.normal(size=(BATCH, 8, 8, 3)).astype(np.float32),), **labels}


def _model(case: dict) -> nn.Module:
  cfg = ModelConfig(**{**dict(vocab_size=V, d_model=32, num_heads=4, num_layers=2, d_ff=64,
                               max_len=32, dropout_rate=0.1), **case})
  return {"decoder_lm": models.DecoderLM, "encoder_decoder": models.EncoderDecoder,
          "masked_lm": models.MaskedLM, "classifier": models.Classifier,
          "vit_classifier": models.VisionTransformer}[cfg.kind](cfg)


def step_one(case: dict) -> dict[str, float]:
  """The train step's `loss` and `grad_norm` at init (dropout on, key 1) and the loss after
  it (dropout off), for the model `case` describes."""
  model, batch = _model(case), _batch(case["kind"])
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), *batch["inputs"])["params"])

  def loss_sums(params, batch, rng, deterministic=False):
    logits = model.apply({"params": params}, *batch["inputs"], deterministic=deterministic,
                         rngs={} if rng is None else {"dropout": rng})
    if logits.ndim == 2:  # one label a row: [batch, classes] -> [batch, 1, classes]
      logits = logits[:, None, :]
    return cross_entropy_sums(logits, batch["targets"], batch["weights"])

  tx = optim.build_optimizer(OptimConfig(learning_rate=1e-3, warmup_steps=0), 10)
  step = jax.jit(steps.make_train_step(loss_sums, tx))
  state, metrics = step(create_state(params, tx), batch, jax.random.PRNGKey(1))
  total, weight = jax.jit(lambda p: loss_sums(p, batch, None, deterministic=True))(state.params)
  return {"loss": float(metrics["loss"]), "grad_norm": float(metrics["grad_norm"]),
          "loss_after_step": float(total / weight)}


def _golden() -> dict:
  with open(GOLDEN, encoding="utf-8") as f:
    return json.load(f)


def test_every_case_has_golden_numbers():
  assert sorted(_golden()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_one_matches_the_golden_numbers(name):
  want, got = _golden()[name], step_one(CASES[name])
  moved = {k: (want[k], got[k]) for k in want if not np.isclose(got[k], want[k], rtol=RTOL,
                                                                 atol=0)}
  assert not moved, (
      f"{name}: step-one numbers moved (golden, now): {moved}. A change of init, dropout or "
      "the train step does this; if it was meant, run `python -m tests.test_golden_step "
      "--write` and say why in the commit.")


def test_the_numbers_see_dropout_and_init(monkeypatch):
  """What the golden numbers are for: without dropout, or with the token embedding drawn 1.5x
  wider, the same step moves them far beyond the tolerance."""
  want = _golden()["decoder_lm/pre"]
  got = step_one({**CASES["decoder_lm/pre"], "dropout_rate": 0.0})
  assert any(not np.isclose(got[k], want[k], rtol=100 * RTOL) for k in want)
  normal = nn.initializers.normal
  monkeypatch.setattr(nn.initializers, "normal", lambda stddev=1e-2, **kw: normal(1.5 * stddev))
  got = step_one(CASES["decoder_lm/pre"])
  assert any(not np.isclose(got[k], want[k], rtol=100 * RTOL) for k in want)


def main(argv: list[str]) -> None:
  if argv[1:] != ["--write"]:
    sys.exit("usage: python -m tests.test_golden_step --write  (writes tests/golden_step_one.json)")
  numbers = {name: {k: float(f"{v:.7g}") for k, v in step_one(case).items()}
             for name, case in sorted(CASES.items())}
  with open(GOLDEN, "w", encoding="utf-8") as f:
    f.write(json.dumps(numbers, indent=1, sort_keys=True) + "\n")
  print(f"wrote {GOLDEN}: {len(numbers)} cases")


if __name__ == "__main__":
  main(sys.argv)
