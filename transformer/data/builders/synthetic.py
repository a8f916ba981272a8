"""`synthetic_seq2seq`: small sequence-to-sequence tasks on digit strings, built offline.

Configs (`data.name = "synthetic_seq2seq/<config>"`):
  reverse: "31415" -> "51413"
  sort:    "31415" -> "11345"
  add:     "123+4567" -> "4690" (two non-negative integers, their sum in decimal)

Every example is `{"inputs": str, "targets": str}`. Generation is deterministic from the
config's seed (one `numpy.random.default_rng` stream per split), and validation and test hold
no input that also occurs in train (nor in each other), so eval measures generalization, not
recall. Operand lengths are drawn uniformly from `[min_len, max_len]` digits.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

TASKS = ("reverse", "sort", "add")
_SPLIT_STREAMS = {"train": 0, "validation": 1, "test": 2}


class SyntheticConfig(tfds.core.BuilderConfig):
  """One task with its sizes and seed."""

  def __init__(self, *, task: str, min_len: int = 1, max_len: int = 20, num_train: int = 20_000,
               num_validation: int = 1_000, num_test: int = 1_000, seed: int = 0, **kwargs):
    if task not in TASKS:
      raise ValueError(f"Unknown synthetic task {task!r}; choose one of {list(TASKS)}.")
    if not 1 <= min_len <= max_len:
      raise ValueError(f"Need 1 <= min_len <= max_len, got {min_len}, {max_len}.")
    super().__init__(**kwargs)
    self.task, self.min_len, self.max_len, self.seed = task, min_len, max_len, seed
    self.num_examples = {"train": num_train, "validation": num_validation, "test": num_test}


def _digits(rng: np.random.Generator, min_len: int, max_len: int) -> str:
  n = int(rng.integers(min_len, max_len + 1))
  return "".join(map(str, rng.integers(0, 10, size=n)))


def make_example(task: str, rng: np.random.Generator, min_len: int, max_len: int
                 ) -> dict[str, str]:
  """One `{"inputs", "targets"}` pair of `task`, drawn from `rng`."""
  if task == "add":
    a, b = _digits(rng, min_len, max_len), _digits(rng, min_len, max_len)
    return {"inputs": f"{a}+{b}", "targets": str(int(a) + int(b))}
  x = _digits(rng, min_len, max_len)
  y = x[::-1] if task == "reverse" else "".join(sorted(x))
  return {"inputs": x, "targets": y}


def generate_split(cfg: SyntheticConfig, split: str, exclude: set[str]) -> list[dict[str, str]]:
  """`cfg.num_examples[split]` distinct examples whose inputs are not in `exclude`."""
  rng = np.random.default_rng([cfg.seed, _SPLIT_STREAMS[split]])
  want = cfg.num_examples[split]
  out, seen = [], set(exclude)
  attempts = 0
  while len(out) < want:
    attempts += 1
    if attempts > 50 * want + 1000:
      raise ValueError(
          f"synthetic_seq2seq/{cfg.name}: cannot draw {want} distinct {split} inputs of "
          f"{cfg.min_len}..{cfg.max_len} digits; lower the split sizes or raise max_len.")
    ex = make_example(cfg.task, rng, cfg.min_len, cfg.max_len)
    if ex["inputs"] in seen:
      continue
    seen.add(ex["inputs"])
    out.append(ex)
  return out


class SyntheticSeq2seq(tfds.core.GeneratorBasedBuilder):
  """Digit-string reversal, sorting and addition, with train / validation / test splits."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release."}
  BUILDER_CONFIGS = [
      SyntheticConfig(name=t, task=t, description=f"{t} of digit strings of 1-20 digits.")
      for t in TASKS
  ]

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "inputs": tfds.features.Text(),
            "targets": tfds.features.Text(),
        }),
        supervised_keys=("inputs", "targets"),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # generated, nothing to download
    cfg = self.builder_config
    train = generate_split(cfg, "train", set())
    train_inputs = {ex["inputs"] for ex in train}
    validation = generate_split(cfg, "validation", train_inputs)
    test = generate_split(cfg, "test", train_inputs | {ex["inputs"] for ex in validation})
    return {"train": self._generate_examples(train),
            "validation": self._generate_examples(validation),
            "test": self._generate_examples(test)}

  def _generate_examples(self, examples):
    for i, ex in enumerate(examples):
      yield i, ex


def synthetic_builder(task: str, data_dir: str | None = None, **sizes) -> SyntheticSeq2seq:
  """The builder of `task`; `sizes` (min_len, max_len, num_train, ..., seed) make a custom
  config whose name records them. Call `download_and_prepare()` to build it once."""
  if not sizes:
    return SyntheticSeq2seq(config=task, data_dir=data_dir or None)
  name = task + "_" + "_".join(f"{k}{v}" for k, v in sorted(sizes.items()))
  return SyntheticSeq2seq(config=SyntheticConfig(name=name, task=task, **sizes),
                          data_dir=data_dir or None)


def from_config(cfg) -> SyntheticSeq2seq:
  """The builder `data.name=synthetic_seq2seq/<task>` reads (`transformer.datasets`)."""
  from transformer.errors import ConfigError
  task = cfg.name.partition("/")[2]
  if task not in TASKS:
    raise ConfigError(f"--config.data.name={cfg.name!r}: choose synthetic_seq2seq/<task> with "
                      f"task in {list(TASKS)}.")
  return synthetic_builder(task, cfg.data_dir)
