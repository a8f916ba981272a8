"""transformer: a JAX/Flax research codebase for Transformers."""

import os

# The checkout holding launch.py, configs/ and experiments/ (the package is installed editable).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
