"""Reading a sweep's runs: each point's workdir (config.json, metrics) as a `Run`, and its
status: finished, diverged, collapsed (stuck at the unigram entropy of its eval data),
incomplete or missing. The report's other parts (statistics, figures, summary) take these."""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
from typing import Any, Optional, Sequence


from transformer import kinds, packed_runs, paths, provenance, user_files
from transformer import study as study_lib
from transformer.sweep import points as sweep_lib
from transformer.workdir import CONFIG_FILE, PROVENANCE, read_metrics

COLLAPSE_TOLERANCE = 0.02  # relative: eval loss >= (1 - this) * unigram entropy = collapsed
NOT_METRICS = ("step", "split", "time", "tokens", "examples")
LAYER_NAME = re.compile(r"^(?P<pre>.*?)layers?[_/.]?(?P<index>\d+)(?P<post>.*)$")


@dataclasses.dataclass
class Run:
  """One point of the sweep and what its workdir holds."""
  name: str
  overrides: dict
  num_steps: int
  workdir: str
  metrics: dict
  status: str = "missing"  # finished | diverged | collapsed | incomplete | missing
  detail: str = ""
  _vocab: Optional[tuple] = dataclasses.field(default=None, init=False, repr=False, compare=False)

  @property
  def seed(self):
    return self.overrides.get("seed")

  @property
  def group(self) -> tuple:
    return tuple((k, v) for k, v in self.overrides.items() if k != "seed")

  @property
  def final(self) -> dict:
    evals = self.metrics.get("eval", [])
    return evals[-1] if evals else {}

  @property
  def healthy(self) -> bool:
    return self.status == "finished"

  def vocab_size(self) -> Optional[int]:
    """`model.vocab_size` from the run's config.json (None without one), read once per
    workdir: a study's analysis and robustness section ask for it ~10^5 times, and parsing the
    file each time was half of regenerating a report."""
    if self._vocab is None or self._vocab[0] != self.workdir:
      size = config_section(saved_config(self.workdir) or {}, "model").get("vocab_size")
      self._vocab = (self.workdir, size if isinstance(size, int) and size > 0 else None)
    return self._vocab[1]


def _finite(row: dict, keys=("loss", "grad_norm")) -> bool:
  return all(math.isfinite(row[k]) for k in keys if isinstance(row.get(k), (int, float)))


def classify(run: Run, unigram_entropy: Optional[float]) -> None:
  """Sets `run.status` and `run.detail` from its metrics."""
  rows = run.metrics.get("train", []) + run.metrics.get("eval", [])
  if not rows:
    run.status, run.detail = "missing", "no metrics yet"
    return
  bad = next((r for r in rows if not _finite(r)), None)
  if bad is not None:
    run.status, run.detail = "diverged", f"non-finite {bad['split']} metrics at step {bad['step']}"
    return
  final = run.final
  if not final or final["step"] < run.num_steps:
    last = max(r["step"] for r in rows)
    run.status, run.detail = "incomplete", f"at step {last} of {run.num_steps}"
    return
  # A run of one step measures the model at init (grad_profile and the other at-init studies):
  # it never trained, so it cannot have collapsed.
  if unigram_entropy and run.num_steps > 1 and collapsed(final["loss"], unigram_entropy):
    run.status = "collapsed"
    run.detail = (f"final eval loss {final['loss']:.4f} >= {1 - COLLAPSE_TOLERANCE:g} x the "
                  f"unigram entropy {unigram_entropy:.4f} nats/token")
    return
  run.status, run.detail = "finished", ""


def collapsed(final_eval_loss: float, entropy: float) -> bool:
  """The one collapse rule of every study: the final eval loss is at least
  `1 - COLLAPSE_TOLERANCE` times the unigram entropy of the eval data (the model predicts no
  better than token frequencies). Eval loss alone: the train loss's trend depends on the
  seed's data order (a collapsed model's train loss drifts down with some orders), so a rule
  that reads it labels the same failure differently per seed (issue 46)."""
  return final_eval_loss >= (1 - COLLAPSE_TOLERANCE) * entropy


def wall_seconds(run: Run) -> Optional[float]:
  """The run's wall time: per start of the run (its provenance records), seconds from the
  first to the last metrics row written after that start, summed. A run stopped and resumed
  later does not count the pause; start-up and the first compilation before each start's first
  row are not in it. None without timed rows."""
  times = sorted(row["time"] for rows in run.metrics.values() for row in rows if "time" in row)
  if not times:
    return None
  starts = sorted(t for t in (start_time(r) for r in provenance.read_records(run.workdir)[1:])
                  if t is not None)
  segments: dict[int, list[float]] = {}
  for t in times:
    segments.setdefault(bisect.bisect_right(starts, t), []).append(t)
  return sum(max(seg) - min(seg) for seg in segments.values())


def start_time(record: dict) -> Optional[float]:
  """A provenance record's start time (ISO 8601, whole seconds) as epoch seconds, None when
  absent or unreadable."""
  try:
    return datetime.datetime.fromisoformat(record["time"]).timestamp()
  except (KeyError, TypeError, ValueError):
    return None


