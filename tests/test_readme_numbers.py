"""Every result `experiments/README.md` quotes is recomputed here from the committed runs
(issue 46: no hand-typed result in a README; the numbers it quoted before matched no run).

Each check is a phrase of the README with its numbers filled in from the committed data
(`results.csv`, the runs' baselines records); the README must contain it word for word
(whitespace aside). A decimal number in the README that no check covers must be a setting,
threshold or version, listed in SETTINGS with what it is: a new result typed by hand fails."""

import csv
import json
import os
import re
import statistics

from transformer.report.runs import recorded_baselines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("experiments", "results")
README = os.path.join(REPO, "experiments", "README.md")

# Decimal numbers of the README that are not results, and what each is.
SETTINGS = {
    "0.98": "the collapse rule's factor", "0.3": "X, the tolerance of the calls",
    "0.2": "margins and neighbouring thresholds", "0.4": "depth_post's margins",
    "0.5": "DyT's alpha_0 and the X neighbour", "0.05": "DyT's alpha_0", "0.1": "DyT's alpha_0",
    "0.01": "hybrid_norm's margin", "0.02": "depth_lr's margin",
    "2604.23434": "an arXiv identifier", "3.12.1": "a Python version",
    "3.11.7": "a Python version", "1.0": "the clipping norm",
}


def _rows(study: str) -> list[dict]:
  """The study's results.csv rows, each with the run's folder, `<study dir>/<point>`."""
  with open(os.path.join(REPO, RESULTS, study, "results.csv"), encoding="utf-8") as f:
    return [{**row, "workdir": os.path.join(REPO, RESULTS, study, row["point"])}
            for row in csv.DictReader(f)]


def _baselines(row: dict) -> dict:
  return recorded_baselines(row["workdir"])


def _lr(value: float) -> str:
  """0.001 -> "1e-3", 0.0003 -> "3e-4": how the README writes LRs."""
  mantissa, exponent = f"{value:.0e}".split("e")
  return f"{mantissa}e-{int(exponent[1:])}"


def _finished(rows: list[dict]) -> list[dict]:
  return [r for r in rows if r["status"] == "finished"]


def _best_mean(rows: list[dict], placement: str) -> tuple[float, float]:
  """(mean final loss over seeds, LR) at the placement's best LR where every seed finished
  (3 seeds, or 5 where seeds 3 and 4 have landed)."""
  by_lr = {}
  for r in rows:
    if r["model.norm_placement"] == placement:
      by_lr.setdefault(float(r["optim.learning_rate"]), []).append(r)
  return min((statistics.mean(float(r["loss"]) for r in runs), lr)
             for lr, runs in by_lr.items() if len(_finished(runs)) == len(runs))


def _protocol_phrases() -> list[str]:
  rows = _rows("lr_sensitivity")
  base = [_baselines(r) for r in rows]
  tokens, params = base[0]["train_tokens"], min(b["params"] for b in base)
  bigram = base[0]["bigram_nats"]
  gaps = [bigram - min(float(r["loss"]) for r in _finished(rows)
                       if r["model.norm_placement"] == p)
          for p in sorted({r["model.norm_placement"] for r in rows})]
  (post, post_lr), (pre, pre_lr) = _best_mean(rows, "post"), _best_mean(rows, "pre")
  return [f"{tokens:,} training tokens, {params:,} parameters ({tokens / params:.2f} tokens "
          "per parameter)",
          f"each placement's best run ends {min(gaps):.2f}-{max(gaps):.2f} nats below the "
          f"bigram level {bigram:.3f}, and the mean over seeds at each one's best LR is "
          f"post-norm {post:.3f} (LR {_lr(post_lr)}), pre-norm {pre:.3f} ({_lr(pre_lr)})",
          f"(Python 3.12.1's stdlib: {base[0]['unigram_nats']:.4f} and {bigram:.4f} nats/token)",
          f"eval-split unigram entropy {base[0]['unigram_nats']!r} nats/token with 64-byte rows"]


def _long_training_phrase() -> str:
  post = [r for r in _rows("long_training") if r["model.norm_placement"] == "post"
          and r["train.num_steps"] == "2400" and float(r["optim.learning_rate"]) == 0.01]
  collapsed = sum(r["status"] == "collapsed" for r in post)
  counted = f"all {len(post)}" if collapsed == len(post) else f"{collapsed} of {len(post)}"
  return f"(1e-2 collapses in {counted} seeds)"


def _accelerator_phrases() -> list[str]:
  rows = [r for r in _rows("accelerator_replication") if r["status"] != "missing"]
  post = [r for r in rows if r["model.norm_placement"] == "post"]
  trained = {p: {float(r["optim.learning_rate"]): float(r["loss"]) for r in rows
                 if r["model.norm_placement"] == p and r["status"] == "finished"}
             for p in ("pre", "peri")}
  pre = trained["pre"]
  base = _baselines(rows[0])
  losses = [float(r["loss"]) for r in post]
  marked = sum(r["status"] == "collapsed" for r in post)
  number = {1: "one", 2: "two", 3: "three"}
  words = "all three" if marked == len(post) == 3 else f"{number.get(marked, marked)} of them"
  text = {p: ", ".join(f"{loss:.3f} at {_lr(lr)}" for lr, loss in sorted(by_lr.items(),
                                                                          reverse=True))
          for p, by_lr in trained.items()}
  return [f"at none of its {number[len(post)]} LRs** (final eval loss {min(losses):.3f}-"
          f"{max(losses):.3f} nats/token, the unigram level {base['unigram_nats']:.3f}; "
          f"{words} marked collapsed)",
          f"**pre-norm did** ({text['pre']}; the bigram level {base['bigram_nats']:.3f}), so "
          f"post minus pre at each one's best LR is +{min(losses) - min(pre.values()):.2f} "
          f"nats, **and so did peri-norm** ({text['peri']})"]


def _old_corpus_phrase() -> str:
  with open(os.path.join(REPO, RESULTS, "grad_profile", "unigram_entropy.json"),
            encoding="utf-8") as f:
    (value,) = set(json.load(f).values())
  return f"has an eval-split unigram entropy of {value!r} nats/token with their 128-byte rows"


def _phrases() -> list[str]:
  return [*_protocol_phrases(), _long_training_phrase(), *_accelerator_phrases(),
          _old_corpus_phrase()]


def _readme() -> str:
  with open(README, encoding="utf-8") as f:
    return re.sub(r"\s+", " ", f.read())


def test_each_result_the_experiments_readme_quotes_is_the_committed_runs():
  text = _readme()
  missing = [p for p in _phrases() if p not in text]
  assert missing == [], f"experiments/README.md should say, from the committed runs: {missing}"


def test_every_other_decimal_number_in_the_experiments_readme_is_a_setting():
  text = _readme()
  for phrase in _phrases():
    text = text.replace(phrase, " ")
  text = re.sub(r"`[^`]*`", " ", text)  # commands, paths, commit ids
  unknown = sorted({n for n in re.findall(r"(?<![\w.])\d+\.\d+(?:\.\d+)?", text)}
                   - set(SETTINGS))
  assert unknown == [], (f"experiments/README.md quotes {unknown}, which no check recomputes: "
                         "generate it from the committed runs and add a check here, or list "
                         "a setting in SETTINGS")
