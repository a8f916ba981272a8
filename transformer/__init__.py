"""transformer: a JAX/Flax research codebase for Transformers."""