def entropy_key(data: Any, identity: Optional[str]) -> str:
  """The entropy cache's key: the data config and the digest of the bytes it read
  (`provenance.data_identity`): the default corpus, this Python's stdlib, differs per Python.
  Without a digest (runs from before provenance, whose committed caches hold such keys) the
  data config's alone."""
  payload = data if identity is None else {"data": data, "identity": identity}
  return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def recorded_identity(saved: dict) -> Optional[str]:
  """The digest of the data the run recorded reading at its first start; None without one."""
  return (provenance.recorded_data(config_section(saved, PROVENANCE)) or {}).get("digest")


BASELINES = "baselines.json"  # written by a run at its start: unigram/bigram nats, tokens, params
# In a study folder: the same records measured afterwards for its runs from before BASELINES
# (experiments/record_baselines.py), `{"records": [{..., "points": [names]}]}`.
STUDY_BASELINES = "study_baselines.json"


def recorded_baselines(workdir: str) -> dict:
  """The run's `baselines.json` (`{"unigram_nats", "bigram_nats", "train_tokens", "params",
  "tokens_per_param", ...}`), from its folder or its study's packed file, else its entry in
  its study's `study_baselines.json`; `{}` when there is none or the file is torn or not a
  JSON object."""
  recorded = read_cache(paths.join(workdir, BASELINES))
  if recorded or paths.exists(paths.join(workdir, BASELINES)):
    return recorded
  try:
    value = json.loads(packed_runs.text(workdir, BASELINES) or "{}")
  except ValueError:
    value = {}
  if isinstance(value, dict) and value:
    return value
  if paths.has_scheme(workdir):
    return {}
  home = linked_from(workdir) or workdir.rstrip("/")
  study = read_cache(os.path.join(os.path.dirname(home), STUDY_BASELINES))
  name = os.path.basename(home)
  for record in study.get("records", []) if isinstance(study.get("records"), list) else []:
    if isinstance(record, dict) and name in (record.get("points") or []):
      return {k: v for k, v in record.items() if k != "points"}
  return {}


def linked_from(workdir: str) -> Optional[str]:
  """The run a reused run links to (a symlinked folder, or a packed link), followed to the
  study that ran it (warmup_length links to warmup_stability's links to lr_sensitivity's
  runs); None for a run of its own."""
  workdir = workdir.rstrip("/")
  if os.path.islink(workdir):
    return os.path.realpath(workdir)
  home = packed_runs.link_target(workdir)
  for _ in range(8):  # links are one or two hops; a cycle is not followed for ever
    further = None if home is None else packed_runs.link_target(home)
    if further is None:
      break
    home = further
  return home


def _kind_has_baselines(name) -> bool:
  """Whether runs of kind `name` record unigram and bigram baselines (`kinds.Kind.baselines`);
  False for a name the registry does not know."""
  kind = kinds.KINDS.get(name)
  return kind is not None and kind.baselines


def unigram_entropy(workdir: str, cache_dir: str) -> Optional[float]:
  """Entropy (nats/token) of the token frequencies of the eval split of the run in `workdir`
  (the collapse check's reference), read, never rebuilt from the data: from the run's
  baselines record (`recorded_baselines`: written at its start, or measured afterwards for its
  study), else from the entropy cache `cache_dir/unigram_entropy.json` that the studies from
  before the record committed (keyed by `entropy_key` under the data identity the run
  recorded, its data config alone for a run without one), else from the cache of the study a
  linked run comes from. None when there is none of them, and for kinds other than decoder
  LMs: collapse is then not checked."""
  recorded_value = recorded_baselines(workdir).get("unigram_nats")
  if isinstance(recorded_value, (int, float)):  # recorded by the run at its start
    return float(recorded_value)
  saved = saved_config(workdir)
  if saved is None or not _kind_has_baselines(config_section(saved, "model").get("kind")):
    return None
  key = entropy_key(saved.get("data"), recorded_identity(saved))
  value = read_cache(paths.join(cache_dir, "unigram_entropy.json")).get(key)
  if isinstance(value, (int, float)):
    return value
  linked = None if paths.has_scheme(workdir) else linked_from(workdir)
  if linked:
    # A run linked from another sweep (--reuse_runs_from): that sweep's cache holds the value
    # measured for it, which matters for a run that recorded no data identity (its key alone
    # cannot tell which Python's stdlib it read).
    value = read_cache(os.path.join(os.path.dirname(linked), "unigram_entropy.json")).get(key)
    if isinstance(value, (int, float)):
      return value
  return None


def saved_config(workdir: str) -> Optional[dict]:
  """The run's config.json as a dict, None when there is none; a file that is not a JSON
  object is a one-line UserFileError."""
  path, text = paths.join(workdir, CONFIG_FILE), None
  if not paths.exists(path):
    text = packed_runs.text(workdir, CONFIG_FILE)  # a run of a packed study
    if text is None:
      return None
  return user_files.read_json_object(path, user_files.SAVED_CONFIG, user_files.SAVED_CONFIG_FIX,
                                     text=text)


