"""Training health: stop (or skip the update) at the first step whose loss or gradients are not
finite, and never save a non-finite state.

Inside the compiled step, `all_finite(loss, grad_norm)` is one more scalar metric (the global
gradient norm is non-finite iff some gradient is), and with `train.nonfinite=skip`
`keep_previous_if_not_finite` keeps the old parameters and optimizer state for such a step
(the step counter still advances, as in flax's wmt example for float16). On the host,
`HealthGuard` holds the per-step flags as device scalars and reads them only where the loop
synchronizes anyway: when it logs, evaluates or saves. A checkpoint is therefore written only
after every step before it has been seen to be finite.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from transformer.config import NONFINITE_MODES, options_text
from transformer.errors import RunError

def all_finite(*scalars: jax.Array) -> jax.Array:
  """Scalar bool: every one of `scalars` (each shape `[]`) is finite."""
  return jnp.all(jnp.isfinite(jnp.stack([jnp.asarray(s, jnp.float32) for s in scalars])))


def keep_previous_if_not_finite(finite: jax.Array, new_state, old_state):
  """`new_state`, except that its params and opt_state are `old_state`'s where `finite` is
  false. The step counter is `new_state`'s either way, so data and dropout move on."""
  keep = lambda new, old: jnp.where(finite, new, old)
  return new_state.replace(params=jax.tree.map(keep, new_state.params, old_state.params),
                           opt_state=jax.tree.map(keep, new_state.opt_state,
                                                  old_state.opt_state))


class NonFiniteError(RunError):
  """The first non-finite step of a run with `train.nonfinite=stop`; `metrics` are that step's
  (host scalars, keyed as the train step's)."""

  def __init__(self, step: int, metrics: dict,
               last_finite: Optional[tuple[int, float, float]]):
    self.step, self.metrics, self.last_finite = step, metrics, last_finite
    self.loss, self.grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
    self.last_checkpoint: Optional[str] = None  # filled in by the loop once saves have finished
    super().__init__(step)

  def __str__(self) -> str:
    if self.last_finite is None:
      before = "No step before it was finite."
    else:
      s, loss, g = self.last_finite
      before = f"Last finite step {s}: loss {loss:.4f}, grad_norm {g:.4f}."
    saved = (f"The last good checkpoint is {self.last_checkpoint}; nothing after step "
             f"{self.step - 1} was saved." if self.last_checkpoint else
             "No checkpoint had been saved; nothing non-finite was saved.")
    return (f"Training stopped: step {self.step} has a non-finite loss or gradient (loss "
            f"{self.loss}, grad_norm {self.grad_norm}). {before} {saved} Lower "
            "--config.optim.learning_rate (or raise warmup_steps / clip_norm), or set "
            "--config.train.nonfinite=skip to skip such updates; the same --workdir resumes "
            "from the last good checkpoint.")


class HealthGuard:
  """Host side of the guard. `record(step, metrics)` after every step (no sync);
  `check()` where the loop syncs anyway (log, eval, save): it reads the flags recorded since
  the last check and, in `stop` mode, raises `NonFiniteError` for the first bad step; in `skip`
  mode it counts them (`skipped`) and says so once."""

  def __init__(self, mode: str, log=print):
    if mode not in NONFINITE_MODES:
      raise ValueError(f"Unknown nonfinite mode {mode!r}; choose "
                       f"{options_text(tuple(map(repr, NONFINITE_MODES)))}.")
    self.mode = mode
    self.skipped = 0  # steps skipped in this process
    self.last_finite: Optional[tuple[int, float, float]] = None
    self._pending: list[tuple[int, dict]] = []
    self._log = log

  def record(self, step: int, metrics: dict) -> None:
    """`metrics`: the train step's (device scalars, `finite`, `loss` and `grad_norm` among
    them), kept whole for the row of a diverged run (`NonFiniteError.metrics`)."""
    self._pending.append((step, metrics))

  def check(self) -> None:
    if not self._pending:
      return
    pending, self._pending = jax.device_get(self._pending), []
    for step, m in pending:
      if bool(m["finite"]):
        self.last_finite = (step, float(m["loss"]), float(m["grad_norm"]))
        continue
      if self.mode == "stop":
        raise NonFiniteError(step, m, self.last_finite)
      if not self.skipped:
        self._log(f"WARNING: step {step} has a non-finite loss or gradient (loss "
                  f"{float(m['loss'])}, grad_norm {float(m['grad_norm'])}); its update is "
                  "skipped (train.nonfinite=skip). Log lines count the skipped steps.")
      self.skipped += 1
