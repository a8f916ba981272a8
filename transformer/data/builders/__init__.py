"""TFDS builders of our own. Importing this package registers them with TFDS."""

from transformer.data.builders.digits import SklearnDigits, digits_builder
from transformer.data.builders.local_text import LocalText, local_text_builder
from transformer.data.builders.stdlib_package import StdlibPackage, stdlib_package_builder
from transformer.data.builders.synthetic import TASKS as SYNTHETIC_TASKS
from transformer.data.builders.synthetic import SyntheticSeq2seq, synthetic_builder

__all__ = ["SklearnDigits", "digits_builder", "LocalText", "local_text_builder", "StdlibPackage",
           "stdlib_package_builder", "SYNTHETIC_TASKS", "SyntheticSeq2seq", "synthetic_builder"]
