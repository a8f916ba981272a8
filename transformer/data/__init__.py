"""Input: TFDS builders, tokenizers, packing and the per-process batch pipeline."""
