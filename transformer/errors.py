"""Errors a user can act on. `launch.py` prints their message and exits non-zero, without a
traceback: the message itself says what went wrong and what to do."""


class ConfigError(ValueError):
  """A config value is invalid; the message says which field and how to fix it."""


class RunError(RuntimeError):
  """A run stopped for a reason outside the config's values (training diverged, a checkpoint
  could not be read or written, a directory is not writable)."""
