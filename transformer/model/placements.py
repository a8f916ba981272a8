"""The registry of norm placements: what each one asks of the code around the model.

The arrangement itself (where the norm sits in a block) is `transformer.model.block`; this
table holds what a placement needs beyond the block, so that the training loop, tasks and
reports look it up instead of branching on `model.norm_placement`:

  init_profile   what the model's `init` measures on the inputs it is given ("" when init
                 reads nothing off them). A placement that profiles wants a real training
                 batch at init (Admin: Liu et al. 2020 profile the omegas on data), so the
                 training loop hands `init` the run's first batch and then trains on it.

Adding a placement means its branch in `Block._residual`, one `Placement(...)` line here, and
its name in `transformer.config.NORM_PLACEMENTS` (this module refuses to load when the two
lists differ).
"""

from __future__ import annotations

import dataclasses

from transformer.config import NORM_PLACEMENTS
from transformer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Placement:
  name: str
  init_profile: str = ""


PLACEMENTS: dict[str, Placement] = {p.name: p for p in (
    Placement("pre"),
    Placement("post"),
    Placement("peri"),
    Placement("deepnorm"),
    Placement("mix"),
    Placement("admin", init_profile="Admin's omegas (Liu et al. 2020)"),
    Placement("hybrid"),
    Placement("hybrid_v0"),  # this project's earlier reading of HybridNorm (block.py)
)}

if tuple(PLACEMENTS) != NORM_PLACEMENTS:
  raise ImportError(f"transformer.model.placements declares {tuple(PLACEMENTS)}, but "
                    f"transformer.config.NORM_PLACEMENTS lists {NORM_PLACEMENTS}: make them "
                    "the same, in the same order.")


def get(name: str) -> Placement:
  """The placement called `name`; a ConfigError naming the known ones otherwise."""
  if name not in PLACEMENTS:
    raise ConfigError(f"--config.model.norm_placement={name!r} is not supported; choose one "
                      f"of {list(PLACEMENTS)}.")
  return PLACEMENTS[name]


def init_profile(name: str) -> str:
  """What placement `name`'s init profiles on its inputs; "" when it reads nothing off them
  (then any inputs of the right shape give the same params)."""
  return get(name).init_profile
