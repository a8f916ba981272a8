"""metrics.jsonl after a resume: a run killed after its last checkpoint re-runs the steps after
it, and the file keeps each (split, step) once (transformer/train/writers.py, `start_at`)."""

import json

from transformer.train.writers import MetricWriter
from transformer.workdir import last_eval, read_metrics


def _row(step, split, loss):
  return json.dumps({"step": step, "split": split, "time": 0.0, "loss": loss}) + "\n"


def _killed_run(path):
  """Rows of steps 100..400 (eval every 200), a foreign line kept as is, and a line torn by
  the kill: the last checkpoint is step 300."""
  text = "".join(_row(s, "train", 1.0) for s in range(100, 401, 100))
  text += _row(200, "eval", 2.0) + "not json, kept\n" + _row(400, "eval", 2.5)
  path.write_text(text + '{"step": 40')


def test_a_resume_drops_the_rows_it_runs_again(tmp_path):
  _killed_run(tmp_path / "metrics.jsonl")
  writer = MetricWriter(str(tmp_path))
  writer.start_at(300)
  # The resumed run now stops at step 350 (num_steps may change on a resume).
  writer.write(350, "train", {"loss": 0.5})
  writer.write(350, "eval", {"loss": 1.5})
  writer.close()
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert "not json, kept" in lines
  rows = [json.loads(line) for line in lines if line.startswith("{")]
  keys = [(r["split"], r["step"]) for r in rows]
  assert len(keys) == len(set(keys))  # each (split, step) once, in the file itself
  assert keys == [("train", 100), ("train", 200), ("train", 300), ("eval", 200),
                  ("train", 350), ("eval", 350)]
  assert last_eval(str(tmp_path))["step"] == 350  # not the killed run's step 400
  assert [r["step"] for r in read_metrics(str(tmp_path))["train"]] == [100, 200, 300, 350]


def test_a_clean_restart_leaves_the_file_as_it_was(tmp_path):
  path = tmp_path / "metrics.jsonl"
  text = "".join(_row(s, "train", 1.0) for s in (5, 10))
  path.write_text(text)
  before = path.stat().st_mtime_ns
  MetricWriter(str(tmp_path)).start_at(10)
  assert path.read_text() == text and path.stat().st_mtime_ns == before
  MetricWriter(str(tmp_path / "new")).start_at(0)  # a first start: no file, nothing made
  assert not (tmp_path / "new").exists()
