"""Token files (transformer/data/token_file.py): layout, order, sharding and resume position."""

import json

import numpy as np
import pytest

from transformer.config import ConfigError
from transformer.data import token_file


def _docs(n_docs=30, length=50, vocab=259, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.integers(3, vocab, size=rng.integers(1, length)) for _ in range(n_docs)]


def _write(tmp_path, vocab=259, docs=None):
  docs = _docs(vocab=vocab) if docs is None else docs
  return token_file.write_token_file(str(tmp_path), {"train": docs, "validation": docs[:5]},
                                     vocab_size=vocab), docs


def test_dtype_is_uint16_up_to_65536_ids_else_uint32(tmp_path):
  assert token_file.dtype_for(259) == np.uint16
  assert token_file.dtype_for(65_536) == np.uint16  # ids 0 .. 65535
  assert token_file.dtype_for(65_537) == np.uint32
  meta, docs = _write(tmp_path / "small")
  assert meta["dtype"] == "uint16"
  big_docs = [np.array([3, 70_000, 65_535]), np.array([100_000])]
  meta, _ = _write(tmp_path / "big", vocab=100_001, docs=big_docs)
  assert meta["dtype"] == "uint32"
  raw = np.fromfile(tmp_path / "big" / "train.bin", "<u4")
  np.testing.assert_array_equal(raw, [3, 70_000, 65_535, 2, 100_000, 2])  # EOS after each
  assert (tmp_path / "big" / "train.bin").stat().st_size == 6 * 4


def test_file_is_the_documents_each_followed_by_eos(tmp_path):
  meta, docs = _write(tmp_path)
  raw = np.fromfile(tmp_path / "train.bin", "<u2")
  np.testing.assert_array_equal(raw, np.concatenate([np.append(d, 2) for d in docs]))
  assert meta["splits"]["train"] == {"file": "train.bin", "tokens": raw.size,
                                     "documents": len(docs)}
  on_disk = json.loads((tmp_path / "meta.json").read_text())
  assert on_disk["vocab_size"] == 259 and on_disk["eos_id"] == 2
  assert on_disk["tokenizer"] == "bytes"


def test_an_id_the_dtype_cannot_hold_is_refused(tmp_path):
  with pytest.raises(ValueError, match="does not fit uint16"):
    token_file.write_token_file(str(tmp_path), {"train": [np.array([70_000])]}, vocab_size=259)


def test_a_truncated_file_is_reported(tmp_path):
  _write(tmp_path)
  with open(tmp_path / "train.bin", "r+b") as f:
    f.truncate(10)
  with pytest.raises(ConfigError, match="truncated"):
    token_file.token_file_data(str(tmp_path), 8, 4, 0)


def _batches(directory, n, seed=0, process_index=0, process_count=1, batch=8, seq_len=8):
  data, _ = token_file.token_file_data(str(directory), seq_len, batch, seed,
                                       process_index=process_index, process_count=process_count)
  return [data.next_train_batch() for _ in range(n)]


def test_rows_are_chunks_of_the_stream_shifted_by_one(tmp_path):
  _write(tmp_path)
  stream = np.fromfile(tmp_path / "train.bin", "<u2").astype(np.int32)
  data, _ = token_file.token_file_data(str(tmp_path), 8, 4, 0)
  batch = data.next_train_batch()
  assert batch["inputs"].shape == batch["targets"].shape == batch["weights"].shape == (4, 8)
  assert batch["inputs"].dtype == np.int32 and batch["weights"].dtype == np.float32
  for c, inputs, targets in zip(data.train_iterator.chunk_indices(0), batch["inputs"],
                                batch["targets"]):
    np.testing.assert_array_equal(inputs, stream[c * 9:c * 9 + 8])
    np.testing.assert_array_equal(targets, stream[c * 9 + 1:c * 9 + 9])
  assert batch["weights"].min() == 1.0  # no padding in training rows


def test_order_depends_on_the_seed_only(tmp_path):
  _write(tmp_path)
  a, b = _batches(tmp_path, 6), _batches(tmp_path, 6)
  other = _batches(tmp_path, 6, seed=1)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x["inputs"], y["inputs"])
  assert any(not np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(a, other))


def test_each_epoch_visits_every_chunk_once_in_a_new_order(tmp_path):
  _write(tmp_path)
  data, _ = token_file.token_file_data(str(tmp_path), 8, 4, 0)
  it = data.train_iterator
  per_epoch = it.batches_per_epoch
  epoch0 = np.concatenate([it.chunk_indices(s) for s in range(per_epoch)])
  epoch1 = np.concatenate([it.chunk_indices(s) for s in range(per_epoch, 2 * per_epoch)])
  assert len(set(epoch0)) == len(epoch0) == per_epoch * 4
  assert set(epoch0) <= set(range(it.chunks)) and set(epoch1) <= set(range(it.chunks))
  assert not np.array_equal(epoch0, epoch1)


