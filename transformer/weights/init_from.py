"""Starting a run from another run's parameters (`model.init_from=<workdir>[:step]`), or from
Hugging Face GPT-2 weights (`model.init_from=hf:<dir>`, transformer/weights/hf_gpt2.py).

Only parameters are taken (not the optimizer state, not the step): every parameter of the new
model whose path and shape match one in the checkpoint starts from it, the others start fresh.
This covers any pair of kinds that share modules: LM -> LM fine-tuning, masked LM ->
classifier (both have "embedder" and "encoder"), encoder-decoder -> encoder-decoder on new data.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import jax
import numpy as np

from transformer import paths, user_files
from transformer.config import ConfigError, ModelConfig
from transformer.errors import RunError
from transformer.workdir import CONFIG_FILE, choose_step


HF_PREFIX = "hf:"  # model.init_from=hf:<dir>: a Hugging Face GPT-2 folder


def parse_init_from(spec: str) -> tuple[str, Optional[int]]:
  """`"runs/lm:300"` -> `("runs/lm", 300)`; `"runs/lm"` -> `("runs/lm", None)` (latest)."""
  head, sep, tail = spec.rpartition(":")
  if sep and tail.isdigit() and head:
    return head, int(tail)
  return spec, None


def load_params(workdir: str, step: Optional[int] = None,
                what: str = "--config.model.init_from") -> tuple[Any, dict, int]:
  """The parameters (numpy) of checkpoint `step` (default: the latest) under
  `<workdir>/checkpoints`, the run's config (dict, `{}` without config.json) and the step.
  Raises ConfigError if there is no such checkpoint, a one-line UserFileError for a bad
  config.json and RunError for a checkpoint that cannot be read; nothing is written."""
  import orbax.checkpoint as ocp  # only when a run starts from another
  root = paths.absolute(workdir)
  directory = paths.join(root, "checkpoints")
  if not paths.isdir(directory):
    hint = ("point it at the workdir of a trained run" if not _is_hf_folder(root) else
            f"it holds a Hugging Face export (model.safetensors, config.json with model_type): "
            f"give {what}=hf:{workdir}")
    raise ConfigError(f"{what}={workdir!r}: no checkpoints/ folder there; {hint}.")
  config = {}
  config_path = paths.join(root, CONFIG_FILE)
  if paths.exists(config_path):  # before the checkpoint: a bad file fails at once
    config = user_files.read_json_object(config_path, user_files.SAVED_CONFIG,
                                         user_files.SAVED_CONFIG_FIX)
  manager = ocp.CheckpointManager(directory, item_names=("state", "config"))
  try:
    steps = sorted(manager.all_steps())
    step = choose_step(steps, step, what=f"{what}={workdir!r}", directory=directory)
    try:
      restored = manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore()))
    except Exception as e:  # noqa: BLE001 -- any read failure: partial or corrupt files
      raise unreadable_checkpoint(what, workdir, directory, step, steps, e) from None
  finally:
    manager.close()
  return restored["state"]["params"], config, step


def _is_hf_folder(root: str) -> bool:
  """`root` holds a Hugging Face model: `model.safetensors`, or a config.json naming its
  `model_type` (a run's config.json has none)."""
  from transformer.weights.hf_gpt2 import CONFIG_FILE as HF_CONFIG, WEIGHTS_FILE
  if paths.isfile(paths.join(root, WEIGHTS_FILE)):
    return True
  try:
    saved = json.loads(paths.read_text(paths.join(root, HF_CONFIG)))
  except (OSError, ValueError):  # no readable JSON: not one
    return False
  return isinstance(saved, dict) and "model_type" in saved


def unreadable_checkpoint(what: str, workdir: str, directory: str, step: int,
                          steps: list[int], e: BaseException) -> RunError:
  """The one-line error for checkpoint `step` that orbax could not read."""
  while e.__cause__ is not None:
    e = e.__cause__
  cause = f"{type(e).__name__}: {user_files.one_line(e)}"[:200]
  others = [s for s in steps if s != step]
  fix = (f"Give another of its steps ({', '.join(map(str, others))}), or restore this one "
         "from a copy of the run." if others else "Restore it from a copy of the run.")
  return RunError(f"{what}={workdir!r}: checkpoint {directory}/{step} cannot be read ({cause}); "
                  f"its files are partial or corrupt (a run killed while saving it, or a "
                  f"disk that lost them). Nothing was changed. {fix}")


def _flat(tree: Any) -> dict[str, Any]:
  """`{"encoder/stack/layer_0/.../kernel": leaf}`."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {"/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path): leaf
          for path, leaf in leaves}


def matching_params(spec: str, abstract_params: Any, log: Callable[[str], None] = print,
                    vocab_size: Optional[int] = None, id_offset: int = 0,
                    model: Optional[ModelConfig] = None,
                    tokenizer=None) -> dict[str, np.ndarray]:
  """The checkpoint's parameters that fit `abstract_params` (same path, same shape), keyed by
  path; logs which were loaded, which start fresh and which did not fit. Raises ConfigError
  when none fits (a different model altogether).

  For `hf:DIR` (Hugging Face GPT-2), every parameter must load: `model` (this run's, when
  given) is checked against the folder's config.json first (`hf_gpt2.check_importable`), and
  any tensor that does not fit is a ConfigError, so a folder loads whole or not at all. The
  one exception is the token embedding of another vocabulary, which starts fresh (logged).
  `vocab_size` (this run's, unpadded) and `id_offset` (3 when its ids are a tokenizer's + 3:
  `transformer.weights.hf_tokenizer.id_offset`) place the folder's embedding rows
  (`hf_gpt2.embedding_rows`: row i -> row i + id_offset, rows before it the folder's mean);
  without `vocab_size` its rows are taken as ours, zero-padded. When they are taken, the
  folder's tokenizer.json must be `tokenizer` (this run's, when given:
  `hf_tokenizer.check_folder_tokenizer`), or nothing loads."""
  want = _flat(abstract_params)
  if spec.startswith(HF_PREFIX):  # Hugging Face GPT-2 weights (transformer/weights/hf_gpt2.py)
    workdir, step = spec[len(HF_PREFIX):], "hf"
    params = _hf_params(workdir, want, log, vocab_size, id_offset, model, tokenizer)
    saved = {"model": {"kind": "Hugging Face GPT-2"}}
  else:
    workdir, step = parse_init_from(spec)
    params, saved, step = load_params(workdir, step)
  got = _flat(params)
  loaded = {p: np.asarray(got[p]) for p, leaf in want.items()
            if p in got and tuple(np.shape(got[p])) == tuple(leaf.shape)}
  misfit = sorted(p for p in want if p in got and p not in loaded)
  fresh = sorted(p for p in want if p not in got)
  unused = sorted(p for p in got if p not in want)
  kind = saved.get("model", {}).get("kind", "?")
  if not loaded:
    raise ConfigError(f"--config.model.init_from={spec!r}: none of this model's parameters "
                      f"matches the {kind} run's (by name and shape); start from a run that "
                      "shares modules with this one.")
  if step == "hf":
    _check_whole(spec, want, got, misfit, [p for p in fresh if p != EMBEDDING] + unused)
  log(f"init_from {workdir} (step {step}, a {kind} run): loaded {len(loaded)} of {len(want)} "
      f"parameter arrays.")
  for title, names in (("loaded", sorted(loaded)), ("new (fresh init)", fresh),
                       ("new (shape differs from the checkpoint's)", misfit),
                       ("in the checkpoint but unused", unused)):
    if names:
      log(f"  {title}: " + ", ".join(names))
  return loaded


EMBEDDING = "embedder/token_embedding/embedding"


def _hf_params(directory: str, want: dict[str, Any], log: Callable[[str], None],
               vocab_size: Optional[int], id_offset: int, model: Optional[ModelConfig],
               tokenizer=None) -> Any:
  """Our params tree (numpy) of the GPT-2 folder `directory`, checked against `model` first,
  and its tokenizer against `tokenizer` when its embedding rows would be taken."""
  from transformer.weights import hf_gpt2, hf_tokenizer
  what = "--config.model.init_from"
  hf = hf_gpt2.read_hf_config(directory, what)
  if model is not None:
    hf_gpt2.check_importable(model, directory, hf, what)
  if tokenizer is not None and vocab_size == _int(hf.get("vocab_size")) + id_offset:
    hf_tokenizer.check_folder_tokenizer(directory, tokenizer, what)
  tensors, hf = hf_gpt2.read_hf_dir(directory, what)
  rows, table = want.get(EMBEDDING), want.get("embedder/position_table/table")
  try:
    params = hf_gpt2.from_gpt2(tensors, hf, rows.shape[0] if rows is not None else None,
                               vocab_size, id_offset,
                               max_len=table.shape[0] if table is not None else None)
  except (KeyError, ValueError) as e:
    raise ConfigError(f"{what}='hf:{directory}': not a GPT-2 layout "
                      f"({type(e).__name__}: {e}).") from None
  if "token_embedding" not in params["embedder"]:
    log(f"init_from {directory}: its vocabulary ({hf.get('vocab_size')} ids) is not this "
        f"run's ({vocab_size} ids, {id_offset} of them ours before the tokenizer's), so the "
        "token embedding starts fresh (and the output layer, tied to it).")
  return params


def _int(value: Any) -> int:
  """A config.json count, or -1 when it is none."""
  return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _check_whole(spec: str, want: dict[str, Any], got: dict[str, Any], misfit: list[str],
                 missing: list[str]) -> None:
  """A GPT-2 folder loads whole: a tensor of another shape, or a parameter on one side only
  (but the token embedding of another vocabulary), is a one-line ConfigError."""
  if not misfit and not missing:
    return
  shapes = [f"{p} {tuple(np.shape(got[p]))} vs this run's {tuple(want[p].shape)}"
            for p in misfit[:4]]
  others = [f"{p} on one side only" for p in missing[:4]]
  raise ConfigError(f"--config.model.init_from={spec!r}: the folder's tensors do not fit this "
                    f"model ({len(misfit) + len(missing)} arrays: "
                    + "; ".join(shapes + others) + "); its config.json does not describe its "
                    "weights. Nothing was loaded.")


def merge(params: Any, loaded: dict[str, np.ndarray]) -> Any:
  """`params` with every leaf whose path is in `loaded` replaced by that array."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  new = []
  for path, leaf in leaves:
    key = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
    new.append(loaded[key].astype(leaf.dtype) if key in loaded else leaf)
  return jax.tree_util.tree_unflatten(treedef, new)
