"""Config validation and command-line overrides."""

import os
import subprocess
import sys

import pytest

from configs.default import get_config
from transformer.config import ConfigError, flat_config, from_config_dict
from transformer.cli.launch import default_workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_default_config_validates_with_every_field_present():
  cfg = from_config_dict(get_config(), vocab_size=259)
  assert cfg.model.norm_placement == "pre"
  assert cfg.model.head_dim == cfg.model.d_model // cfg.model.num_heads
  assert from_config_dict(get_config("smoke")).train.num_steps < cfg.train.num_steps


def test_default_config_lists_every_field_a_run_can_override():
  """`--config.<section>.<field>=...` only reaches fields the config file defines: every field
  of the validated config is in configs/default.py (built from the dataclasses)."""
  listed = set(flat_config(get_config().to_dict()))
  validated = set(flat_config(from_config_dict(get_config(), vocab_size=259).to_dict()))
  missing = {f for f in validated - listed
             if not f.startswith("parallel.rules")}  # a mapping: listed per logical axis
  assert not missing, f"add to configs/default.py: {sorted(missing)}"


@pytest.mark.parametrize("section,field,value,message", [
    ("model", "norm_placement", "middle", "norm_placement"),
    ("model", "num_heads", 5, "not divisible"),
    ("model", "attention_dropout_rate", 0.1, "attention_impl=reference"),
    ("optim", "decay", "step", "decay"),
    ("train", "batch_size", 0, "batch_size"),
    ("model", "d_model", "wide", "expected int"),
])
def test_invalid_values_name_the_field(section, field, value, message):
  d = get_config().to_dict()  # a plain dict: ConfigDict's own type checks are not under test
  d[section][field] = value
  with pytest.raises(ConfigError, match=message):
    from_config_dict(d)


def test_unknown_field_in_a_config_file_is_rejected():
  d = get_config().to_dict()
  d["model"]["nrom_placement"] = "post"
  with pytest.raises(ConfigError, match="nrom_placement"):
    from_config_dict(d)


def _launch(*args, timeout=120):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout, env=env)


def test_unknown_override_key_is_rejected_before_anything_runs(tmp_path):
  r = _launch("--config.model.nrom_placement=post", f"--workdir={tmp_path / 'w'}")
  assert r.returncode != 0
  assert "nrom_placement" in r.stderr
  assert not (tmp_path / "w").exists()


def test_invalid_override_value_gives_a_config_error(tmp_path):
  r = _launch("--config.model.norm_placement=middle", f"--workdir={tmp_path / 'w'}")
  assert r.returncode != 0
  assert "Config error" in r.stderr and "norm_placement" in r.stderr
  assert not (tmp_path / "w").exists()


def test_override_reaches_the_validated_config():
  from ml_collections import config_flags  # noqa: F401  (the flag machinery under test)
  c = get_config()
  with c.unlocked():
    c.model.norm_placement = "post"
  assert from_config_dict(c).model.norm_placement == "post"


def test_default_workdir_separates_overridden_runs():
  assert default_workdir("configs/default.py", ["launch.py"]) == os.path.join("runs", "default")
  a = default_workdir("configs/default.py",
                      ["launch.py", "--config.model.norm_placement=post"])
  assert a == os.path.join("runs", "default+model.norm_placement=post")
  assert default_workdir("configs/default.py:smoke", []) == os.path.join("runs", "default-smoke")
