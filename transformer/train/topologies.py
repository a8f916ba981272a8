"""TPU topologies by the names users type (`v5p-8`, `v5e-256`, `v6e-8`, `v4-8`), for
`--mode=compile` (`transformer.train.compile_for_topology`): each name maps onto the arguments of
`jax.experimental.topologies.get_topology_desc` in one table, `TOPOLOGIES`.

Naming, as Google Cloud sells them: `v5e-N` and `v6e-N` count chips (one TensorCore each);
`v4-N` and `v5p-N` count TensorCores, two per chip, which XLA drives as one "megacore" device,
so `v5p-8` is 4 chips (4 JAX devices). HBM per chip is the data sheet's (Google Cloud TPU
system architecture pages); XLA's own limit is a little lower (e.g. 15.75 GiB of a v5e's 16),
and its over-HBM error names that limit.

This module imports no JAX: `--help` and the flag checks read it before anything starts.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Generation:
  """What every slice of one TPU generation shares."""
  prefix: str  # of the user-facing names: "v5p" in "v5p-8"
  topology_prefix: str  # of get_topology_desc's topology_name: "v5" in "v5:2x2x1"
  chip_config: str  # get_topology_desc's chip_config_name: "megacore" or "default"
  cores_per_chip: int  # the name counts cores: chips = N / cores_per_chip
  hbm_gib: float  # per chip, data sheet
  accelerator_type: str  # how the runtime names the slice, given N: TPU_ACCELERATOR_TYPE


GENERATIONS = {g.prefix: g for g in (
    Generation("v4", "v4", "megacore", 2, 32.0, "v4-{n}"),
    Generation("v5e", "v5e", "default", 1, 16.0, "v5litepod-{n}"),
    Generation("v5p", "v5", "megacore", 2, 95.0, "v5p-{n}"),
    Generation("v6e", "v6e", "default", 1, 32.0, "v6e-{n}"),
)}

# name -> chip grid (get_topology_desc's topology_name after the colon). Single-host slices
# (up to 8 chips on v5e / v6e, 4 on v4 / v5p) have all chips on one host; larger ones use
# hosts of 2x2 chips, as the Cloud TPU VMs do; 3-D slices from 4x4x4 on wrap into a torus.
_GRIDS = {
    "v4-8": "2x2x1", "v4-16": "2x2x2", "v4-32": "2x2x4", "v4-64": "2x4x4", "v4-128": "4x4x4",
    "v4-256": "4x4x8", "v4-512": "4x8x8", "v4-1024": "8x8x8", "v4-2048": "8x8x16",
    "v4-4096": "8x16x16",
    "v5p-8": "2x2x1", "v5p-16": "2x2x2", "v5p-32": "2x2x4", "v5p-64": "2x4x4",
    "v5p-128": "4x4x4", "v5p-256": "4x4x8", "v5p-512": "4x8x8", "v5p-1024": "8x8x8",
    "v5p-2048": "8x8x16", "v5p-4096": "8x16x16", "v5p-8192": "16x16x16",
    "v5e-1": "1x1", "v5e-4": "2x2", "v5e-8": "2x4", "v5e-16": "4x4", "v5e-32": "4x8",
    "v5e-64": "8x8", "v5e-128": "8x16", "v5e-256": "16x16",
    "v6e-1": "1x1", "v6e-4": "2x2", "v6e-8": "2x4", "v6e-16": "4x4", "v6e-32": "4x8",
    "v6e-64": "8x8", "v6e-128": "8x16", "v6e-256": "16x16",
}


@dataclasses.dataclass(frozen=True)
class Topology:
  """One slice: `get_topology_desc(**desc_kwargs(num_slices))` gives its devices."""
  name: str
  generation: Generation
  grid: tuple[int, ...]  # chips along each axis

  @property
  def chips(self) -> int:
    n = 1
    for side in self.grid:
      n *= side
    return n

  @property
  def hbm_gib(self) -> float:
    return self.generation.hbm_gib

  def chips_per_host_bounds(self) -> tuple[int, int, int]:
    bounds = tuple(self.grid) + (1,) * (3 - len(self.grid))
    one_host = self.chips <= 8 // self.generation.cores_per_chip
    return bounds if one_host else (2, 2, 1)

  def wrap(self) -> tuple[bool, bool, bool]:
    """Torus links: 3-D slices of at least 4 chips a side; 2-D ones along sides of 16."""
    sides = tuple(self.grid) + (1,) * (3 - len(self.grid))
    if len(self.grid) == 3:
      return tuple(min(self.grid) >= 4 for _ in sides)
    return tuple(s >= 16 for s in sides[:2]) + (False,)

  def desc_kwargs(self, num_slices: int = 1) -> dict:
    """The arguments of `jax.experimental.topologies.get_topology_desc`."""
    g = self.generation
    return dict(platform="tpu", topology_name=f"{g.topology_prefix}:" + "x".join(
        map(str, self.grid)), chip_config_name=g.chip_config,
                chips_per_host_bounds=self.chips_per_host_bounds(), num_slices=num_slices,
                wrap=self.wrap())

  def accelerator_type(self) -> str:
    return self.generation.accelerator_type.format(n=self.name.split("-")[1])

  def describe(self, num_slices: int = 1) -> str:
    g = self.generation
    chips = f"{self.chips} chip{'s' if self.chips > 1 else ''}"
    per = f" ({g.chip_config}: 2 cores per device)" if g.cores_per_chip == 2 else ""
    slices = f" x {num_slices} slices" if num_slices > 1 else ""
    return (f"{self.name}{slices}: {chips}{per} per slice, "
            f"{'x'.join(map(str, self.grid))} grid, {g.hbm_gib:g} GiB HBM per chip")


TOPOLOGIES: dict[str, Topology] = {
    name: Topology(name, GENERATIONS[name.split("-")[0]], tuple(int(s) for s in grid.split("x")))
    for name, grid in _GRIDS.items()}


def names_help() -> str:
  """The names, grouped by generation, for `--help` and error messages."""
  groups = {}
  for name in TOPOLOGIES:
    prefix, n = name.split("-")
    groups.setdefault(prefix, []).append(n)
  return "; ".join(f"{p}-{{{','.join(ns)}}}" for p, ns in groups.items())


def get(name: str) -> Topology:
  """The topology called `name`; KeyError naming the known ones otherwise."""
  if name not in TOPOLOGIES:
    raise KeyError(f"unknown TPU topology {name!r}; known: {names_help()}")
  return TOPOLOGIES[name]
