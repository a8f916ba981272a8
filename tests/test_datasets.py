"""The dataset registry (transformer/datasets.py): each of our datasets named once, and the
pipeline, the catalog's messages, preflight and provenance all read it."""

import pytest

from transformer import datasets, provenance
from transformer.config import ConfigError, DataConfig
from transformer.data import catalog, pipeline


@pytest.mark.parametrize("dataset", [d for d in datasets.DATASETS if d.builder],
                         ids=lambda d: d.name)
def test_each_builder_has_the_features_it_declares(dataset, tmp_path):
  name = f"{dataset.name}/reverse" if dataset.variant else dataset.name
  cfg = DataConfig(name=name, data_dir=str(tmp_path))
  builder = dataset.build(cfg)  # not prepared: the features are declared up front
  assert set(dataset.features) <= set(builder.info.features)
  assert catalog.text_key(builder, cfg) == dataset.features[0]


def test_lookup():
  assert datasets.lookup("synthetic_seq2seq/sort").name == "synthetic_seq2seq"
  assert datasets.lookup("lm1b") is None and datasets.lookup("local_text/x") is None
  assert datasets.lookup("token_file").identity == "token_file"
  with pytest.raises(ConfigError, match="choose synthetic_seq2seq/<task>"):
    pipeline.get_builder(DataConfig(name="synthetic_seq2seq/nope"))


def test_messages_list_the_registry(monkeypatch, tmp_path):
  with pytest.raises(ConfigError) as e:
    catalog.catalog_builder(DataConfig(name="no_such_dataset_xyz", data_dir=str(tmp_path)))
  for name in datasets.tfds_names():
    assert name in str(e.value)
  assert "token_file" not in datasets.tfds_names()


def test_a_new_dataset_is_one_line(monkeypatch, tiny_corpus):
  """A dataset registered under a new name is built, keyed and fingerprinted with no other
  change (here: local_text's builder under another name)."""
  extra = datasets.Dataset("my_corpus", "transformer.data.builders.local_text:from_config",
                           ("text",), "local_files")
  monkeypatch.setattr(datasets, "_BY_NAME", {**datasets._BY_NAME, extra.name: extra})
  cfg = DataConfig(name="my_corpus", source_dir=tiny_corpus["source_dir"],
                   data_dir=tiny_corpus["data_dir"], validation_percent=20)
  builder = pipeline.get_builder(cfg)
  assert catalog.text_key(builder, cfg) == "text"
  identity = provenance.data_identity({"name": "my_corpus", "source_dir": cfg.source_dir})
  assert identity["source"]["files"] > 0  # fingerprinted as local files, not as TFDS


def _prepare(data_dir, barrier, results):
  barrier.wait()
  try:
    builder = pipeline.get_builder(DataConfig(name="synthetic_seq2seq/reverse", data_dir=data_dir))
    results.put(("ok", builder.info.splits["train"].num_examples))
  except Exception as e:  # noqa: BLE001 -- reported to the test
    results.put(("error", repr(e)[:300]))


def test_processes_preparing_one_dataset_at_once_all_get_it(tmp_path):
  """Sweep points that start together build the same dataset: TFDS's final rename let only
  one of them finish (FileExistsError in the others); they now take turns."""
  import multiprocessing
  ctx = multiprocessing.get_context("spawn")
  n = 3
  barrier, results = ctx.Barrier(n), ctx.Queue()
  procs = [ctx.Process(target=_prepare, args=(str(tmp_path), barrier, results))
           for _ in range(n)]
  for p in procs:
    p.start()
  outcomes = [results.get(timeout=300) for _ in procs]
  for p in procs:
    p.join(timeout=60)
  assert [o[0] for o in outcomes] == ["ok"] * n, outcomes
  assert len({o[1] for o in outcomes}) == 1
