"""`python launch.py --mode=data_bench`: how fast the input pipeline delivers tokens, against
what training eats.

  python launch.py --mode=data_bench [--config=configs/default.py[:variant]]
      [--config.data.packing=pack ...] [--data_bench_batches=200] [--bench_steps=20]
      [--data_bench_skip_model]

Prints (1) the training pipeline alone: tokens/s delivered by `next_train_batch()` (row
positions, and real tokens: those with weight > 0), after a warm-up batch; and (2) the train
step of the config's model on this machine: tokens/s it consumes (jit-compiled, compilation
excluded, synchronised each step), on a batch from the same pipeline. The pipeline must
deliver at least 10x what the step consumes; the last line gives the ratio. (It lives with
the training code because it builds the task and its train step; `transformer/data` knows
nothing of models.)
"""

from __future__ import annotations

import sys
import tempfile
import time


def batch_tokens(batch: dict, seq2seq: bool) -> tuple[int, int]:
  """(positions, non-padding tokens) of a batch: the input rows, plus the target rows for
  seq2seq (for an LM the targets are the same positions moved by one)."""
  keys = ("inputs", "targets") if seq2seq else ("inputs",)
  return (sum(int(batch[k].size) for k in keys), sum(int((batch[k] != 0).sum()) for k in keys))


def time_pipeline(data, num_batches: int, seq2seq: bool = False) -> dict[str, float]:
  """Tokens/s of `data.next_train_batch()` over `num_batches` batches (after one warm-up)."""
  data.next_train_batch()
  positions = real = 0
  t0 = time.perf_counter()
  for _ in range(num_batches):
    p, r = batch_tokens(data.next_train_batch(), seq2seq)
    positions, real = positions + p, real + r
  elapsed = time.perf_counter() - t0
  return {"positions_per_sec": positions / elapsed, "real_tokens_per_sec": real / elapsed,
          "batches_per_sec": num_batches / elapsed}


def time_train_step(task, batch: dict, num_steps: int, seq2seq: bool = False
                    ) -> dict[str, float]:
  """Tokens/s consumed by the task's jit-compiled train step (on `batch`, synchronised)."""
  import jax
  import numpy as np
  from transformer.train import optim, steps
  from transformer.train.state import create_state

  cfg = task.config
  tx = optim.build_optimizer(cfg.optim, cfg.train.num_steps)
  state = jax.jit(lambda rng: create_state(task.init_params(rng), tx))(jax.random.PRNGKey(0))
  step = jax.jit(steps.make_train_step(task.loss_sums, tx), donate_argnums=0)
  rng = jax.random.PRNGKey(1)
  state, metrics = step(state, batch, rng)
  jax.block_until_ready(state)
  times = []
  for _ in range(num_steps):
    t0 = time.perf_counter()
    state, metrics = step(state, batch, rng)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - t0)
  step_time = float(np.median(times))
  tokens = batch_tokens(batch, seq2seq)[0]
  return {"step_time": step_time, "tokens_per_sec": tokens / step_time,
          "device": str(jax.devices()[0].device_kind)}


def run_data_benchmark(config, num_batches: int, num_steps: int, skip_model: bool) -> None:
  """Prints the pipeline's and the train step's tokens/s for `config` (an ExperimentConfig)."""
  from transformer import kinds  # heavy imports only when this mode runs

  with tempfile.TemporaryDirectory() as workdir:
    data, task = kinds.build_data_and_task(config, workdir)
    d = config.data
    seq2seq = kinds.generative(config.model.kind) == "seq2seq"  # source and target rows
    shape = f"src {d.src_len} / tgt {d.tgt_len}" if seq2seq else f"seq_len {d.seq_len}"
    print(f"data: {d.name}, tokenizer {d.tokenizer} ({data.tokenizer.vocab_size} ids), "
          f"packing {d.packing}, batch {data.batch_size} per process, {shape}")
    pipe = time_pipeline(data, num_batches, seq2seq)
    print(f"pipeline alone: {pipe['positions_per_sec']:,.0f} tokens/s "
          f"({pipe['real_tokens_per_sec']:,.0f} non-padding), "
          f"{pipe['batches_per_sec']:,.1f} batches/s over {num_batches} batches")
    if skip_model:
      return
    model = time_train_step(task, data.next_train_batch(), num_steps, seq2seq)
    print(f"train step ({config.model.kind}, {model['device']}): "
          f"{model['tokens_per_sec']:,.0f} tokens/s ({model['step_time'] * 1e3:.1f} ms/step, "
          f"median of {num_steps})")
    ratio = pipe["positions_per_sec"] / model["tokens_per_sec"]
    verdict = "OK" if ratio >= 10 else "TOO SLOW (needs >= 10x)"
    print(f"pipeline / train step = {ratio:.1f}x  {verdict}")
    sys.stdout.flush()