def config_section(saved: dict, name: str) -> dict:
  value = saved.get(name)
  return value if isinstance(value, dict) else {}


def read_cache(path: str) -> dict:
  """The entropy cache; `{}` (so: computed again) when it is missing or corrupt."""
  try:
    with paths.open_file(path, encoding="utf-8") as f:
      cache = json.load(f)
  except (OSError, ValueError):
    return {}
  return cache if isinstance(cache, dict) else {}


def load_runs(sweep_dir: str, entropy: bool = True) -> list[Run]:
  """The sweep's runs, classified (collapse is checked only with `entropy`, which computes
  and caches the unigram entropy of each run's data)."""
  manifest = sweep_lib.read_manifest(sweep_dir)
  runs = []
  for p in manifest["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    run = Run(p["name"], p["overrides"], p["num_steps"], workdir, read_metrics(workdir))
    runs.append(run)
  for run in runs:
    classify_run(run, sweep_dir, entropy)
  return runs


def classify_run(run: Run, sweep_dir: str, entropy: bool = True) -> None:
  """`classify(run, ...)` with its data's unigram entropy (when `entropy`) for collapse."""
  h = None
  if entropy and run.metrics.get("eval"):
    try:
      h = unigram_entropy(run.workdir, sweep_dir)
    except Exception as e:  # noqa: BLE001 -- the report goes on without collapse marks
      print(f"[report] unigram entropy of {run.workdir}'s data not computed ({e}); "
            "collapse is not checked.")
  classify(run, h)



def eval_metric_names(runs: Sequence[Run]) -> list[str]:
  names = []
  for r in runs:
    for k, v in r.final.items():
      if k not in NOT_METRICS and isinstance(v, (int, float)) and k not in names:
        names.append(k)
  return names


def groups(runs: Sequence[Run]) -> dict[tuple, list[Run]]:
  out: dict[tuple, list[Run]] = {}
  for r in runs:
    out.setdefault(r.group, []).append(r)
  return out


# How often a run logs, evaluates or records diagnostics: what it writes down, not what it
# trains, so never an axis of a figure or a label (long_training's longer runs record
# diagnostics less often; its figures are about their length).
CADENCE_FIELDS = ("train.log_every", "train.eval_every", "train.diagnostics_every")


def swept_fields(runs: Sequence[Run]) -> list[str]:
  """Fields (other than seed and `CADENCE_FIELDS`) that take more than one value across the
  points."""
  fields = []
  for r in runs:
    for k in r.overrides:
      if k != "seed" and k not in CADENCE_FIELDS and k not in fields:
        fields.append(k)
  return [f for f in fields if len({_value(r, f) for r in runs}) > 1]


def _value(run: Run, field: str) -> str:
  """The run's value of `field`, comparable across runs (unset: `null`)."""
  return json.dumps(run.overrides.get(field), default=str)


# The statuses of a point that has not ended: a study cut off midway has them.
PENDING = ("missing", "incomplete")


def tied_fields(runs: Sequence[Run], fields: Sequence[str]) -> dict[str, str]:
  """{field: the field of `fields` that determines it across the runs}: a figure against it
  would show the same runs as the figure against that field, at fewer x positions. Of two
  fields that determine each other (long_training's warm-up is a tenth of its steps) the
  earlier keeps its figure; a field that another one sets with more values (depth's
  scan_layers, on for 12 and 24 layers, unset for 6) has none."""
  tied = {}
  for i, f in enumerate(fields):
    for j, g in enumerate(fields):
      if g != f and _determines(runs, g, f) and (j < i or not _determines(runs, f, g)):
        tied[f] = g
        break
  return tied


def _determines(runs: Sequence[Run], g: str, f: str) -> bool:
  """Whether each value of field `g` across `runs` comes with a single value of `f`."""
  seen: dict = {}
  pairs = ((_value(r, g), _value(r, f)) for r in runs)
  return all(seen.setdefault(key, value) == value for key, value in pairs)


def group_label(group: tuple, swept: Optional[Sequence[str]] = None) -> str:
  """`placement=post, learning_rate=0.01`: the group's fields (only those in `swept`, the
  fields that vary across the sweep, when given) by their last name part; a field the group's
  points leave unset shows as `config` (the value of --config)."""
  return ", ".join(f"{k.rsplit('.', 1)[-1]}={'config' if v is None else v}" for k, v in group
                   if swept is None or k in swept) or "all"


def study_claim(manifest: dict) -> str:
  """The claim as the sweep file words it now (`CLAIM`), else as the manifest recorded it when
  the sweep ran."""
  try:
    return study_lib.load(manifest["sweep_file"]).claim or manifest.get("claim", "")
  except Exception:  # noqa: BLE001
    return manifest.get("claim", "")
