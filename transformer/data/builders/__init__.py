"""TFDS builders of our own. Importing this package registers them with TFDS."""

from transformer.data.builders.local_text import LocalText, local_text_builder

__all__ = ["LocalText", "local_text_builder"]