def test_processes_split_each_global_batch(tmp_path):
  _write(tmp_path)
  whole = _batches(tmp_path, 5, batch=8)
  parts = [_batches(tmp_path, 5, process_index=p, process_count=2, batch=8) for p in (0, 1)]
  for s in range(5):
    assert parts[0][s]["inputs"].shape == (4, 8)
    joined = np.concatenate([parts[0][s]["inputs"], parts[1][s]["inputs"]])
    np.testing.assert_array_equal(joined, whole[s]["inputs"])


def test_resume_position_continues_exactly(tmp_path):
  _write(tmp_path)
  straight = _batches(tmp_path, 40)  # several epochs
  data, _ = token_file.token_file_data(str(tmp_path), 8, 8, 0)
  for _ in range(17):
    data.next_train_batch()
  state = json.loads(json.dumps(data.train_iterator.get_state()))
  assert state["step"] == 17
  resumed, _ = token_file.token_file_data(str(tmp_path), 8, 8, 0)
  resumed.train_iterator.set_state(state)
  for s in range(17, 40):
    np.testing.assert_array_equal(resumed.next_train_batch()["inputs"], straight[s]["inputs"])


def test_resuming_with_another_batch_size_is_refused(tmp_path):
  _write(tmp_path)
  data, _ = token_file.token_file_data(str(tmp_path), 8, 8, 0)
  other, _ = token_file.token_file_data(str(tmp_path), 8, 4, 0)
  with pytest.raises(ValueError, match="global_batch_size"):
    other.train_iterator.set_state(data.train_iterator.get_state())


def test_eval_covers_the_split_once_with_padding_weighted_zero(tmp_path):
  meta, _ = _write(tmp_path)
  tokens = meta["splits"]["validation"]["tokens"]
  for count in (1, 2):
    parts = []
    for p in range(count):
      data, _ = token_file.token_file_data(str(tmp_path), 8, 4, 0, process_index=p,
                                           process_count=count)
      parts.append(list(data.eval_batches()))
    assert len({len(b) for b in parts}) == 1  # every process: the same number of batches
    # Each token but the first of a chunk is a target once; padding has weight 0.
    weighted = sum(b["weights"].sum() for batches in parts for b in batches)
    chunks = -(-tokens // 9)
    assert weighted == tokens - chunks


def test_missing_sidecar_says_how_to_make_one(tmp_path):
  with pytest.raises(ConfigError, match="--mode=prepare"):
    token_file.token_file_data(str(tmp_path), 8, 4, 0)


# --- issue 31: a token file or sidecar that a user or a crash has touched -------------------

def _one_line_error(tmp_path) -> str:
  with pytest.raises(ConfigError) as e:
    token_file.token_file_data(str(tmp_path), 8, 4, 0)
  assert "\n" not in str(e.value)
  return str(e.value)


@pytest.mark.parametrize("size,needle", [(0, "is empty"), (11, "not a whole number of uint16"),
                                         (None, "cannot be read")])
def test_a_token_file_of_the_wrong_size_is_one_line(tmp_path, size, needle):
  _write(tmp_path)
  if size is None:
    (tmp_path / "train.bin").unlink()
  else:
    with open(tmp_path / "train.bin", "r+b") as f:
      f.truncate(size)
  assert needle in _one_line_error(tmp_path)


def test_an_id_at_or_above_the_vocabulary_is_caught_when_opened(tmp_path):
  """Not at step 1 as a NaN loss blamed on the learning rate."""
  meta, _ = _write(tmp_path)
  raw = np.fromfile(tmp_path / "train.bin", "<u2")
  raw[7] = 259  # the sidecar's vocab_size: one past the last id
  raw.tofile(tmp_path / "train.bin")
  message = _one_line_error(tmp_path)
  assert "id 259 at position 7 in " in message and "is >= vocab_size 259:" in message


@pytest.mark.parametrize("edit", [
    lambda m: m.pop("splits"), lambda m: m.update(splits=[]),
    lambda m: m["splits"]["train"].pop("tokens"), lambda m: m.update(vocab_size="259"),
    lambda m: m["splits"].update(train="train.bin")])
def test_a_sidecar_without_its_fields_is_one_line(tmp_path, edit):
  _write(tmp_path)
  meta = json.loads((tmp_path / "meta.json").read_text())
  edit(meta)
  (tmp_path / "meta.json").write_text(json.dumps(meta))
  assert "meta.json" in _one_line_error(tmp_path)


def test_a_sidecar_that_is_not_utf8_is_one_line(tmp_path):
  _write(tmp_path)
  (tmp_path / "meta.json").write_bytes(b'{"format": "\xff"}')
  assert "meta.json" in _one_line_error(tmp_path)
