"""Weights & Biases as a second sink of `MetricWriter` (train.wandb_project; "" = off).

Process 0 only. The run config and the run's first provenance record go in as wandb's run
config. The wandb run id is kept in `<workdir>/wandb_run_id` (any id wandb takes, e.g. one
written by hand to continue another run), so a resumed or requeued run
(same workdir) continues the same wandb run (`resume="allow"`). Without `train.wandb_group`,
runs are grouped by a hash of the config without its seed, so a sweep's seeds of one setting
share a group. Offline (`WANDB_MODE=offline`) the run is kept under `<workdir>/wandb/`;
`wandb sync <workdir>/wandb/offline-run-*` uploads it later.

A kill -9 loses the rows wandb had not written yet (`FLUSH_SECONDS`), those of the checkpoint's
step included; the sink says the last step its run holds (`WandbSink.last_step`: wandb's resume
online, the earlier offline files of the run offline), and the resumed `MetricWriter` sends it
the rows of `metrics.jsonl` after that step (`MetricWriter.start_at`), so wandb gets every row.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import uuid
from typing import Any, Callable, Mapping, Optional

from transformer import paths
from transformer.config import ConfigError
from transformer.train.writers import log

RUN_ID_FILE = "wandb_run_id"
# How often wandb's service writes what it holds to the run's `.wandb` file (its default, 15 s,
# or a full 32 KiB block, lost every row of a short run killed by kill -9). wandb 0.31 has no
# call that writes it at once; the row of the last step logged stays open until a later step
# (or finish) and is not written either.
FLUSH_SECONDS = 1.0
EXTRA = "pip install 'transformer[wandb]'"


def check_available(project: str) -> None:
  """Raises ConfigError (one line) when wandb is asked for and not installed."""
  if not project:
    return
  try:
    import wandb  # noqa: F401
  except ImportError:
    raise ConfigError(f"--config.train.wandb_project={project} needs the wandb package: "
                      f"{EXTRA} (or leave wandb_project empty).") from None


def group_of(config: Mapping[str, Any]) -> str:
  """`cfg-<12 hex>`: the config without its seed (and without the wandb fields), hashed."""
  rest = {k: v for k, v in config.items() if k != "seed"}
  rest["train"] = {k: v for k, v in rest.get("train", {}).items() if not k.startswith("wandb_")}
  return "cfg-" + hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:12]


def run_id(workdir: str, warn: Callable[[str], None]) -> str:
  """The workdir's wandb run id, created (and stored) on the run's first start. A stored id
  wandb would refuse (or a file that is not one line of text) is replaced by a new id, and
  `warn` gets one line saying what was found and the new id."""
  path = paths.join(workdir, RUN_ID_FILE)
  found = None
  if paths.exists(path):
    try:
      found = paths.read_text(path).strip()
    except (UnicodeDecodeError, OSError) as e:
      found = e
    else:
      problem = refused_because(found)
      if problem is None:
        return found
  new = uuid.uuid4().hex[:16]
  paths.write_text(path, new + "\n")
  if found is not None:
    what = (f"is unreadable ({found})" if isinstance(found, Exception) else
            f"holds {found[:60]!r}{'...' if len(found) > 60 else ''}, which {problem}")
    warn(f"{path} {what}; this run logs to a new wandb run, id {new}, now kept there.")
  return new


def refused_because(candidate: str) -> Optional[str]:
  """None when wandb takes `candidate` as a run id (its own rule, `wandb.Settings`), else why
  not. The id file holds one line, so the id must be printable text as well."""
  import wandb  # optional
  if not candidate.isprintable():
    return "is not one line of printable text"
  try:
    wandb.Settings(run_id=candidate)
  except (wandb.errors.UsageError, ValueError) as e:
    return f"wandb refuses as a run id ({str(e).splitlines()[0]})"
  return None


class WandbSink:
  """`log(step, split, metrics)` into one wandb run; `close()` finishes it."""

  def __init__(self, workdir: str, config: Mapping[str, Any], provenance: Optional[Mapping]):
    import wandb  # optional
    train = config["train"]
    self.run = wandb.init(
        project=train["wandb_project"], entity=train["wandb_entity"] or None,
        group=train["wandb_group"] or group_of(config),
        tags=[t.strip() for t in train["wandb_tags"].split(",") if t.strip()] or None,
        id=run_id(workdir, lambda m: log(f"WARNING: {m}")), resume="allow",
        dir=paths.absolute(workdir), config={**config, "provenance": dict(provenance or {})},
        reinit="finish_previous",  # what `True` meant; a bool is deprecated in wandb 0.31
        settings=wandb.Settings(x_transaction_log_flush_interval=FLUSH_SECONDS))
    # The last step the wandb run holds (-1: none): `MetricWriter.start_at` replays the rows
    # of metrics.jsonl after it, and `log` skips the steps up to it (wandb has them).
    self.last_step = (self.run.starting_step - 1 if not self.run.offline else
                      offline_last_step(paths.join(workdir, "wandb"), self.run.id,
                                        self.run.sync_dir))

  def log(self, step: int, split: str, metrics: Mapping[str, Any]) -> None:
    scalars = {f"{split}/{k}": float(v) for k, v in metrics.items() if not isinstance(v, str)}
    if scalars and step > self.last_step:
      self.run.log(scalars, step=int(step))

  def close(self) -> None:
    self.run.finish()


def offline_last_step(wandb_dir: str, run: str, this_sync_dir: str = "") -> int:
  """The last step whose history row an earlier process of wandb run `run` wrote offline under
  `wandb_dir` (its `offline-run-*/run-<run>.wandb` files but the one in `this_sync_dir`, the
  running process's); -1 for none. wandb writes a row once the next step begins, about once a
  second (`FLUSH_SECONDS`), so a process killed by kill -9 lost the rows after this one. A file
  this cannot read counts as none, with a warning (its rows are sent again)."""
  from transformer.train.wandb_records import history_steps
  last = -1
  for path in sorted(glob.glob(os.path.join(glob.escape(wandb_dir), "offline-run-*",
                                            f"run-{glob.escape(run)}.wandb"))):
    if this_sync_dir and os.path.dirname(path) == os.path.normpath(this_sync_dir):
      continue
    try:
      last = max([last, *history_steps(path)])
    except Exception as e:  # noqa: BLE001 -- another wandb's format: resend rather than lose
      log(f"WARNING: cannot read the wandb history of {path} ({type(e).__name__}: {e}); the "
          "rows of metrics.jsonl it may hold are sent to wandb again.")
  return last
