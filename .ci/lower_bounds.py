"""Prints pip constraints that pin every dependency of pyproject.toml (core, and the extras
named on the command line) to its lower bound: `name==X` for each `name>=X`.

CI installs the project with these on the oldest Python it supports, so the lower ends of the
ranges are installed and run together, not only the newest releases pip would pick.
"""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# jax pins jaxlib to a window ending at its own version; pinning it too gives the oldest pair.
SAME_AS = {"jaxlib": "jax"}


def requirements(extras: list[str]) -> list[str]:
  project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
  reqs, todo, seen = list(project["dependencies"]), list(extras), set()
  while todo:  # `transformer[digits,wandb]` inside an extra names those extras too
    extra = todo.pop()
    if extra in seen:
      continue
    seen.add(extra)
    for req in project["optional-dependencies"][extra]:
      named = re.match(r"transformer\[([^\]]+)\]", req)
      todo += named.group(1).split(",") if named else []
      reqs.append(req)
  return reqs


def lower_bounds(reqs: list[str]) -> dict[str, str]:
  pins = {}
  for req in reqs:
    spec = req.split(";")[0]
    name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0)
    low = re.search(r">=\s*([0-9][^,\s]*)", spec)
    if name != "transformer" and low:  # `transformer[digits]`: its extras are read above
      pins[name] = low.group(1)
  for name, source in SAME_AS.items():
    if source in pins:
      pins[name] = pins[source]
  return pins


if __name__ == "__main__":
  for name, version in lower_bounds(requirements(sys.argv[1:])).items():
    print(f"{name}=={version}")
