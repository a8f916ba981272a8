"""How tokens are picked when a model generates: one frozen `Sampling` value.

`--mode=sample` builds it from its flags (`Sampling.from_flags`), the samples written at every
eval build it greedy, and it travels as one value through `transformer.tasks.generate` and
`transformer.tasks.decode` (where it is a static argument of the compiled decoding: hashable,
and the same value reuses one program). It is validated here and nowhere else: a value out of
range is a one-line `CommandLineError` naming the flag that sets it.

This module imports nothing heavy (no JAX), so the command line checks flags with it before
any compilation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from transformer.errors import CommandLineError

# Each field's `launch.py --mode=sample` flag (the name its errors give).
FLAGS = {"max_new": "max_new_tokens", "temperature": "temperature", "top_k": "top_k",
         "top_p": "top_p", "beams": "beam_size"}


@dataclasses.dataclass(frozen=True)
class Sampling:
  """The decoding knobs.

  max_new      tokens to generate (>= 1).
  temperature  softmax temperature (>= 0); 0 is greedy (argmax).
  top_k        sample among the k most likely tokens only (>= 0; 0 = all).
  top_p        nucleus: the smallest set of most likely tokens whose probability reaches
               top_p (0 < top_p <= 1; 1 = all).
  beams        beam search with this many beams (>= 1; 1 = greedy or sampling). Beam search
               is for kinds that decode a source (`transformer.kinds`: generative "seq2seq").
  """
  max_new: int = 200
  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0
  beams: int = 1

  def __post_init__(self):
    for name, least in (("max_new", 1), ("top_k", 0), ("beams", 1)):
      value = getattr(self, name)
      if value < least:
        raise CommandLineError(f"--{FLAGS[name]}={value}: must be at least {least}.")
    if not math.isfinite(self.temperature) or self.temperature < 0:
      raise CommandLineError(f"--temperature={self.temperature}: must be >= 0 (0 = greedy).")
    if not 0 < self.top_p <= 1:
      raise CommandLineError(f"--top_p={self.top_p}: must be in (0, 1] (1 = all tokens).")

  @classmethod
  def from_flags(cls, values: Mapping[str, Any]) -> "Sampling":
    """The value `launch.py`'s flags give (`values`: flag name -> value; a flag not there, or
    None, keeps the field's default)."""
    return cls(**{field: values[flag] for field, flag in FLAGS.items()
                  if values.get(flag) is not None})

  def as_flags(self) -> dict:
    """`{flag name: value}`, the inverse of `from_flags` (the lines of `samples.txt`)."""
    return {flag: getattr(self, field) for field, flag in FLAGS.items()}
