"""Weights & Biases as a second sink of `MetricWriter` (train.wandb_project; "" = off).

Process 0 only. The run config and the run's first provenance record go in as wandb's run
config. The wandb run id is kept in `<workdir>/wandb_run_id`, so a resumed or requeued run
(same workdir) continues the same wandb run (`resume="allow"`). Without `train.wandb_group`,
runs are grouped by a hash of the config without its seed, so a sweep's seeds of one setting
share a group. Offline (`WANDB_MODE=offline`) the run is kept under `<workdir>/wandb/`;
`wandb sync <workdir>/wandb/offline-run-*` uploads it later.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Mapping, Optional

from transformer import paths
from transformer.config import ConfigError

RUN_ID_FILE = "wandb_run_id"
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


def run_id(workdir: str) -> str:
  """The workdir's wandb run id, created (and stored) on the run's first start."""
  path = paths.join(workdir, RUN_ID_FILE)
  if paths.exists(path):
    try:
      saved = paths.read_text(path).strip()
    except (UnicodeDecodeError, OSError):
      saved = ""
    if saved.isalnum() and saved.isascii():
      return saved  # a torn or edited file falls through to a new id, written again
  new = uuid.uuid4().hex[:16]
  paths.write_text(path, new + "\n")
  return new


class WandbSink:
  """`log(step, split, metrics)` into one wandb run; `close()` finishes it."""

  def __init__(self, workdir: str, config: Mapping[str, Any], provenance: Optional[Mapping]):
    import wandb  # optional
    train = config["train"]
    self.run = wandb.init(
        project=train["wandb_project"], entity=train["wandb_entity"] or None,
        group=train["wandb_group"] or group_of(config),
        tags=[t.strip() for t in train["wandb_tags"].split(",") if t.strip()] or None,
        id=run_id(workdir), resume="allow", dir=paths.absolute(workdir),
        config={**config, "provenance": dict(provenance or {})}, reinit=True)

  def log(self, step: int, split: str, metrics: Mapping[str, Any]) -> None:
    scalars = {f"{split}/{k}": float(v) for k, v in metrics.items() if not isinstance(v, str)}
    if scalars:
      self.run.log(scalars, step=int(step))

  def close(self) -> None:
    self.run.finish()
