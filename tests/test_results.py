"""The committed study results: compressed run data, linked copies, reports that regenerate
byte for byte from them."""

import filecmp
import gzip
import json
import os
import shutil

from experiments import compress_results
from transformer.sweep import report
from transformer.workdir import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = "residual_growth"  # small: 6 runs of one step
REPORT_FILES = ("report.md", "results.csv")


def test_the_committed_report_regenerates_byte_for_byte(tmp_path, monkeypatch):
  committed = os.path.join(REPO, "experiments", "results", STUDY)
  relative = os.path.join("experiments", "results", STUDY)  # the path the report names
  copy = tmp_path / relative
  shutil.copytree(committed, copy, symlinks=True)
  written = [f for f in os.listdir(copy) if f in REPORT_FILES or f.endswith(".png")]
  assert "report.md" in written and any(f.endswith(".png") for f in written)
  for name in written:  # the report must write each of them again
    os.remove(copy / name)
  monkeypatch.chdir(tmp_path)
  report.write_report(relative)
  assert sorted(os.listdir(copy)) == sorted(os.listdir(committed))
  different = [f for f in os.listdir(committed) if os.path.isfile(os.path.join(committed, f))
               and not filecmp.cmp(os.path.join(committed, f), copy / f, shallow=False)]
  assert different == [], (f"{different} of {relative} differ from what --mode=report writes "
                           "now: regenerate the committed reports")


def test_committed_runs_keep_gzipped_metrics_only():
  results = os.path.join(REPO, "experiments", "results")
  plain = [root for root, _, files in os.walk(results) if "metrics.jsonl" in files]
  assert plain == [], f"run compress_results.py on {sorted(plain)[:3]}"
  logs = [root for root, _, files in os.walk(results) if "log.txt" in files]
  assert logs == [], f"run compress_results.py on {sorted(logs)[:3]} (it drops log.txt)"


def _sweep(directory, names):
  os.makedirs(directory)
  points = [{"name": n, "overrides": {"seed": 0}, "num_steps": 1} for n in names]
  manifest = {"sweep_file": "x.py", "config": "configs/default.py:smoke", "overrides": [],
              "points": points}  # the fields a manifest must have (sweep.points.read_manifest)
  (directory / "sweep.json").write_text(json.dumps(manifest))


def _run(workdir, lr, rows):
  os.makedirs(workdir)
  (workdir / "config.json").write_text(json.dumps({"optim": {"learning_rate": lr}}))
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  (workdir / "log.txt").write_text("step 1/1 | loss 2.5\n")  # the point's console output


def test_compress_links_copies_and_gzips_reproducibly(tmp_path):
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  a, b = tmp_path / "a", tmp_path / "b"
  _sweep(a, ["lr=1"])
  _sweep(b, ["run=1", "run=2", "run=3"])
  _run(a / "lr=1", 1, rows)
  _run(b / "run=1", 1, rows)  # a copy of a's run
  _run(b / "run=2", 2, rows)  # same metrics, another config: its own run
  _run(b / "run=3", 1, rows + rows)  # same config, other metrics: its own run
  assert compress_results.compress_sweep(str(a)) == ([], 1)
  assert compress_results.compress_sweep(str(b), str(a)) == (["run=1"], 2)
  assert os.readlink(b / "run=1") == os.path.join("..", "a", "lr=1")
  assert sorted(os.listdir(a / "lr=1")) == ["config.json", "metrics.jsonl.gz"]  # no log.txt
  assert sorted(os.listdir(b / "run=3")) == ["config.json", "metrics.jsonl.gz"]
  packed = (a / "lr=1" / "metrics.jsonl.gz").read_bytes()
  assert packed[4:8] == b"\0\0\0\0"  # no time stamp: the same lines give the same bytes
  assert packed == (b / "run=2" / "metrics.jsonl.gz").read_bytes()
  assert gzip.decompress(packed) == (json.dumps(rows[0]) + "\n").encode()
  for workdir in ("a/lr=1", "b/run=1", "b/run=2"):
    assert read_metrics(str(tmp_path / workdir)) == {"eval": rows}
