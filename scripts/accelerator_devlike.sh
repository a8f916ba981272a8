#!/usr/bin/env bash
# Runs the accelerator report's exact device command line, install step included, on this CPU
# machine in a fresh virtualenv holding only what the GPU image holds (jax 0.11.2 on CPU in
# place of the CUDA build; flax, optax, orbax-checkpoint, tensorboard, tokenizers, tiktoken,
# safetensors, numpy, scipy, matplotlib, pillow, sacrebleu, sentencepiece, absl-py, etils,
# pyyaml; no ml-collections, TensorFlow or TFDS) plus the carried wheels of .whl/
# (scripts/accelerator_wheels.sh), installed with --no-index, in a copy of the tree without .git.
#   bash scripts/accelerator_devlike.sh [PROFILE]     (default tiny; a venv under $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-tiny}
python=${PYTHON:-python3.12}
work=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-devlike.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "jax==0.11.2" "jaxlib==0.11.2" \
  "flax>=0.12.8,<0.13" optax orbax-checkpoint tensorboard tokenizers tiktoken safetensors numpy \
  scipy matplotlib pillow sacrebleu sentencepiece absl-py etils pyyaml msgpack protobuf psutil \
  setuptools wheel
for absent in ml_collections tensorflow tensorflow_datasets; do
  if "$work/venv/bin/python" -c "import $absent" 2>/dev/null; then
    echo "devlike: $absent is installed, but the device image lacks it" >&2; exit 1
  fi
done
[ -d .whl ] || bash scripts/accelerator_wheels.sh
mkdir "$work/tree"
git ls-files -co --exclude-standard -z | xargs -0 tar -cf - | tar -xf - -C "$work/tree"
cp -r .whl "$work/tree/"
cd "$work/tree"
export PATH="$work/venv/bin:$PATH" TRANSFORMER_CACHE_DIR="$work/cache"
# The device command, as README's "Accelerator report" gives it:
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile .whl/*.whl -e . \
  && python3 scripts/accelerator_report.py run --out="$work/out" --profile="$profile"
ls "$work/out"
