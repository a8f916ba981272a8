"""Double buffering of train batches: each batch is on the devices before its step runs.

`Prefetcher` yields the batches of steps `start + 1, start + 2, ...`. When step n's batch is
taken, the batches of the next `count` steps are fetched and their copy to the devices is
started (`Parallel.place_batch`, asynchronous), so the host never holds the accelerator up
while it reads and transfers the next batch.

Exact resume: the batches come from an iterator whose position is saved with every
checkpoint (`InputData.train_iterator`). Had it run ahead, a checkpoint would record batches
that no step consumed, and a resumed run would skip them. So the prefetcher never fetches
past a step after which a checkpoint may be written (`is_boundary(step)`: periodic saves, the
last step, `stop_after`) until that step is done; and when a signal asks the run to stop,
`drain()` stops fetching and the loop runs the steps already fetched (at most `count`), then
saves when `empty`. At every save the iterator's position is then exactly the steps taken.

The fetch order is a pure function of the step numbers, so every process of a multi-process
run holds the same number of batches and stops after the same step.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterator

from transformer.train.writers import log


class Prefetcher(Iterator[dict]):
  """Batches for steps `start_step + 1, ...`, up to `count` steps ahead (0: fetched on demand,
  not placed ahead).

  Args:
    next_batch: returns the next batch from the checkpointed iterator (NumPy rows).
    place: starts the batch's copy to the devices (`Parallel.place_batch`).
    count: how many batches beyond the current step may be fetched and placed.
    start_step: the steps already taken (the run's step when the loop starts).
    is_boundary: True for a step after which a checkpoint may be saved.
  """

  def __init__(self, next_batch: Callable[[], dict], place: Callable[[dict], dict], count: int,
               start_step: int, is_boundary: Callable[[int], bool]):
    if count < 0:
      raise ValueError(f"prefetch count must be >= 0, got {count}.")
    self._next_batch, self._place, self.count = next_batch, place, count
    self._is_boundary = is_boundary
    self._buffer: collections.deque[dict] = collections.deque()
    self.taken = start_step  # step number of the last batch handed out
    self._draining = False

  @property
  def fetched(self) -> int:
    """Step number of the last batch read from the iterator (its position, in steps)."""
    return self.taken + len(self._buffer)

  @property
  def draining(self) -> bool:
    """`drain()` was called: no more batches will be fetched."""
    return self._draining

  @property
  def empty(self) -> bool:
    """No batch is held: the iterator's position is exactly the batches handed out."""
    return not self._buffer

  def __next__(self) -> dict:
    if self._buffer:
      batch = self._buffer.popleft()
    elif self._draining:
      raise StopIteration
    else:
      batch = self._fetch()
    self.taken += 1
    self._fill()
    return batch

  def _fetch(self) -> dict:
    batch = self._next_batch()
    return self._place(batch) if self.count else batch

  def _fill(self) -> None:
    """Fetches ahead, never past a boundary step that has not run yet (steps >= `taken`)."""
    while not self._draining and len(self._buffer) < self.count:
      if self._is_boundary(self.fetched):  # fetched >= taken: that step is not done yet
        return
      self._buffer.append(self._fetch())

  def drain(self) -> None:
    """Stops fetching (a stop was requested); the loop runs the batches held, then saves."""
    if not self._draining and self._buffer:
      log(f"Running the {len(self._buffer)} step(s) whose batches are already on the devices "
          "before saving, so that the saved input position matches the steps taken.")
    self._draining = True
