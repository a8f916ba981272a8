"""Sweeps: a Python file whose `get_sweep()` returns points, each a dict of config overrides.

A sweep file (see `experiments/`) declares its grid with `product` and `zip_axes`::

    from transformer.sweep import product, zip_axes

    def get_sweep():
      return product(
          {"model.norm_placement": ["pre", "post"]},
          zip_axes({"optim.learning_rate": [1e-3, 3e-3], "optim.warmup_steps": [0, 50]}),
          {"seed": [0, 1, 2]})

Each point is a dict from a config field path (`"model.norm_placement"`, `"seed"`) to a value,
applied on top of `--config` and its command-line overrides. `validate_points` checks every
point against the config before anything runs; `point_name` gives each point a readable,
unique workdir name. Running the points is `sweep_local.py` / `sweep_slurm.py`; reading their
workdirs is `report.py`.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import itertools
import json
import lzma
import os
import re
import sys
from typing import Any, Iterable, Mapping, Optional, Sequence

from transformer import packed_runs, paths, provenance, user_files
from transformer import study as study_lib
from transformer.config import (FROM_DATA, LEGACY_DEFAULTS, ConfigError, ExperimentConfig,
                                flat_config, from_config_dict)
from transformer.errors import CommandLineError
from transformer.workdir import read_metrics

Point = dict[str, Any]
MANIFEST = "sweep.json"  # written into the sweep dir: the points, their names and commands
# A packed study's manifest (experiments/results/): sweep.json xz-compressed, 3% of its size.
PACKED_MANIFEST = MANIFEST + ".xz"


def product(*axes: Mapping[str, Sequence[Any]] | Sequence[Point]) -> list[Point]:
  """The Cartesian product of axes, the first varying slowest.

  Each axis is either `{field: [values]}` (one field) or a list of points (e.g. `zip_axes`'s
  result, or hand-written dicts), so `product({"a": [1, 2]}, {"b": [3, 4]})` has 4 points.
  """
  lists = [_as_points(a) for a in axes]
  points = []
  for combo in itertools.product(*lists):
    merged: Point = {}
    for part in combo:
      clash = set(merged) & set(part)
      if clash:
        raise ConfigError(f"Sweep axes set the same field(s) {sorted(clash)} twice.")
      merged.update(part)
    points.append(merged)
  return points


def zip_axes(axes: Mapping[str, Sequence[Any]]) -> list[Point]:
  """Fields that vary together: `zip_axes({"a": [1, 2], "b": [3, 4]})` is 2 points,
  `{"a": 1, "b": 3}` and `{"a": 2, "b": 4}`. All value lists must have the same length."""
  lengths = {k: len(v) for k, v in axes.items()}
  if len(set(lengths.values())) > 1:
    raise ConfigError(f"zip_axes needs value lists of one length; got {lengths}.")
  keys = list(axes)
  return [dict(zip(keys, values)) for values in zip(*(axes[k] for k in keys))]


def _as_points(axis) -> list[Point]:
  if isinstance(axis, Mapping):
    if len(axis) != 1:
      raise ConfigError(f"A product axis given as a dict has one field; got {list(axis)}. "
                        "Use zip_axes for fields that vary together, or one dict per axis.")
    (key, values), = axis.items()
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
      raise ConfigError(f"Axis {key!r} needs a list of values; got {values!r}.")
    return [{key: v} for v in values]
  return [dict(p) for p in axis]


def preset(presets: Mapping[str, Point], name: str) -> list[Point]:
  """`presets[name]` as a one-point axis for `product`, e.g. the fixed fields of a study's
  `cpu` or `gpu` size; an unknown name is a ConfigError listing the known ones."""
  if name not in presets:
    raise ConfigError(f"Unknown sweep preset {name!r}; known: {sorted(presets)} "
                      "(--sweep=FILE.py:PRESET).")
  return [dict(presets[name])]


def sweep_report_settings(spec_arg: str) -> dict:
  """What the sweep file tells the report (`transformer.study`): `CLAIM` (the published claim
  a study tests) and `REPORT_DIAGNOSTICS` (per-layer diagnostics whose last layer to plot
  against the swept fields, by a part of their name such as "feed_forward/grad_norm")."""
  study = study_lib.load(spec_arg)
  return {"claim": study.claim, "report_diagnostics": list(study.report_diagnostics)}


SWEEP_FIX = ("A sweep file defines get_sweep() returning a list of points, each a dict of "
             "'section.field' -> value (see experiments/).")


def load_sweep(spec_arg: str) -> list[Point]:
  """Imports the sweep file `FILE[:ARG]` and returns its `get_sweep([ARG])` points (checked
  shape). ARG, as in `configs/x.py:variant`, lets one file hold several sweeps (presets).

  A missing file is a CommandLineError; a file that fails (syntax, import, get_sweep raising
  or returning something else than points) a one-line UserFileError at its line."""
  path, arg = study_lib.split_spec(spec_arg)
  if not os.path.isfile(path):
    raise CommandLineError(f"--sweep={spec_arg}: {path} is not a file; give a Python file with "
                           "get_sweep().")
  what = study_lib.WHAT
  get_sweep = study_lib.load(path).get_sweep
  _check_preset_arg(get_sweep, spec_arg, arg)
  returned = user_files.call(get_sweep, *([] if arg is None else [arg]), path=path, what=what)
  if isinstance(returned, (Mapping, str, bytes)) or not isinstance(returned, Iterable):
    raise user_files.file_error(
        path, f"get_sweep() returned a value of type {type(returned).__name__}", SWEEP_FIX,
        line=user_files.def_line(get_sweep), what=what)
  points = list(returned)
  if not points:
    raise user_files.file_error(path, "get_sweep() returned no points", SWEEP_FIX,
                                line=user_files.def_line(get_sweep), what=what)
  for i, p in enumerate(points):
    if not isinstance(p, Mapping) or not all(isinstance(k, str) for k in p):
      raise user_files.file_error(path, f"point {i} is {p!r}", SWEEP_FIX,
                                  line=user_files.def_line(get_sweep), what=what)
  return [dict(p) for p in points]


def _check_preset_arg(get_sweep, spec_arg: str, arg: Optional[str]) -> None:
  """A `:PRESET` for a get_sweep() that takes none (or none for one that needs it) is a
  CommandLineError."""
  try:
    inspect.signature(get_sweep).bind(*([] if arg is None else [arg]))
  except TypeError:
    raise CommandLineError(
        f"--sweep={spec_arg}: " + ("this file's get_sweep() takes no preset; drop "
                                   f"':{arg}'." if arg is not None else
                                   "this file's get_sweep(preset) needs one: "
                                   "--sweep=FILE.py:PRESET.")) from None
  except ValueError:  # no signature to read (a builtin): let the call say
    pass


def apply_point(config_dict, point: Point, index: int = 0):
  """A copy of the ConfigDict `config_dict` with `point`'s values set; an unknown field or a
  value of the wrong type is a ConfigError naming the point."""
  c = copy.deepcopy(config_dict)
  for key, value in point.items():
    *parents, leaf = key.split(".")
    node = c
    try:
      for p in parents:
        node = node[p]
      if leaf not in node:
        raise KeyError(leaf)
      node[leaf] = value
    except (KeyError, AttributeError, TypeError) as e:
      kind = "no such field" if isinstance(e, (KeyError, AttributeError)) else str(e)
      raise ConfigError(f"Sweep point {index} {point}: {key!r}: {kind}. Fields are "
                        "'section.field' paths of the config, e.g. 'model.norm_placement' "
                        "or 'seed'.") from None
  return c


def validate_points(config_dict, points: Sequence[Point]) -> list[ExperimentConfig]:
  """Every point's full config, validated; raises ConfigError naming the first bad point."""
  configs = []
  for i, point in enumerate(points):
    try:
      configs.append(from_config_dict(apply_point(config_dict, point, i)))
    except ConfigError as e:
      if str(e).startswith("Sweep point"):
        raise
      raise ConfigError(f"Sweep point {i} {point}: {e}") from None
  names = point_names(points)
  dupes = sorted({n for n in names if names.count(n) > 1})
  if dupes:
    raise ConfigError(f"The sweep has repeated points: {dupes}.")
  return configs


