"""--config.train.profile_steps: a jax.profiler trace of the chosen train steps in the workdir."""

import glob

import pytest

from configs.default import get_config
from tests.test_train import _tiny_config
from transformer.config import ConfigError, from_config_dict
from transformer.train.loop import train_and_evaluate


def test_the_loop_writes_a_trace_of_the_profiled_steps(tiny_corpus, tmp_path, capsys):
  cfg = _tiny_config(tiny_corpus, num_steps=3, log_every=3, eval_every=3, profile_steps="2,3")
  train_and_evaluate(cfg, str(tmp_path))
  traces = glob.glob(str(tmp_path / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))
  assert len(traces) == 1
  assert "profile of steps 2..3" in capsys.readouterr().out


@pytest.mark.parametrize("spec,expected", [("", None), ("4", (4, 4)), ("2, 5", (2, 5))])
def test_profile_steps_parse(spec, expected):
  c = get_config("smoke")
  c.train.profile_steps = spec
  assert from_config_dict(c).train.profile_range == expected


@pytest.mark.parametrize("spec", ["0,3", "5,2", "a,b", "1,2,3"])
def test_bad_profile_steps_are_refused_before_anything_runs(spec):
  c = get_config("smoke")
  c.train.profile_steps = spec
  with pytest.raises(ConfigError, match="profile_steps"):
    from_config_dict(c)


def test_negative_prefetch_is_refused():
  c = get_config("smoke")
  c.train.prefetch = -1
  with pytest.raises(ConfigError, match="prefetch"):
    from_config_dict(c)
