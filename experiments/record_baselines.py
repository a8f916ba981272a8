"""Records the baselines of a study's runs that predate `baselines.json`, once, in the study.

  python experiments/record_baselines.py experiments/results/lr_sensitivity \
      --source_dir="$(python3.11 -c "import sysconfig; print(sysconfig.get_path('stdlib'))")"

Runs started since `transformer/train/baselines.py` landed record their eval split's unigram
and bigram entropies, training tokens and parameter count in their own `baselines.json`. The
committed runs from before it have none, so their reports could not say where the bigram level
is. This script measures the same record for each of them, the way a run does at its start (the
eval split of the run's saved data config, rebuilt here; parameters counted on the model its
config builds), and writes them to `<study>/baselines.json`, which
`transformer.report.runs.recorded_baselines` reads for a run without its own:

  {"definition": ..., "records": [{<a run's baselines record>, "points": [names]}, ...]}

The default corpus is the stdlib of the Python that builds it, so `--source_dir` names the one
the runs read (experiments/README.md, "Which corpus each study read"). The record is checked
before it is written: its unigram entropy must equal the one the study's committed entropy
cache (`unigram_entropy.json`) holds for that run, to 1e-9, or nothing is written. That check
is what makes the rebuilt split the one the runs were scored on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformer import packed_runs, paths
from transformer.sweep.points import read_manifest
from transformer.report.runs import (STUDY_BASELINES, read_cache, recorded_identity,
                                    entropy_key, saved_config)
from transformer.train import baselines, runtime


def _params(saved: dict) -> int:
  """The parameter count of the model the saved config builds (shapes only, no values)."""
  import jax
  import jax.numpy as jnp
  from transformer import kinds
  from transformer.config import from_config_dict
  from transformer.train.state import count_params
  cfg = from_config_dict({k: v for k, v in saved.items() if k != "provenance"})
  model = kinds.build_model(cfg.model)
  tokens = jnp.zeros((1, cfg.data.seq_len), jnp.int32)
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens))
  return count_params(shapes["params"])


def _entropies(saved: dict, source_dir: str) -> tuple[float, float, int]:
  from transformer.config import DataConfig
  from transformer.data.pipeline import lm_data  # TensorFlow
  data = dict(saved["data"])
  if source_dir and not data.get("source_dir"):
    data["source_dir"] = source_dir
  cfg = DataConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
  split = lm_data(cfg, saved["train"]["batch_size"], seed=0, workdir=None)
  return baselines.plug_in_entropies(split.eval_batches())


def _cached_unigram(cache: dict, saved: dict):
  """The entropy cache's value for the run: under the data identity it recorded (its data
  config alone for a run without one), else under that of the data here."""
  from transformer import provenance
  data = saved.get("data")
  for identity in (recorded_identity(saved),
                   provenance.data_identity(saved.get("data") or {})["digest"]):
    value = cache.get(entropy_key(data, identity))
    if isinstance(value, (int, float)):
      return value
  return None


def record_study(sweep_dir: str, source_dir: str) -> dict:
  """Measures and writes `<sweep_dir>/baselines.json` for its runs without a record of their
  own; returns it. Raises ValueError when a measured unigram entropy differs from the cache."""
  cache = read_cache(os.path.join(sweep_dir, "unigram_entropy.json"))
  by_key: dict = {}
  for point in read_manifest(sweep_dir)["points"]:
    workdir = os.path.join(sweep_dir, point["name"])
    if os.path.islink(workdir) or packed_runs.link_target(workdir):
      continue  # reused from another study: recorded there
    if baselines.read(workdir) is not None:
      continue  # the run recorded its own
    saved = saved_config(workdir)
    if saved is None or saved.get("model", {}).get("kind") != "decoder_lm":
      continue
    data_key = json.dumps(saved["data"], sort_keys=True)
    model_key = json.dumps(saved["model"], sort_keys=True)
    tokens = point["num_steps"] * saved["train"]["batch_size"] * saved["data"]["seq_len"]
    by_key.setdefault((data_key, model_key, tokens), []).append((point["name"], saved))
  measured_data: dict = {}
  measured_params: dict = {}
  records = []
  for (data_key, model_key, tokens), members in by_key.items():
    saved = members[0][1]
    if data_key not in measured_data:
      unigram, bigram, scored = _entropies(saved, source_dir)
      cached = _cached_unigram(cache, saved)
      if not isinstance(cached, (int, float)) or not math.isclose(unigram, cached,
                                                                  rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"{sweep_dir}: the rebuilt eval split's unigram entropy {unigram!r} "
                         f"is not the committed cache's {cached!r} for {members[0][0]}: "
                         "another corpus (--source_dir) than the runs read.")
      measured_data[data_key] = (unigram, bigram, scored)
    if model_key not in measured_params:
      measured_params[model_key] = _params(saved)
    unigram, bigram, scored = measured_data[data_key]
    params = measured_params[model_key]
    records.append({"split": saved["data"].get("eval_split", "validation"),
                    "scored_tokens": scored, "unigram_nats": unigram, "bigram_nats": bigram,
                    "definition": baselines.DEFINITION, "train_tokens": tokens,
                    "params": params, "tokens_per_param": tokens / params,
                    "points": sorted(name for name, _ in members)})
  out = {"written_by": "experiments/record_baselines.py (runs from before baselines.json; "
                       "unigram entropy checked against unigram_entropy.json)",
         "source_dir": source_dir, "records": records}
  if records:
    paths.write_text(os.path.join(sweep_dir, STUDY_BASELINES), json.dumps(out, indent=1) + "\n")
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("sweep_dirs", nargs="+")
  parser.add_argument("--source_dir", default="",
                      help="the corpus the runs read, when their config leaves it unset")
  args = parser.parse_args(argv)
  runtime.skip_absent_tpu()  # parameters are counted on shapes: no accelerator needed
  for sweep_dir in args.sweep_dirs:
    out = record_study(sweep_dir, args.source_dir)
    for r in out["records"]:
      print(f"{sweep_dir}: {len(r['points'])} runs: unigram {r['unigram_nats']:.4f}, bigram "
            f"{r['bigram_nats']:.4f} nats/token; {r['train_tokens']:,} tokens, "
            f"{r['params']:,} params ({r['tokens_per_param']:.3g} per param)")


if __name__ == "__main__":
  main()
