"""Reading wandb offline run files in tests: transformer/train/wandb_records.py's reader, and
what the tests ask of it (rows once wandb's service has written them, the run record)."""

import json
import time

from transformer.train.wandb_records import history_steps, records


def settled_history_steps(path: str, key: str, timeout_s: float = 30.0) -> list[int]:
  """`history_steps` once the rows have reached the file, for a run finished in this process.

  wandb's service process writes the `.wandb` file, flushing on an interval
  (`wandb_writer.FLUSH_SECONDS`); once in CI, on 2 busy cores, the file read right after
  `run.finish()` returned held no history row yet. Waits at most `timeout_s` for one.
  """
  deadline = time.monotonic() + timeout_s
  steps = history_steps(path, key)
  while not steps and time.monotonic() < deadline:
    time.sleep(0.2)
    steps = history_steps(path, key)
  return steps


def run_of(path: str):
  """The file's run record (run_id, run_group, tags, config.update)."""
  return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")


def history_rows(path: str) -> dict[int, dict]:
  """`{step: {key: value}}` of every history row of `path` (wandb's own `_`-keys left out)."""
  rows = {}
  for r in records(path):
    if r.WhichOneof("record_type") != "history":
      continue
    items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
    step = int(r.history.step.num) if r.history.HasField("step") else int(items["_step"])
    assert step not in rows, f"{path}: step {step} twice"
    rows[step] = {k: v for k, v in items.items() if not k.startswith("_")}
  return rows
