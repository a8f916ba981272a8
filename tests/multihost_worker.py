"""One process of the multi-host test (`tests/test_multihost.py`); also runnable by hand:

  XLA_FLAGS=--xla_force_host_platform_device_count=2 python tests/multihost_worker.py \
      --workdir=/tmp/w --coordinator_address=127.0.0.1:12345 --num_processes=2 --process_id=0

Trains a tiny decoder LM with `transformer.train.loop.train_and_evaluate` on a synthetic,
process-count-independent stream: global batch i is a fixed function of (seed, i), and each
process feeds its own rows of it, so a run with 2 processes x 2 devices must reproduce a run
with 1 process x 4 devices.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GLOBAL_BATCH, SEQ_LEN, EVAL_BATCHES = 8, 16, 2


def make_config(num_steps: int = 8):
  from configs.default import get_config
  from transformer.config import from_config_dict
  c = get_config("smoke")
  with c.unlocked():
    c.data.seq_len, c.data.eval_batches = SEQ_LEN, EVAL_BATCHES
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 32, 4, 2, 64
    c.model.dropout_rate = 0.1
    # No projection biases: the key bias's true gradient is exactly 0 (softmax ignores a shift),
    # so AdamW turns its float rounding noise into full-size steps that differ between layouts.
    c.model.use_bias = False
    c.train.batch_size, c.train.num_steps = GLOBAL_BATCH, num_steps
    c.train.log_every, c.train.eval_every = 2, 4
    c.checkpoint.every_steps = 2
  return from_config_dict(c)


class SyntheticData:
  """Random token rows; `train_iterator` is a checkpointable tf.data iterator."""

  def __init__(self, seed: int):
    import jax
    import tensorflow as tf
    from transformer.data.tokenizers import ByteTokenizer
    self.tokenizer = ByteTokenizer()
    n, pid = jax.process_count(), jax.process_index()
    self.batch_size = rows = GLOBAL_BATCH // n

    def global_batch(i, salt):
      tokens = tf.random.stateless_uniform([GLOBAL_BATCH, SEQ_LEN + 1], seed=[seed + salt, i],
                                           minval=3, maxval=259, dtype=tf.int32)
      mine = tokens[pid * rows:(pid + 1) * rows]
      return {"inputs": mine[:, :-1], "targets": mine[:, 1:],
              "weights": tf.ones([rows, SEQ_LEN], tf.float32)}

    self.train_iterator = iter(tf.data.Dataset.range(1 << 40).map(lambda i: global_batch(i, 0)))
    self._eval = tf.data.Dataset.range(EVAL_BATCHES).map(lambda i: global_batch(i, 1))

  def next_train_batch(self):
    return {k: v.numpy() for k, v in next(self.train_iterator).items()}

  def eval_batches(self, max_batches: int = 0):
    # Uneven on purpose: process i has i fewer eval batches, as real per-process shards can;
    # the loop must pad the shorter ones instead of hanging in a collective.
    return self._eval.take(EVAL_BATCHES - jax_process_index()).as_numpy_iterator()


def jax_process_index():
  import jax
  return jax.process_index()


def make_data_and_task(config):
  """The LM task, on synthetic data instead of lm_data (a task needs only the data's facts)."""
  from transformer import kinds
  from transformer.data.facts import DataFacts
  data = SyntheticData(config.seed)
  return data, kinds.build_task(config, DataFacts.of_tokenizer(data.tokenizer))


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--workdir", required=True)
  p.add_argument("--stop_after", type=int, default=None)
  p.add_argument("--num_steps", type=int, default=8)
  p.add_argument("--strategy", default="jit", choices=["jit", "pmap"])
  p.add_argument("--heartbeat_timeout", type=int, default=45)
  p.add_argument("--fail_at_step", type=int, default=0,
                 help="raise an error when fetching this step's batch (0 = never)")
  p.add_argument("--coordinator_address", default=None)
  p.add_argument("--num_processes", type=int, default=None)
  p.add_argument("--process_id", type=int, default=None)
  p.add_argument("--print_cpu_peak", action="store_true",
                 help="print this process's measured matmul FLOP/s instead of training")
  args = p.parse_args()
  from transformer.cli.launch import exit_at_once_on_failure, initialize_distributed
  initialize_distributed(args.coordinator_address, args.num_processes, args.process_id,
                         heartbeat_timeout=args.heartbeat_timeout)
  import jax
  from transformer.train.loop import train_and_evaluate
  print(f"process {jax.process_index()} of {jax.process_count()}: "
        f"{jax.local_device_count()} local / {jax.device_count()} devices", flush=True)
  if args.print_cpu_peak:
    from transformer.train import peaks
    print(f"matmul FLOP/s: {peaks.measure_matmul_flops(size=512, repeats=3):.6e}", flush=True)
    return
  config = make_config(args.num_steps)
  config = dataclasses.replace(config, parallel=dataclasses.replace(config.parallel,
                                                                    strategy=args.strategy))
  data, task = make_data_and_task(config)
  if args.fail_at_step:
    fetch, calls = data.next_train_batch, [0]

    def failing_fetch():
      calls[0] += 1
      if calls[0] == args.fail_at_step:
        raise RuntimeError(f"injected failure at step {calls[0]}")
      return fetch()
    data.next_train_batch = failing_fetch
  with exit_at_once_on_failure():
    train_and_evaluate(config, args.workdir, stop_after=args.stop_after, task=task,
                       data=data)


if __name__ == "__main__":
  main()
