"""Admin's profiled initialisation of omega (Liu et al., 2020, "Understanding the Difficulty of
Training Transformers").

An Admin sublayer computes x_i = N(omega_i * x_{i-1} + f_i(x_{i-1})) (`Block._residual`). Its
omega_i is a learnable per-feature vector, initialised from the output variances of the
*earlier* branches of the same stack, measured on one batch with the standard (omega = 1)
initialisation:

  omega_i = sqrt(Var[x_0] + sum_{j < i} Var[f_j(x_{j-1})])      (every feature the same value)

where i counts the stack's sublayers in execution order (layer 0: self-attention, [cross-
attention], feed-forward; then layer 1, ...) and the stack input x_0 (the embeddings) counts
as the zeroth branch, so the first omega is its standard deviation rather than 0. This is the
paper's accumulated-variance rule, and the official code's two-stage recipe
(`--init-type adaptive-profiling`, then `adaptive`) done in one process.

Wiring: every model's `init` (see `AdminInit` in `transformer/model/models.py`) first builds
the parameters as usual (omega = 1), then runs `profile_omegas`: one forward pass on the same
batch `init` was given with the "admin_profile" collection mutable, in which each block sows
`<sublayer>_branch_var` and each stack `input_var`, then the omegas are overwritten with the
rule above. Scanned stacks sow one value per layer (leading axis), so the rule reads them in
the same order. It is traceable, so it runs inside the jitted state initialisation.

Which batch: a training run profiles on its first training batch, as the paper profiles on
data (`transformer.train.loop._restore_or_init` reads it, `TaskBase.init_params(rng, batch)`
hands its inputs to `init`; the first step then trains on it as usual). Where there is no data
(`--mode=bench`, abstract shapes) `init` gets the task's `example_inputs()`: random regular
tokens of the vocabulary (random pixels for images) from a fixed key. Runs before this change
profiled on an all-zero (all-padding) batch.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from transformer.model.block import SUBLAYERS


def _layer_keys(stack: dict) -> list[str]:
  keys = [k for k in stack if k.startswith("layer_")]
  return sorted(keys, key=lambda k: int(k.split("_")[1]))


def stack_omegas(profile: dict) -> dict:
  """`{layer key: {"<sublayer>_omega": scalar or [layers] array}}` for one stack's sown
  profile (`input_var` and per-layer `<sublayer>_branch_var`)."""
  total = profile["input_var"]
  out = {}
  if "layers" in profile:  # scanned: each value has a leading [num_layers] axis
    layers = profile["layers"]
    num_layers = next(iter(layers.values())).shape[0]
    per_layer = {f"{s}_omega": [] for s in SUBLAYERS if f"{s}_branch_var" in layers}
    for i in range(num_layers):
      for s in SUBLAYERS:
        if f"{s}_branch_var" in layers:
          per_layer[f"{s}_omega"].append(jnp.sqrt(total))
          total = total + layers[f"{s}_branch_var"][i]
    out["layers"] = {k: jnp.stack(v) for k, v in per_layer.items()}
    return out
  for key in _layer_keys(profile):
    out[key] = {}
    for s in SUBLAYERS:
      if f"{s}_branch_var" in profile[key]:
        out[key][f"{s}_omega"] = jnp.sqrt(total)
        total = total + profile[key][f"{s}_branch_var"]
  return out


def _set_omegas(params: Any, omegas: dict) -> Any:
  params = dict(params)
  for layer, values in omegas.items():
    layer_params = dict(params[layer])
    for name, value in values.items():
      old = layer_params[name]
      raw = old.unbox() if isinstance(old, nn.meta.AxisMetadata) else old
      new = jnp.broadcast_to(jnp.asarray(value, raw.dtype)[..., None], raw.shape)
      layer_params[name] = old.replace_boxed(new) if isinstance(old, nn.meta.AxisMetadata) else new
    params[layer] = layer_params
  return params


def apply_profile(params: Any, profile: dict) -> Any:
  """Overwrites the omegas of every stack found in the sown `profile` tree."""
  if "input_var" in profile:
    return _set_omegas(params, stack_omegas(profile))
  params = dict(params)
  for key, sub in profile.items():
    if isinstance(sub, dict) and key in params:
      params[key] = apply_profile(params[key], sub)
  return params


def profile_omegas(model: nn.Module, variables: dict, *args, **kwargs) -> dict:
  """`variables` with every Admin omega set from one profiling pass on `args` (see above)."""
  _, state = model.apply(variables, *args, mutable=["admin_profile"], **kwargs)
  variables = dict(variables)
  variables["params"] = apply_profile(variables["params"], state["admin_profile"])
  return variables
