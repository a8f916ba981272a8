"""`--config.train.profile_steps=a,b`: a `jax.profiler` trace of train steps a..b.

The trace lands in `<workdir>/profile/plugins/profile/<timestamp>/` (`*.xplane.pb` for xprof or
TensorBoard's profile plugin, `*.trace.json.gz` for Perfetto). Steps are numbered as the
train log numbers them (the first step is 1); each traced step is annotated with its number,
so xprof's step-time view can split the trace into steps. Compilation happens in the first
step: start at step 2 or later to see the steady state.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import jax

from transformer import paths
from transformer.train.writers import log


class StepProfiler:
  """Starts a trace before step `first` and stops it after step `last` has finished.

  Use as a context manager around the loop (a run that ends early still closes the trace),
  calling `before_step(n)` just before step n is dispatched and `after_step(n, outputs)` after.
  `steps=None` does nothing.
  """

  def __init__(self, steps: Optional[tuple[int, int]], workdir: str):
    self.first, self.last = steps or (0, -1)
    # A URL workdir's traces go to its local mirror: the profiler writes local files.
    self.directory = os.path.join(paths.local_mirror(workdir), "profile")
    self._tracing = False
    self._annotation: Optional[contextlib.AbstractContextManager] = None

  def __enter__(self) -> "StepProfiler":
    return self

  def before_step(self, step: int) -> None:
    if not self.first <= step <= self.last:
      return
    if not self._tracing:
      os.makedirs(self.directory, exist_ok=True)
      jax.profiler.start_trace(self.directory)
      self._tracing = True
    self._annotation = jax.profiler.StepTraceAnnotation("train", step_num=step)
    self._annotation.__enter__()

  def after_step(self, step: int, outputs: Any) -> None:
    if not self._tracing:
      return
    if step >= self.last:
      jax.block_until_ready(outputs)  # the trace must hold the device work of the last step
    self._end_annotation()
    if step >= self.last:
      self._stop(f"profile of steps {self.first}..{step}")

  def _end_annotation(self) -> None:
    if self._annotation is not None:
      self._annotation.__exit__(None, None, None)
      self._annotation = None

  def _stop(self, what: str) -> None:
    jax.profiler.stop_trace()
    self._tracing = False
    log(f"Wrote the {what} to {self.directory} (view: xprof --logdir {self.directory}).")

  def __exit__(self, *exc) -> bool:
    if self._tracing:  # the run stopped inside the profiled range
      self._end_annotation()
      self._stop("profile (cut short)")
    return False