def format_value(value: Any) -> str:
  """A value as an absl `--config.x=value` flag reads it back."""
  if isinstance(value, float):
    return repr(value)
  return str(value)


def override_args(point: Point) -> list[str]:
  return [f"--config.{k}={format_value(v)}" for k, v in point.items()]


# A point name's longest: 6 fields of a study (length, warm-up, diagnostics spacing, placement,
# LR, seed: long_training's 101 characters) fit; a longer one is cut and made unique by a hash.
MAX_NAME = 120


def point_name(point: Point, all_points: Sequence[Point] = ()) -> str:
  """A readable workdir name: `norm_placement=post,seed=1`. Fields that every point of
  `all_points` sets to the same value (a preset's) are left out; fields go by their last path
  part unless two swept fields share it; long names are cut and made unique by a hash.
  Naming every point of a sweep: `point_names`."""
  return _name(point, *_key_sets(list(all_points) or [point]))


def point_names(points: Sequence[Point]) -> list[str]:
  """`point_name(p, points)` of each point, in order; the fields that vary are found once
  (naming each point against all of them was quadratic: 10 s for a study of 300 points)."""
  points = list(points)
  key_sets = _key_sets(points)
  return [_name(p, *key_sets) for p in points]


def point_text(point: Point) -> str:
  """Every field of `point` as `key=value` with its full key, comma-joined and never cut
  (`model.norm=dyt,optim.learning_rate=0.003,seed=3`): what `--points` matches beside the
  name, which drops the fields all points share and is cut and hashed past `MAX_NAME`."""
  return ",".join(f"{k}={format_value(v)}" for k, v in point.items())


