"""The local_text TFDS builder on a tiny temporary corpus."""

import tensorflow_datasets as tfds

from transformer.data.builders.local_text import (is_validation, local_text_builder,
                                                  list_source_files)


def test_builds_train_and_validation_split_by_file(tiny_corpus):
  builder = local_text_builder(tiny_corpus["source_dir"], (".py",), 20, tiny_corpus["data_dir"])
  builder.download_and_prepare()
  files = list_source_files(tiny_corpus["source_dir"], (".py",))
  assert len(files) == 40 and not any(f.startswith("test") for f in files)

  seen = {}
  for split in ("train", "validation"):
    for ex in tfds.as_numpy(builder.as_dataset(split=split)):
      seen[ex["path"].decode()] = split
      assert ex["text"].decode().startswith("# file ")
  assert sorted(seen) == files
  for path, split in seen.items():
    assert (split == "validation") == is_validation(path, 20)
  assert 0 < sum(s == "validation" for s in seen.values()) < 40

  # Prepared once: a second builder reads the same data without regenerating it.
  again = local_text_builder(tiny_corpus["source_dir"], (".py",), 20, tiny_corpus["data_dir"])
  assert again.is_prepared()
  assert again.info.splits["train"].num_examples == builder.info.splits["train"].num_examples


def test_default_source_is_the_stdlib_without_tests():
  import sysconfig
  files = list_source_files(sysconfig.get_paths()["stdlib"], (".py",))
  assert "os.py" in files and "json/decoder.py" in files
  assert not any("/test/" in f"/{f}" or "site-packages" in f for f in files)
