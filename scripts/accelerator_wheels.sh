#!/usr/bin/env bash
# The pure-Python wheels a bare GPU host lacks for scripts/accelerator_report.py, downloaded
# into .whl/ (git ignores it: add `/.whl/` to .git/info/exclude or .gitignore) for Python 3.12:
# ml_collections (the configs) and importlib_resources. Versions: the ones pyproject.toml's
# ranges admit and CI installs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp -d .whl "ml_collections==1.1.0" "importlib_resources==6.5.2"
ls .whl