def _key_sets(all_points: list[Point]) -> tuple[set, Optional[set]]:
  """Every field the points set, and those whose value differs among them (None for one
  point)."""
  keys = {k for p in all_points for k in p}
  if len(all_points) < 2:
    return keys, None
  return keys, {k for k in keys
                if len({json.dumps(p.get(k, "<unset>"), default=str) for p in all_points}) > 1}


def _name(point: Point, keys: set, varying: Optional[set]) -> str:
  if varying is not None and any(k in varying for k in point):
    point = {k: v for k, v in point.items() if k in varying}
    keys = varying
  short = {}
  for k in keys:
    leaf = k.rsplit(".", 1)[-1]
    same_leaf = [o for o in keys if o.rsplit(".", 1)[-1] == leaf]
    short[k] = leaf if len(same_leaf) == 1 else k
  parts = [f"{short[k]}={format_value(v)}" for k, v in point.items()]
  name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(parts)) or "default"
  if len(name) > MAX_NAME:  # far below a file name's 255 bytes: paths stay readable
    digest = hashlib.sha1(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()
    name = name[:MAX_NAME - 20] + "-" + digest[:10]
  return name


def user_overrides(argv: Sequence[str]) -> list[str]:
  """The `--config.x=value` arguments of the sweep command (they apply to every point)."""
  return [a for a in argv if a.startswith("--config.") and "=" in a]


def point_command(launch_py: str, config_arg: str, overrides: Sequence[str], point: Point,
                  workdir: str, python: str) -> list[str]:
  """The `launch.py --mode=train` command of one point; its values win over `overrides`."""
  mine = {f"--config.{k}" for k in point}
  shared = [o for o in overrides if o.split("=", 1)[0] not in mine]
  return [python, launch_py, "--mode=train", f"--config={config_arg}", *shared,
          *override_args(point), f"--workdir={workdir}"]


def is_finished(workdir: str, num_steps: int) -> bool:
  """The run in `workdir` has ended: its final eval (an eval row at step >= num_steps), or a
  `diverged` row (training stopped at a non-finite step; rerunning would only repeat it)."""
  rows = read_metrics(workdir)
  return (any(r["step"] >= num_steps for r in rows.get("eval", ()))
          or any(r.get("diverged") for split in rows.values() for r in split))


# Fields that change neither what a run computes nor what it logs: a finished run elsewhere
# whose config differs from a point's only here (or in what the data fills in, such as the
# vocabulary size) is that point's run, and `--reuse_runs_from` links it instead of rerunning.
REUSE_IGNORES = ("checkpoint.", "train.prefetch", "train.profile_steps",
                 "train.compilation_cache_dir", "train.xla_gpu_flags", "train.samples_at_eval",
                 "train.peak_flops_per_device", "provenance.")


# Placements whose block was rebuilt under the same name: a run of one that started before the
# time given computed the earlier block, so `--reuse_runs_from` does not link it to a point now
# (issue 68: `hybrid` became the paper's HybridNorm; the earlier block is `hybrid_v0`).
REBUILT_PLACEMENTS = {"hybrid": "2026-12-02T01:10:00+00:00"}


def _before_rebuild(config_dict: Mapping, source: str) -> Optional[str]:
  """Why the run in `source` ran an earlier block than `config_dict`'s placement names now
  (its first provenance record is older than `REBUILT_PLACEMENTS`, or it has none); None if
  it did not."""
  placement = config_dict.get("model", {}).get("norm_placement")
  since = REBUILT_PLACEMENTS.get(placement)
  times = [r["time"] for r in provenance.read_records(source) if r.get("time")]
  if since is None or (times and times[0] >= since):  # both ISO 8601 in UTC
    return None
  return (f"it ran norm_placement={placement!r} before that block was rebuilt ({since}); "
          f"it is now {placement}_v0")


def ran_earlier_block(placement: str, workdir: str) -> bool:
  """Whether the run in `workdir` (a folder or a packed run) computed the block `placement`
  named before it was rebuilt (`REBUILT_PLACEMENTS`; a run without provenance counts as
  earlier): a report names such runs `<placement>_v0`."""
  return _before_rebuild({"model": {"norm_placement": placement}}, workdir) is not None


def run_identity(config_dict: Mapping) -> str:
  """What makes two runs the same run: their config without `REUSE_IGNORES` and the
  data-derived fields, as canonical JSON; a field the config predates counts with its
  `LEGACY_DEFAULTS` value (a run saved before `optim.decay_mask` is an `ndim` run)."""
  flat = {k: v for k, v in {**LEGACY_DEFAULTS, **flat_config(config_dict)}.items()
          if k not in FROM_DATA and not any(k.startswith(i) if i.endswith(".") else k == i
                                            for i in REUSE_IGNORES)}
  return json.dumps(flat, sort_keys=True, default=str)


def link_reusable_runs(sweep_dir: str, names: Sequence[str], configs: Sequence[ExperimentConfig],
                       reuse_dirs: Sequence[str]
                       ) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
  """For each point without a workdir yet, a finished run in one of the sweep dirs
  `reuse_dirs` with the same `run_identity` that read the same data is symlinked as its
  workdir (the report then reads it like any other).

  The same config is not the same data: the default corpus is the standard library of the
  Python that builds it, and a folder's files can change. So a run is linked only when the
  data identity it recorded (`provenance.data_identity`) has the digest the point's data has
  now; a run from before provenance recorded none, and is not linked.

  Returns the linked (point name, workdir) pairs and the refused (point name, workdir, why)
  ones."""
  finished = {}
  for other in reuse_dirs:
    manifest = read_manifest(other)
    for p in manifest["points"]:
      workdir = os.path.abspath(os.path.join(other, p["name"]))
      config_path = os.path.join(workdir, "config.json")
      packed = None if os.path.exists(config_path) else packed_runs.text(workdir, "config.json")
      if (os.path.exists(config_path) or packed is not None) and is_finished(workdir,
                                                                              p["num_steps"]):
        saved = user_files.read_json_object(config_path, "a run of --reuse_runs_from",
                                            "Restore it, or drop that --reuse_runs_from.",
                                            text=packed)
        finished.setdefault(run_identity(saved), workdir)
  digests = {}  # the data config (as JSON) -> its digest now
  linked, refused = [], []
  for name, config in zip(names, configs):
    target = os.path.join(sweep_dir, name)
    if os.path.lexists(target):
      continue
    config_dict = config.to_dict()
    source = finished.get(run_identity(config_dict))
    if not source or os.path.abspath(source) == os.path.abspath(target):
      continue
    if why := _before_rebuild(config_dict, source):
      refused.append((name, source, why))
      continue
    data = config_dict["data"]
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in digests:
      digests[key] = provenance.data_identity(data)["digest"]
    recorded = next((i["digest"] for i in map(provenance.recorded_data,
                                              provenance.read_records(source)) if i), None)
    if recorded != digests[key]:
      refused.append((name, source, "it records no data identity (made before provenance)"
                      if recorded is None else f"it read other data (digest {recorded}, "
                      f"the point's is {digests[key]})"))
      continue
    os.makedirs(sweep_dir, exist_ok=True)
    # Relative, as a packed link is: a packed run (no folder) is read through the symlink.
    os.symlink(os.path.relpath(source, os.path.abspath(sweep_dir)), target)
    linked.append((name, source))
  return linked, refused


def write_manifest(sweep_dir: str, sweep_file: str, config_arg: str, overrides: Sequence[str],
                   points: Sequence[Point], configs: Sequence[ExperimentConfig],
                   given_dir: str = "") -> str:
  """Writes `<sweep_dir>/sweep.json`: the command's arguments as given (for the report's
  command line), each point's name, overrides and length, and the command's `provenance`
  (`sweep_provenance`)."""
  paths.makedirs(sweep_dir)
  manifest = {
      "sweep_file": sweep_file, "config": config_arg, **sweep_report_settings(sweep_file),
      "overrides": list(overrides), "sweep_dir": given_dir or sweep_dir,
      "points": [{"name": n, "overrides": p, "num_steps": c.train.num_steps}
                 for n, p, c in zip(point_names(points), points, configs)],
      "provenance": sweep_provenance(configs)}
  path = paths.join(sweep_dir, MANIFEST)
  paths.write_text(path, json.dumps(manifest, indent=1, default=str))
  return path


def sweep_provenance(configs: Sequence[ExperimentConfig]) -> dict:
  """This command's provenance (`transformer.provenance.collect`: commit, versions, host,
  command line; no JAX) with `datasets`, the identity of each distinct data config among the
  points. Each run records its own as it starts (`<point>/provenance.jsonl`)."""
  data = []
  for c in configs:
    if c.to_dict()["data"] not in data:
      data.append(c.to_dict()["data"])
  return {**provenance.collect(sys.argv), "datasets": [provenance.data_identity(d) for d in data]}


def holds_studies(directory: str) -> bool:
  """A folder without its own manifest whose subfolders have one (experiments/results)."""
  if not os.path.isdir(directory) or manifest_path(directory):
    return False
  return any(manifest_path(os.path.join(directory, d)) for d in sorted(os.listdir(directory)))


def manifest_path(sweep_dir: str) -> str:
  """The sweep dir's manifest: its `sweep.json` (a sweep writes it), else the packed
  `sweep.json.xz` (`pack_manifest`); "" when it has neither."""
  for name in (MANIFEST, PACKED_MANIFEST):
    path = paths.join(sweep_dir, name)
    if paths.exists(path):
      return path
  return ""


def read_manifest(sweep_dir: str) -> dict:
  """The sweep dir's manifest (`manifest_path`), checked for the fields its readers use."""
  path = manifest_path(sweep_dir)
  if not path:
    raise ConfigError(f"{paths.join(sweep_dir, MANIFEST)} does not exist: is {sweep_dir} a "
                      "sweep dir (made by --mode=sweep)?")
  text = _packed_manifest_text(path) if path.endswith(".xz") else None
  manifest = user_files.read_json_object(path, _MANIFEST_WHAT, _MANIFEST_FIX, text=text)
  problem = _manifest_problem(manifest)
  if problem:
    raise user_files.file_error(path, problem, _MANIFEST_FIX, what=_MANIFEST_WHAT)
  return manifest


def pack_manifest(sweep_dir: str) -> str:
  """Replaces the sweep dir's `sweep.json` by `sweep.json.xz` (a study committed to
  experiments/results/ keeps it so); the same manifest gives the same bytes. Returns its path.
  A later sweep in the same dir writes `sweep.json` again, which readers then prefer."""
  plain = paths.join(sweep_dir, MANIFEST)
  read_manifest(sweep_dir)  # whole, or a clear error before anything is replaced
  text = user_files.read_text(plain, _MANIFEST_WHAT)
  packed = paths.join(sweep_dir, PACKED_MANIFEST)
  paths.write_bytes(packed, lzma.compress(text.encode("utf-8"), preset=packed_runs.XZ_PRESET))
  os.remove(plain)
  return packed


def _packed_manifest_text(path: str) -> str:
  """The text of a `sweep.json.xz`; a torn, empty or non-xz file is a one-line error."""
  fix = "Restore it from git (git checkout -- <file>) or run the --mode=sweep command again."
  try:
    with paths.open_file(path, "rb") as f:
      data = lzma.decompress(f.read())
    return data.decode("utf-8")
  except (lzma.LZMAError, EOFError) as e:
    raise user_files.file_error(path, f"cannot be read as xz ({e})", fix,
                                what=_MANIFEST_WHAT) from None
  except UnicodeDecodeError as e:
    raise user_files.file_error(path, f"is not UTF-8 once unpacked ({e})", fix,
                                what=_MANIFEST_WHAT) from None
  except OSError as e:
    raise user_files.file_error(path, f"cannot be read: {e.strerror or e}",
                                "Check its permissions.", what=_MANIFEST_WHAT) from None


_MANIFEST_WHAT = "the sweep's manifest, written by --mode=sweep"
_MANIFEST_FIX = "Run the --mode=sweep command again to rewrite it."
# What the report and --reuse_runs_from read: field -> its JSON type.
_MANIFEST_FIELDS = {"sweep_file": str, "config": str, "overrides": list, "points": list}
_POINT_FIELDS = {"name": str, "overrides": dict, "num_steps": int}


def _manifest_problem(manifest: dict) -> str:
  """What is missing or of the wrong type in a manifest; "" when it is whole."""
  for key, kind in _MANIFEST_FIELDS.items():
    if not isinstance(manifest.get(key), kind):
      return f"its {key!r} is missing or not a {kind.__name__}"
  for i, point in enumerate(manifest["points"]):
    if not isinstance(point, dict):
      return f"point {i} of 'points' is not an object"
    for key, kind in _POINT_FIELDS.items():
      if not isinstance(point.get(key), kind):
        return f"point {i} of 'points' has no {key!r} of type {kind.__name__}"
    if point["name"] in ("", ".", "..") or os.sep in point["name"]:
      return f"point {i} of 'points' has the name {point['name']!r}, which is not a folder name"
  return ""
