"""Every reader of a file a user or a crash can touch, fed random bytes and random truncations
of a good file (hypothesis): it returns, or raises the project's own error in one line (what
launch.py prints with exit status 1 or 2, no traceback), and changes no file (issue 31)."""

import json
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from configs.default import get_config
from transformer import provenance, workdir, workdir_lock
from transformer.config import from_config_dict
from transformer.data import token_file
from transformer.errors import CommandLineError, ConfigError, RunError
from transformer.sweep import points


def _run_dir(root: str) -> str:
  """A workdir and a token-file folder as the project writes them."""
  run = os.path.join(root, "run")
  os.makedirs(run)
  config = from_config_dict(get_config("smoke"))
  with open(os.path.join(run, "config.json"), "w") as f:
    f.write(config.to_json())
  rows = [{"step": s, "split": "train", "loss": 1.0 / s} for s in (1, 2, 3)]
  with open(os.path.join(run, "metrics.jsonl"), "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in rows))
  with open(os.path.join(run, provenance.FILE), "w") as f:
    f.write(json.dumps({"command": "launch.py", "resumed_from": None}) + "\n")
  with open(os.path.join(run, ".lock"), "w") as f:  # a lock record's fields
    f.write(json.dumps({"host": "h", "pid": 1, "since": "2026-01-01T00:00:00+00:00"}) + "\n")
  rng = np.random.default_rng(0)
  docs = [rng.integers(3, 259, size=20) for _ in range(40)]
  token_file.write_token_file(os.path.join(root, "tokens"),
                              {"train": docs, "validation": docs[:8]}, vocab_size=259)
  sweep = os.path.join(root, "sweep")
  os.makedirs(sweep)
  with open(os.path.join(sweep, points.MANIFEST), "w") as f:
    json.dump({"sweep_file": "x.py", "points": []}, f)
  packed = os.path.join(root, "packed")  # a committed study's manifest: sweep.json.xz
  os.makedirs(packed)
  with open(os.path.join(packed, points.MANIFEST), "w") as f:
    json.dump({"sweep_file": "x.py", "config": "c.py", "overrides": [], "points": []}, f)
  points.pack_manifest(packed)
  return root


# Each user-writable file: (its path under the fixture root, the reader a command runs).
READERS = {
    "run/config.json": lambda root: workdir.run_config(os.path.join(root, "run")),
    "run/metrics.jsonl": lambda root: workdir.read_metrics(os.path.join(root, "run")),
    "run/provenance.jsonl": lambda root: provenance.read_records(os.path.join(root, "run")),
    "run/.lock": lambda root: workdir_lock.read_holder(os.path.join(root, "run")),
    "tokens/meta.json": lambda root: token_file.token_file_data(
        os.path.join(root, "tokens"), 8, 4, 0),
    "tokens/train.bin": lambda root: token_file.token_file_data(
        os.path.join(root, "tokens"), 8, 4, 0),
    "sweep/sweep.json": lambda root: points.read_manifest(os.path.join(root, "sweep")),
    "packed/sweep.json.xz": lambda root: points.read_manifest(os.path.join(root, "packed")),
}
_ONE_LINE_ERRORS = (ConfigError, RunError, CommandLineError)


@pytest.fixture(scope="module")
def good_root(tmp_path_factory):
  return _run_dir(str(tmp_path_factory.mktemp("good")))


def _snapshot(root: str) -> dict:
  out = {}
  for folder, _, files in os.walk(root):
    for name in files:
      with open(os.path.join(folder, name), "rb") as f:
        out[os.path.relpath(os.path.join(folder, name), root)] = f.read()
  return out


def _check_reader(good_root: str, name: str, content: bytes) -> None:
  with tempfile.TemporaryDirectory() as root:
    shutil.copytree(good_root, root, dirs_exist_ok=True)
    with open(os.path.join(root, name), "wb") as f:
      f.write(content)
    before = _snapshot(root)
    try:
      READERS[name](root)
    except _ONE_LINE_ERRORS as e:
      assert "\n" not in str(e) and str(e), f"{name}: {e!r}"
    assert _snapshot(root) == before, f"reading {name} changed a file"


_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", sorted(READERS))
@_SETTINGS
@given(data=st.binary(max_size=256))
def test_random_bytes(good_root, name, data):
  _check_reader(good_root, name, data)


@pytest.mark.parametrize("name", sorted(READERS))
@_SETTINGS
@given(cut=st.floats(0, 1), junk=st.binary(max_size=8))
def test_truncated_and_garbled_tail(good_root, name, cut, junk):
  """A write cut short by a kill, and then some bytes that are not UTF-8."""
  with open(os.path.join(good_root, name), "rb") as f:
    good = f.read()
  _check_reader(good_root, name, good[:int(len(good) * cut)] + junk)
