"""Validation of the data config fields: bad values stop the run with the field's name."""

import pytest

from transformer.config import ConfigError, DataConfig


@pytest.mark.parametrize("kwargs,match", [
    ({"packing": "stream"}, "data.packing"),
    ({"tokenizer": "wordpiece"}, "data.tokenizer"),
    ({"bucket_boundaries": "64,32"}, "data.bucket_boundaries"),
    ({"bucket_boundaries": "a,b", "packing": "pad"}, "data.bucket_boundaries"),
    ({"bucket_boundaries": "32,64"}, "packing=pad"),
    ({"src_len": 0}, "data.src_len"),
    ({"spm_vocab_size": 100}, "data.spm_vocab_size"),
])
def test_bad_data_values_name_the_field(kwargs, match):
  with pytest.raises(ConfigError, match=match):
    DataConfig(**kwargs)


def test_bucket_lengths():
  assert DataConfig(packing="pad", bucket_boundaries="32, 64,128").bucket_lengths == (32, 64, 128)
  assert DataConfig().bucket_lengths == ()
