"""One set of defaults: each field's default is written once, in its section's dataclass
(transformer/config.py, transformer/optim_config.py), and the main job (configs/default.py)
is those defaults except for the fields it declares in `OVERRIDES`."""

import dataclasses
import typing

from configs import default
from transformer.config import SEED, ExperimentConfig, default_config_dict, from_config_dict


def _dataclass_defaults() -> dict:
  """`{"section.field": default}` read off the dataclasses (rules as a plain dict)."""
  out = {}
  for name, cls in typing.get_type_hints(ExperimentConfig).items():
    if name == "seed":
      continue
    for f in dataclasses.fields(cls):
      out[f"{name}.{f.name}"] = dict(f.default) if f.name == "rules" else f.default
  return out


def _main_job() -> dict:
  c = default.get_config().to_dict()
  return {f"{name}.{field}": value for name, section in c.items() if name != "seed"
          for field, value in section.items()}


def test_the_main_job_is_the_defaults_except_its_declared_overrides():
  defaults, main = _dataclass_defaults(), _main_job()
  assert set(main) == set(defaults), "a config field without a dataclass field, or the reverse"
  differ = {k for k in defaults if main[k] != defaults[k] or type(main[k]) is not type(defaults[k])}
  assert differ == set(default.OVERRIDES), (
      "configs/default.py sets these fields to other values than their dataclass defaults: "
      f"{ {k: (main[k], defaults[k]) for k in sorted(differ)} }; write a default once (in the "
      "dataclass), or declare a deliberate override in configs/default.py's OVERRIDES.")
  assert default.get_config().seed == SEED


def test_the_default_config_dict_validates_to_the_dataclass_defaults():
  """What a run of `default_config_dict()` computes is what the dataclasses say (the rules'
  order aside: a mapping)."""
  validated = from_config_dict(default_config_dict()).to_dict()
  validated["parallel"]["rules"] = dict(validated["parallel"]["rules"])
  flat = {f"{s}.{k}": v for s, section in validated.items() if s != "seed"
          for k, v in section.items()}
  assert flat == _dataclass_defaults() and validated["seed"] == SEED
