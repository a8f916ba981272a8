"""The `optim` section of a config: which optimizer, its hyperparameters, the learning-rate
schedule (transformer/train/optim.py builds them). Re-exported by `transformer.config`."""

from __future__ import annotations

import dataclasses

from transformer.errors import ConfigError, check_choice, check_positive

DECAYS = ("cosine", "linear", "constant", "rsqrt", "wsd")
COOLDOWN_SHAPES = ("linear", "1-sqrt")  # optim.cooldown_shape: the end of decay=wsd
DECAY_MASKS = ("role", "ndim")  # optim.decay_mask, see transformer/train/optim.py
# optim.name: the optimizers transformer/train/optim.py builds; OptimConfig.OPTIMIZER_FIELDS
# names the fields each one reads.
OPTIMIZERS = ("adamw", "adam", "sgd", "lion", "adafactor", "muon")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """The optimizer (`name`) and its learning-rate schedule (transformer/train/optim.py).

  Every optimizer's hyperparameters are flat fields of this one section (`--config.optim.b2`),
  so a sweep axis or an override names them the same way whatever the optimizer. Each
  optimizer reads the schedule fields and `clip_norm` plus its own fields
  (`OPTIMIZER_FIELDS`); a field it does not read must keep its default: a changed one is an
  error naming what the optimizer reads (`--config.optim.b2=0.95` with `name=sgd`). A default
  left in place is fine, so switching the optimizer needs one flag. Likewise
  `decay_fraction` and `cooldown_shape` are read by `decay=wsd` only.
  """
  name: str = "adamw"  # adamw | adam | sgd | lion | adafactor | muon
  learning_rate: float = 3e-3  # the peak learning rate
  warmup_steps: int = 50  # linear warm-up from 0 to the peak
  decay: str = "cosine"  # after the warm-up: cosine | linear | constant | rsqrt | wsd
  end_lr_factor: float = 0.05  # the last step's learning rate as a fraction of the peak
  # decay=wsd (warmup-stable-decay, Hägele et al. 2024): the peak holds until the last
  # `decay_fraction` of the steps, which decay to end_lr_factor * peak, linearly or as 1-sqrt.
  decay_fraction: float = 0.2
  cooldown_shape: str = "linear"
  b1: float = 0.9  # adamw, adam, lion; muon: its Adam's b1
  b2: float = 0.98  # adamw, adam, lion; muon: its Adam's b2
  eps: float = 1e-9  # adamw, adam, muon
  weight_decay: float = 0.1  # decoupled: adamw, lion, adafactor, muon (on decay_mask's leaves)
  clip_norm: float = 1.0  # global gradient-norm clipping, before the optimizer; 0 = off
  # Which leaves weight decay applies to (transformer/train/optim.py): role (kernels and
  # embedding tables; never biases, norm scales, DyT alpha, Admin omega) | ndim (ndim >= 2,
  # the rule of runs made before `role`; a saved config without this field was made with it).
  decay_mask: str = "role"
  momentum: float = 0.9  # sgd: heavy-ball momentum (0 = plain SGD)
  nesterov: bool = False  # sgd: Nesterov momentum (needs momentum > 0)
  muon_momentum: float = 0.95  # muon: beta of its (Nesterov) momentum on matrices
  muon_ns_steps: int = 5  # muon: Newton-Schulz iterations
  adafactor_decay_rate: float = 0.8  # adafactor: second-moment decay, 1 - step^-decay_rate
  adafactor_clipping: float = 1.0  # adafactor: update clipping threshold (0 = none)
  adafactor_min_dim: int = 128  # adafactor: factor the second moment of dims at least this

  SCHEDULE_FIELDS = ("name", "learning_rate", "warmup_steps", "decay", "end_lr_factor",
                     "decay_fraction", "cooldown_shape", "clip_norm")
  OPTIMIZER_FIELDS = {
      "adamw": ("b1", "b2", "eps", "weight_decay", "decay_mask"),
      "adam": ("b1", "b2", "eps"),
      "sgd": ("momentum", "nesterov"),
      "lion": ("b1", "b2", "weight_decay", "decay_mask"),
      "adafactor": ("adafactor_decay_rate", "adafactor_clipping", "adafactor_min_dim",
                    "weight_decay", "decay_mask"),
      "muon": ("muon_momentum", "muon_ns_steps", "b1", "b2", "eps", "weight_decay",
               "decay_mask"),
  }

  def __post_init__(self):
    s = "optim"
    check_choice(s, "name", self.name, OPTIMIZERS)
    check_choice(s, "decay", self.decay, DECAYS)
    check_choice(s, "cooldown_shape", self.cooldown_shape, COOLDOWN_SHAPES)
    check_choice(s, "decay_mask", self.decay_mask, DECAY_MASKS)
    check_positive(s, "learning_rate", self.learning_rate)
    for f in ("warmup_steps", "end_lr_factor", "eps", "weight_decay", "clip_norm",
              "adafactor_clipping"):
      check_positive(s, f, getattr(self, f), allow_zero=True)
    for f in ("b1", "b2", "momentum", "muon_momentum"):
      if not 0.0 <= getattr(self, f) < 1.0:
        raise ConfigError(f"--config.optim.{f}={getattr(self, f)!r} must be in [0, 1).")
    if not 0.0 <= self.decay_fraction <= 1.0:
      raise ConfigError(f"--config.optim.decay_fraction={self.decay_fraction!r} must be in "
                        "[0, 1] (the fraction of the steps that decay=wsd decays over).")
    for f in ("muon_ns_steps", "adafactor_min_dim", "adafactor_decay_rate"):
      check_positive(s, f, getattr(self, f))
    if self.nesterov and not self.momentum:
      raise ConfigError("--config.optim.nesterov=True needs --config.optim.momentum > 0.")
    self._check_unread_fields()

  def _check_unread_fields(self) -> None:
    """A field the optimizer (or the schedule) does not read must keep its default."""
    reads = self.SCHEDULE_FIELDS + self.OPTIMIZER_FIELDS[self.name]
    if self.decay != "wsd":
      reads = tuple(f for f in reads if f not in ("decay_fraction", "cooldown_shape"))
    for f in dataclasses.fields(self):
      if f.name not in reads and getattr(self, f.name) != f.default:
        reader = (f"optim.name={self.name!r}" if f.name not in self.SCHEDULE_FIELDS
                  else f"optim.decay={self.decay!r}")
        raise ConfigError(
            f"--config.optim.{f.name}={getattr(self, f.name)!r} is not read by {reader}, which "
            f"reads {', '.join(reads)}; drop the override (default {f.default!r}) or choose "
            "an optimizer or schedule that reads it.")


# The fields added with the optimizers' names (issue 70), as `config.LEGACY_DEFAULTS` holds
# them: a config saved before them was an adamw run with each of them at its default.
OPTIM_FIELDS_ADDED = {f"optim.{f.name}": f.default for f in dataclasses.fields(OptimConfig)
                      if f.name in ("name", "decay_fraction", "cooldown_shape", "momentum",
                                    "nesterov", "muon_momentum", "muon_ns_steps",
                                    "adafactor_decay_rate", "adafactor_clipping",
                                    "adafactor_min_dim")}
