"""Regenerates the README's "what fits where" table with `--mode=compile`'s code
(`transformer.train.compile_for_topology`): each GPT-2 preset's train step compiled for v5e-8,
v5p-8 and v6e-8 (no TPU needed, the `[tpu]` extra is), data vs fsdp layout, remat none vs full;
each cell the GiB per device XLA's memory analysis gives, or OOM with the GiB XLA said it needed.

  python scripts/fits_table.py                   # prints the table (and a line per compile)
  python scripts/fits_table.py --write_readme    # also replaces it in README.md

Settings every cell shares are printed above the table (global batch, bfloat16 compute,
scanned layers). One compile at a time; on 2 busy cores the whole table took 30 minutes (measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only TPU devices; nothing runs here
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from configs import gpt2_1b, gpt2_350m, gpt2_small  # noqa: E402
from scripts.readme_blocks import MarkerError, replace_block  # noqa: E402
from transformer.config import from_config_dict  # noqa: E402
from transformer.errors import RunError  # noqa: E402
from transformer.train import topologies  # noqa: E402
from transformer.train import compile_for_topology as aot  # noqa: E402

PRESETS = {"gpt2_small": gpt2_small, "gpt2_350m": gpt2_350m, "gpt2_1b": gpt2_1b}
TOPOLOGIES = ("v5e-8", "v5p-8", "v6e-8")
LAYOUTS = ("data", "fsdp")
REMATS = ("none", "full")
GLOBAL_BATCH = 32  # 4 rows per device on 8 chips, 8 on v5p-8's 4
# Shared by every cell: what a TPU run would use (bfloat16 compute, float32 parameters), and
# scanned layers, which compile one block instead of 12-24 (minutes less per cell).
SETTINGS = {"model.dtype": "bfloat16", "model.scan_layers": True,
            "train.batch_size": GLOBAL_BATCH}
START, END = "<!-- fits-table:start -->", "<!-- fits-table:end -->"


def preset_config(name: str):
  c = PRESETS[name].get_config()
  for key, value in SETTINGS.items():
    section, field = key.split(".")
    c[section][field] = value
  return from_config_dict(c)


def cell(config, topology: str, devices) -> tuple[str, float]:
  """The cell's text and the compile's seconds."""
  t0 = time.perf_counter()
  try:
    _, _, (step,) = aot.compile_steps(config, devices, where=topology)
    text = f"{step.total_bytes / aot.GIB:.2f}"
  except aot.OverHbm as e:
    text = f"OOM ({e.needed / aot.GIB:.1f})" if e.needed else "OOM"
  except RunError:
    text = "compiler error"
  return text, time.perf_counter() - t0


def header(devices: dict) -> list[str]:
  """The lines above the table: what a cell is and the settings every cell shares."""
  import jax
  hbm = ", ".join(f"{t} {topologies.get(t).hbm_gib:g}" for t in TOPOLOGIES)
  rows = ", ".join(f"{t} {GLOBAL_BATCH // len(devices[t])}" for t in TOPOLOGIES)
  settings = ", ".join(f"{k}={v}" for k, v in SETTINGS.items())
  return [f"GiB per device of the train step (XLA's memory analysis: arguments + outputs - "
          f"aliased + temporaries); OOM: over the chip's HBM, with the GiB XLA said it needed. "
          f"HBM per chip: {hbm} GiB. Every cell: {settings}; the preset's other fields. "
          f"Rows per device: {rows} (v5p-8 has 4 chips). "
          f"jax {jax.__version__}, libtpu {_libtpu_version()}.", "",
          "| preset | layout | remat | " + " | ".join(TOPOLOGIES) + " |",
          "|---|---|---|" + "---|" * len(TOPOLOGIES)]


def table(log=print) -> list[str]:
  devices = {t: aot.topology_devices(topologies.get(t)) for t in TOPOLOGIES}
  lines = header(devices)
  for name in PRESETS:
    base = preset_config(name)
    for layout in LAYOUTS:
      for remat in REMATS:
        config = aot.with_layout(base, remat=remat, layout=layout)
        cells = []
        for topology in TOPOLOGIES:
          text, seconds = cell(config, topology, devices[topology])
          log(f"  {name} {layout} remat={remat} {topology}: {text} ({seconds:.0f} s)")
          cells.append(text)
        lines.append(f"| {name} | {layout} | {remat} | " + " | ".join(cells) + " |")
  return lines


def _libtpu_version() -> str:
  import importlib.metadata
  return importlib.metadata.version("libtpu")


def write_readme(lines: list[str], path: str = os.path.join(ROOT, "README.md")) -> None:
  try:
    replace_block(path, START, END, lines)
  except MarkerError as e:
    raise SystemExit(str(e)) from None


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--write_readme", action="store_true",
                      help="replace the table between the fits-table markers in README.md")
  args = parser.parse_args()
  aot.check_compiler()
  t0 = time.perf_counter()
  lines = table(log=lambda line: print(line, file=sys.stderr, flush=True))
  print("\n".join(lines))
  print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
  if args.write_readme:
    write_readme(lines)


if __name__ == "__main__":
  main()
