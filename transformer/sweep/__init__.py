"""Sweeps: points declared in a file (`points`), run locally (`local`) or as a SLURM array
(`slurm`). `--mode=sweep` and `--mode=report` are driven from `transformer.cli.sweep_and_report`;
the report itself is `transformer.report`.

A sweep file needs only `from transformer.sweep import product, zip_axes, preset`.
"""

from transformer.sweep.points import preset, product, zip_axes

__all__ = ["preset", "product", "zip_axes"]
