"""The norm-placement study trains each variant and writes a report from their metrics."""

import csv
import os

from configs.default import get_config
from experiments.norm_placement import run_study
from experiments.report import read_metrics
from transformer.config import from_config_dict


def test_norm_placement_study_writes_table_csv_and_plot(tiny_corpus, tmp_path):
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir, c.data.data_dir = tiny_corpus["source_dir"], tiny_corpus["data_dir"]
    c.data.validation_percent, c.data.seq_len, c.data.shuffle_buffer = 20, 32, 64
    c.model.d_model, c.model.num_heads, c.model.d_ff = 32, 4, 64
    c.train.batch_size, c.train.num_steps, c.train.log_every, c.train.eval_every = 8, 6, 2, 3
  base = from_config_dict(c)
  out = str(tmp_path / "study")
  report = run_study(base, ["pre", "post"], [0], out)

  text = open(report).read()
  assert "| pre | 1 | 6 |" in text and "| post | 1 | 6 |" in text
  with open(os.path.join(out, "results.csv")) as f:
    rows = list(csv.DictReader(f))
  assert [r["label"] for r in rows] == ["pre", "post"]
  for r in rows:  # the table reports each run's own last eval, not a shared number
    assert float(r["bits_per_byte"]) == read_metrics(r["workdir"])["eval"][-1]["bits_per_byte"]
  assert rows[0]["bits_per_byte"] != rows[1]["bits_per_byte"]
  assert os.path.getsize(os.path.join(out, "curves.png")) > 10_000
  with open(os.path.join(out, "post-seed0", "config.json")) as f:
    assert '"norm_placement": "post"' in f.read()
