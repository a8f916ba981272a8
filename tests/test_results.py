"""The committed study results: each study's runs packed in one file (`runs.jsonl.xz`), runs
reused from another study kept as links, reports that regenerate byte for byte from them, and
a tracked tree that stays light."""

import filecmp
import json
import lzma
import math
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from experiments import compress_results
from transformer import packed_runs, provenance
from transformer.config import LEGACY_DEFAULTS, flat_config
from transformer.errors import UserFileError
from transformer.sweep import points as sweep_points
from transformer.report import write as report
from transformer.report import summary as report_summary
from transformer.report.runs import load_runs, recorded_baselines, saved_config
from transformer.workdir import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "experiments", "results")
IN_PROGRESS = os.path.join(REPO, "experiments", "in_progress")
# residual_growth: 6 one-step runs; long_training: 75 runs of 600 and 2400 steps (45 linked to
# lr_sensitivity's); qk_norm_logits: 30 runs and norms: 105 (15 of each linked to lr_sensitivity's);
# depth: 90 runs (30 linked to lr_sensitivity's and warmup_stability's); warmup_length: 300 (60
# linked; 150 confirmatory); accelerator_replication: the 9 runs of the third GPU lease; clipping:
# 160 (80 linked to warmup_stability's); massive_activations: 30; qk_norm_post and hybrid_norm: 45
# each (30 linked to lr_sensitivity's); prose_corpus: 135 on the prose corpus (60 confirmatory);
# norm_type_placement: 135 (75 linked to lr_sensitivity's and norms'); depth_lr: 114 (69 linked to
# lr_sensitivity's, hybrid_norm's and depth's); depth_post: 108 of post-norm at 6-24 layers (54
# confirmatory); warmup_placement: 360 (210 linked to lr_sensitivity's, warmup_stability's,
# warmup_length's); qk_norm_depth: 90 (52 linked to qk_norm_post's, depth_lr's and
# lr_sensitivity's); warmup_long: 42 of 2,400 steps (21 linked to long_training's); long_runs: 51 of
# 600-9,600 steps (11 linked to lr_sensitivity's, norms' and long_training's); dyt_alpha: its 150
# points (90 linked to lr_sensitivity's, norms' and norm_type_placement's); prose_varied: 75 on the
# varied-prose corpus (Debian's and Python's manuals); atlas_long: 114 of 2,400 steps (24 linked to
# long_training's and long_runs'); lr_sensitivity: 110, the protocol's runs most others link to;
# warmup_stability: 160 (80 linked); optimizer_gap: 96 (30 linked); grad_profile: 72 and
# grad_scale_depth: 90. Every study of the results folder is here but the three that --mode=report
# does not write: accelerator and accelerator_calls (tests/test_accelerator_report.py) and
# diagnose_init_12l (kept as written).
STUDIES = ("residual_growth", "long_training", "qk_norm_logits", "norms", "depth",
           "warmup_length", "accelerator_replication", "clipping", "massive_activations",
           "qk_norm_post", "hybrid_norm", "prose_corpus", "norm_type_placement", "depth_lr",
           "depth_post", "warmup_placement", "qk_norm_depth", "warmup_long", "long_runs",
           "dyt_alpha", "prose_varied", "atlas_long", "lr_sensitivity", "warmup_stability",
           "optimizer_gap", "grad_profile", "grad_scale_depth")
REPORT_FILES = ("report.md", "results.csv")
TRACKED_LIMIT_BYTES = 15_000_000  # issue 29: the whole tracked tree, what a clone carries


@pytest.mark.parametrize("study", STUDIES)
def test_the_committed_report_regenerates_byte_for_byte(study, tmp_path, monkeypatch):
  relative = os.path.join("experiments", "results")  # the paths the reports name
  shutil.copytree(RESULTS, tmp_path / relative, symlinks=True)  # the studies it links to too
  copy = tmp_path / relative / study
  committed = os.path.join(RESULTS, study)
  written = [f for f in os.listdir(copy) if f in REPORT_FILES or f.endswith(".webp")]
  assert "report.md" in written and any(f.endswith(".webp") for f in written)
  for name in written:  # the report must write each of them again
    os.remove(copy / name)
  monkeypatch.chdir(tmp_path)
  report.write_report(os.path.join(relative, study))
  assert sorted(os.listdir(copy)) == sorted(os.listdir(committed))
  different = [f for f in os.listdir(committed) if os.path.isfile(os.path.join(committed, f))
               and not filecmp.cmp(os.path.join(committed, f), copy / f, shallow=False)]
  assert different == [], (f"{different} of {study} differ from what --mode=report writes "
                           "now: regenerate the committed reports")


def test_the_committed_results_readme_regenerates_byte_for_byte(tmp_path, monkeypatch):
  """experiments/results/README.md is written from every study's runs (`summarize`), not by
  hand: a change to a study's summary (one ended in '..') or to its runs shows here."""
  relative = os.path.join("experiments", "results")
  shutil.copytree(RESULTS, tmp_path / relative, symlinks=True)
  os.remove(tmp_path / relative / "README.md")
  monkeypatch.chdir(tmp_path)
  report_summary.write_summary(relative)
  same = filecmp.cmp(os.path.join(RESULTS, "README.md"), tmp_path / relative / "README.md",
                     shallow=False)
  assert same, ("experiments/results/README.md differs from what --mode=report writes now: "
                "python launch.py --mode=report --sweep_dir=experiments/results")


def test_every_committed_report_states_protocol_baselines_and_robustness():
  """Issue 29: each study's report says what recipe its verdict rests on, the baselines and
  budget it was judged against, and how the call moves at the neighbouring thresholds."""
  missing = []
  for study in sorted(os.listdir(RESULTS)):
    if not sweep_points.manifest_path(os.path.join(RESULTS, study)):
      continue  # diagnose_init_12l: a --mode=diagnose report, not a study
    with open(os.path.join(RESULTS, study, "report.md"), encoding="utf-8") as f:
      text = f.read()
    missing += [f"{study}: {part!r}" for part in ("\nProtocol: ", "\n## Baselines and budget",
                                                   "\n## Robustness", "\n**Budget:** ")
                if part not in text]
  assert missing == [], missing


def test_in_progress_runs_are_finished_points_of_their_study(monkeypatch):
  """A study cut off by the end of a session commits its finished runs, packed, under
  experiments/in_progress/<study>/ (its README says how a sweep resumes from them): each is a
  finished run of a point of `experiments/<study>.py:cpu`, trained with that point's
  overrides, so a sweep resumed on that folder skips exactly the runs that are done."""
  studies = sorted(s for s in os.listdir(IN_PROGRESS)
                   if os.path.isdir(os.path.join(IN_PROGRESS, s)))
  if not studies:
    pytest.skip("no study is in progress")
  monkeypatch.chdir(REPO)
  wrong, checked = [], 0
  for study in studies:
    points = sweep_points.load_sweep(f"experiments/{study}.py:cpu")
    by_name = dict(zip(sweep_points.point_names(points), points))
    directory = os.path.join(IN_PROGRESS, study)
    for name in packed_runs.entries(directory):
      point, workdir = by_name.get(name), os.path.join(directory, name)
      if point is None:
        wrong.append(f"{study}/{name}: not a point of experiments/{study}.py:cpu")
        continue
      checked += 1
      flat = flat_config(saved_config(workdir))
      wrong += [f"{study}/{name}: {k}={flat.get(k)!r}, its point says {v!r}"
                for k, v in point.items() if flat.get(k) != v]
      if not sweep_points.is_finished(workdir, point["train.num_steps"]):
        wrong.append(f"{study}/{name}: not finished")
  assert checked and wrong == [], wrong[:5]


def test_committed_studies_are_packed():
  """No run folder is committed: every point that ran is a line of its study's packed file."""
  folders = [os.path.join(study, name) for study in sorted(os.listdir(RESULTS))
             if os.path.isdir(os.path.join(RESULTS, study))
             for name in os.listdir(os.path.join(RESULTS, study))
             if os.path.isdir(os.path.join(RESULTS, study, name))]
  assert folders == [], f"run compress_results.py on {sorted(folders)[:3]}"
  for study in os.listdir(RESULTS):
    if sweep_points.manifest_path(os.path.join(RESULTS, study)):
      assert os.path.exists(os.path.join(RESULTS, study, packed_runs.PACK)), study
      assert not os.path.exists(os.path.join(RESULTS, study, sweep_points.MANIFEST)), (
          f"{study}: its sweep.json is not packed; run compress_results.py on it")


def test_every_committed_run_is_its_point():
  """Each committed run, its own or linked from another study, was trained with its point's
  overrides (as the study's sweep.json records them): a study re-run under new settings must
  not leave an older study linked to runs that are no longer the ones it reported
  (compress_results.py --inline_links copies them into the older study first). A field its
  config predates counts with its `LEGACY_DEFAULTS` value, as `--reuse_runs_from` reads it
  (lr_sensitivity's runs, linked as optimizer_gap's adamw points, predate `optim.name`)."""
  checked, wrong = 0, []
  for study in sorted(os.listdir(RESULTS)):
    if not sweep_points.manifest_path(os.path.join(RESULTS, study)):
      continue
    for point in sweep_points.read_manifest(os.path.join(RESULTS, study))["points"]:
      workdir = os.path.join(RESULTS, study, point["name"])
      saved = saved_config(workdir)
      if saved is None:
        continue  # a point that never ran (a study may record fewer runs than points)
      flat = {**LEGACY_DEFAULTS, **flat_config(saved)}  # fields a run's config predates
      checked += 1
      wrong += [f"{study}/{point['name']}: {k}={flat.get(k)!r}, its point says {v!r}"
                for k, v in point["overrides"].items() if flat.get(k) != v]
  assert checked > 700 and wrong == [], wrong[:5]


def test_packed_runs_read_as_their_folders_did():
  """A packed run's metrics, config, provenance and baselines come back through the usual
  readers; a linked run reads as the run it links to."""
  runs = load_runs(os.path.join(RESULTS, "long_training"), entropy=False)
  assert len(runs) == 75 and all(r.status != "missing" for r in runs)
  run = next(r for r in runs if r.num_steps == 2400)  # its own, packed (600: lr_sensitivity's)
  assert run.final["step"] == run.num_steps and run.metrics["train"]
  assert saved_config(run.workdir)["model"]["d_model"] == 128
  assert provenance.read_records(run.workdir)[0]["data"]
  qk_norm = os.path.join(RESULTS, "qk_norm_logits")  # its qk-norm-off runs: lr_sensitivity's
  linked = os.path.join(qk_norm, next(n for n in packed_runs.entries(qk_norm)
                                      if "qk_norm=False" in n))
  target = packed_runs.link_target(linked)
  assert target is not None and os.path.basename(os.path.dirname(target)) == "lr_sensitivity"
  assert read_metrics(linked) == read_metrics(target) != {}
  assert recorded_baselines(linked) == recorded_baselines(target)
  assert 2.3 < recorded_baselines(linked)["bigram_nats"] < 2.5
  # A run from before baselines.json (kept: an at-init study): measured afterwards, in its
  # study's record, for the corpus and rows it read (Python 3.11.7's stdlib, 128 bytes).
  grad_profile = os.path.join(RESULTS, "grad_profile")
  old = os.path.join(grad_profile, next(iter(packed_runs.entries(grad_profile))))
  assert packed_runs.text(old, "baselines.json") is None
  assert recorded_baselines(old)["bigram_nats"] == pytest.approx(2.4245, abs=1e-4)


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
  (workdir / "baselines.json").write_text(json.dumps({"bigram_nats": 2.4}))
  (workdir / "log.txt").write_text("step 1/1 | loss 2.5\n")  # the point's console output
  os.makedirs(workdir / "checkpoints" / "1")


def test_compress_links_copies_and_packs_reproducibly(tmp_path):
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  a, b = tmp_path / "a", tmp_path / "b"
  _sweep(a, ["lr=1"])
  _sweep(b, ["run=1", "run=2", "run=3", "run=4"])
  _run(a / "lr=1", 1, rows)
  assert compress_results.compress_sweep(str(a)) == ([], 1)
  _run(b / "run=1", 1, rows)  # a copy of a's (now packed) run
  _run(b / "run=2", 2, rows)  # same metrics, another config: its own run
  _run(b / "run=3", 1, rows + rows)  # same config, other metrics: its own run
  assert compress_results.compress_sweep(str(b), str(a)) == (["run=1"], 2)  # run=4 never ran
  assert sorted(os.listdir(a)) == ["runs.jsonl.xz", "sweep.json.xz"]  # the folders are gone
  assert sorted(os.listdir(b)) == ["runs.jsonl.xz", "sweep.json.xz"]
  entries = packed_runs.entries(str(b))
  assert entries["run=1"] == {"name": "run=1", "link": os.path.join("..", "a", "lr=1")}
  assert sorted(entries["run=3"]["files"]) == ["baselines.json", "config.json",
                                               "metrics.jsonl"]  # no log, no checkpoints
  for workdir in ("a/lr=1", "b/run=1", "b/run=2"):
    assert read_metrics(str(tmp_path / workdir)) == {"eval": rows}
    assert recorded_baselines(str(tmp_path / workdir)) == {"bigram_nats": 2.4}
  assert read_metrics(str(tmp_path / "b" / "run=4")) == {}
  packed = (b / "runs.jsonl.xz").read_bytes()
  compress_results.compress_sweep(str(b), str(a))  # again: nothing changes
  assert (b / "runs.jsonl.xz").read_bytes() == packed
  assert compress_results.main([str(b), "--unpack"]) is None
  assert os.readlink(b / "run=1") == os.path.join("..", "a", "lr=1")
  assert json.loads((b / "run=2" / "config.json").read_text()) == {"optim": {"learning_rate": 2}}
  assert (b / "run=3" / "metrics.jsonl").read_text().count("\n") == 2  # its two lines
  assert read_metrics(str(b / "run=3")) == {"eval": rows}  # one row a step, as before


def test_a_packed_manifest_reads_as_the_plain_one_and_yields_to_a_new_sweep_json(tmp_path):
  """compress packs sweep.json into sweep.json.xz (the same manifest, the same bytes); a sweep
  run again in that dir writes sweep.json, which readers then take."""
  _sweep(tmp_path / "s", ["p=1", "p=2"])
  plain = json.loads((tmp_path / "s" / "sweep.json").read_text())
  packed = sweep_points.pack_manifest(str(tmp_path / "s"))
  assert os.listdir(tmp_path / "s") == ["sweep.json.xz"]
  assert lzma.decompress(open(packed, "rb").read()) != b""  # a real xz file
  assert sweep_points.read_manifest(str(tmp_path / "s")) == plain
  first = open(packed, "rb").read()
  (tmp_path / "s" / "sweep.json").write_text(json.dumps(plain))
  sweep_points.pack_manifest(str(tmp_path / "s"))
  assert open(packed, "rb").read() == first
  newer = {**plain, "points": plain["points"][:1]}
  (tmp_path / "s" / "sweep.json").write_text(json.dumps(newer))
  assert sweep_points.manifest_path(str(tmp_path / "s")).endswith("sweep.json")
  assert sweep_points.read_manifest(str(tmp_path / "s")) == newer


@pytest.mark.parametrize("damage", ["torn", "empty", "not_xz", "not_utf8"])
def test_a_damaged_packed_manifest_is_one_line(tmp_path, damage):
  _sweep(tmp_path / "s", ["p"])
  path = sweep_points.pack_manifest(str(tmp_path / "s"))
  data = open(path, "rb").read()
  damaged = {"torn": data[: len(data) // 2], "empty": b"", "not_xz": b"{not xz",
             "not_utf8": lzma.compress(b"\xff\xfe{}")}[damage]
  with open(path, "wb") as f:
    f.write(damaged)
  with pytest.raises(UserFileError) as e:
    sweep_points.read_manifest(str(tmp_path / "s"))
  assert "\n" not in str(e.value) and path in str(e.value)
  assert open(path, "rb").read() == damaged  # reading never rewrites it


def test_compress_links_copies_of_runs_of_several_studies(tmp_path):
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  for directory, lr in ((a, 1), (b, 2)):
    _sweep(directory, [f"lr={lr}"])
    _run(directory / f"lr={lr}", lr, rows)
    compress_results.compress_sweep(str(directory))
  _sweep(c, ["x=1", "x=2", "x=3"])
  _run(c / "x=1", 1, rows)  # a's
  _run(c / "x=2", 2, rows)  # b's
  _run(c / "x=3", 3, rows)  # its own
  assert compress_results.compress_sweep(str(c), f"{a},{b}") == (["x=1", "x=2"], 1)
  entries = packed_runs.entries(str(c))
  assert entries["x=1"]["link"] == os.path.join("..", "a", "lr=1")
  assert entries["x=2"]["link"] == os.path.join("..", "b", "lr=2")
  assert "files" in entries["x=3"]


def test_inline_links_copies_the_linked_runs_before_their_study_is_rerun(tmp_path):
  """--inline_links=A copies into B's packed file the runs B links to in A (and only those),
  so that A can be re-run under new settings without changing what B reported."""
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  _sweep(a, ["lr=1"])
  _sweep(c, ["lr=3"])
  _sweep(b, ["run=1", "run=2", "run=3"])
  _run(a / "lr=1", 1, rows)
  _run(c / "lr=3", 3, rows)
  compress_results.compress_sweep(str(a))
  compress_results.compress_sweep(str(c))
  _run(b / "run=1", 1, rows)  # a copy of a's run: packed as a link
  _run(b / "run=2", 2, rows)  # its own
  os.symlink(os.path.join("..", "c", "lr=3"), b / "run=3")  # reused from c: stays a link
  compress_results.compress_sweep(str(b), str(a))
  before = {n: read_metrics(str(b / n)) for n in ("run=1", "run=2", "run=3")}
  assert compress_results.main(["--inline_links", str(a), str(b)]) is None
  entries = packed_runs.entries(str(b))
  assert sorted(entries["run=1"]["files"]) == ["baselines.json", "config.json", "metrics.jsonl"]
  assert entries["run=3"] == {"name": "run=3", "link": os.path.join("..", "c", "lr=3")}
  (a / "runs.jsonl.xz").unlink()  # a is re-run: its old runs are gone
  assert {n: read_metrics(str(b / n)) for n in before} == before
  assert saved_config(str(b / "run=1")) == {"optim": {"learning_rate": 1}}
  assert packed_runs.inline_links(str(b), str(a)) == 0  # nothing links there any more


def test_a_link_to_a_link_reads_the_baselines_measured_where_the_run_ran(tmp_path):
  """warmup_length reuses warmup_stability's runs that reuse lr_sensitivity's: a run from
  before baselines.json finds the record measured for it in the study that ran it, two links
  away; --inline_links carries that record into the study that copies the run."""
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  for d, name in ((a, "lr=1"), (b, "x=1"), (c, "y=1")):
    _sweep(d, [name])
  _run(a / "lr=1", 1, rows)
  (a / "lr=1" / "baselines.json").unlink()  # a run from before the record
  record = {"bigram_nats": 2.42, "unigram_nats": 3.31}
  (a / "study_baselines.json").write_text(json.dumps({"records": [{**record,
                                                                   "points": ["lr=1"]}]}))
  compress_results.compress_sweep(str(a))
  os.symlink(os.path.join("..", "a", "lr=1"), b / "x=1")
  compress_results.compress_sweep(str(b))
  os.symlink(os.path.join("..", "b", "x=1"), c / "y=1")
  compress_results.compress_sweep(str(c))
  assert recorded_baselines(str(c / "y=1")) == record == recorded_baselines(str(b / "x=1"))
  assert compress_results.inline_links(str(b), str(a)) == 1
  assert json.loads((b / "study_baselines.json").read_text())["records"] == [
      {**record, "points": ["x=1"]}]
  (a / "runs.jsonl.xz").unlink()  # a is re-run: its old runs and records are gone
  (a / "study_baselines.json").unlink()
  assert recorded_baselines(str(b / "x=1")) == record == recorded_baselines(str(c / "y=1"))


def test_packed_metrics_keep_float32_values_short_and_read_back_the_same_bytes(tmp_path):
  """The packed file writes a logged float32 as its 4 bytes (`transformer.metric_columns`), a
  float64 whole; the run's metrics read back as the bytes the run wrote, and pack again to the
  same file."""
  rows = [{"step": 25, "split": "train", "loss": float(np.float32(3.7812979)), "lr": 3e-4,
           "time": 1795784180.355778},
          {"step": 50, "split": "eval", "loss": 2.17414184056212, "grad_norm": math.inf}]
  _sweep(tmp_path / "s", ["p"])
  _run(tmp_path / "s" / "p", 1, rows)
  original = (tmp_path / "s" / "p" / "metrics.jsonl").read_text()
  compress_results.compress_sweep(str(tmp_path / "s"))
  path = tmp_path / "s" / packed_runs.PACK
  line = json.loads(lzma.decompress(path.read_bytes()))
  assert line["columns"] == ["metrics.jsonl"]  # transformer.metric_columns
  table = json.loads(line["files"]["metrics.jsonl"])
  assert table["columns"][0][:3] == [[25], ["train"], None]  # loss: in the float32 matrix
  assert table["float32"][0] == struct.pack(">f", 3.7812979).hex()  # one value, one plane each
  assert table["columns"][1][2] == [2.17414184056212]  # a float64 loss, as json.dumps wrote it
  assert f'"loss": {float(np.float32(3.7812979))!r},' in original  # json.dumps wrote 17
  assert packed_runs.text(str(tmp_path / "s" / "p"), "metrics.jsonl") == original
  assert read_metrics(str(tmp_path / "s" / "p")) == {
      "train": rows[:1], "eval": [{**rows[1], "grad_norm": math.inf}]}
  packed = path.read_bytes()
  compress_results.compress_sweep(str(tmp_path / "s"))
  assert path.read_bytes() == packed


def test_packed_throughput_is_the_nearest_float32_and_everything_else_the_runs_bytes(tmp_path):
  """Issue 69: a train row's tokens/s, s/step and MFU (float64 ratios of a host clock) are
  packed as the float32 nearest to them; its `time`, its other values and every other row
  read back as the run wrote them. A run folder that copies a packed run still packs as a
  link to it, and packing again gives the same bytes."""
  train = {"step": 25, "split": "train", "time": 1796430007.6597285,
           "loss": float(np.float32(4.1394987)), "learning_rate": 0.0010000002,
           "tokens_per_sec": 4385.702361200483, "step_time": 0.23348597685496011,
           "mfu": 0.1686081426197113}
  evals = {"step": 25, "split": "eval", "loss": 2.17414184056212, "time": 1796430008.25}
  a, b = tmp_path / "a", tmp_path / "b"
  _sweep(a, ["p"])
  _sweep(b, ["p"])
  _run(a / "p", 1, [train, evals])
  compress_results.compress_sweep(str(a))
  packed = read_metrics(str(a / "p"))
  narrow = {k: float(np.float32(train[k])) for k in ("tokens_per_sec", "step_time", "mfu")}
  assert packed == {"train": [{**train, **narrow}], "eval": [evals]}
  assert narrow["step_time"] != train["step_time"]  # the test narrows something
  assert abs(narrow["tokens_per_sec"] / train["tokens_per_sec"] - 1) < 1e-7
  _run(b / "p", 1, [train, evals])  # a copy of a's run, at full precision
  assert compress_results.compress_sweep(str(b), str(a)) == (["p"], 0)
  path = a / packed_runs.PACK
  before = path.read_bytes()
  assert packed_runs.repack(str(a)) == 1 and path.read_bytes() == before


@pytest.mark.parametrize("damage", ["torn", "empty", "not_xz", "bad_line", "not_a_run",
                                    "float_text_names_no_file", "float_text_not_json",
                                    "columns_row_of_no_kind", "columns_not_a_table",
                                    "a_form_of_newer_code"])
def test_a_damaged_packed_file_is_one_line(tmp_path, damage):
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  _sweep(tmp_path / "s", ["p"])
  _run(tmp_path / "s" / "p", 1, rows)
  compress_results.compress_sweep(str(tmp_path / "s"))
  path = tmp_path / "s" / packed_runs.PACK
  data = path.read_bytes()
  damaged = {"torn": data[: len(data) // 2], "empty": b"", "not_xz": b"\xff\xfe not xz",
             "bad_line": lzma.compress(b'{"name": "p", "files": {}}\n{"name": \n'),
             "not_a_run": lzma.compress(b'["p"]\n'),
             "float_text_names_no_file": lzma.compress(
                 b'{"name": "p", "files": {}, "float_text": ["metrics.jsonl"]}\n'),
             "float_text_not_json": lzma.compress(
                 b'{"name": "p", "files": {"metrics.jsonl": "{1.5"}, '
                 b'"float_text": ["metrics.jsonl"]}\n'),
             "columns_row_of_no_kind": lzma.compress(
                 b'{"name": "p", "files": {"metrics.jsonl": "{\\"kinds\\": [], '
                 b'\\"rows\\": [0], \\"columns\\": []}"}, "columns": ["metrics.jsonl"]}\n'),
             "columns_not_a_table": lzma.compress(
                 b'{"name": "p", "files": {"metrics.jsonl": "[1.5]"}, '
                 b'"columns": ["metrics.jsonl"]}\n'),
             "a_form_of_newer_code": lzma.compress(
                 b'{"name": "p", "files": {"metrics.jsonl": "AAEC"}, '
                 b'"planes": ["metrics.jsonl"]}\n')}[damage]
  path.write_bytes(damaged)
  with pytest.raises(UserFileError) as e:
    read_metrics(str(tmp_path / "s" / "p"))
  message = str(e.value)
  fix = "newer checkout" if damage == "a_form_of_newer_code" else "restore"
  assert "\n" not in message and str(path) in message and fix in message
  assert path.read_bytes() == damaged  # reading never rewrites it


def test_the_tracked_tree_stays_light():
  """Issue 29: at most 15 MB tracked (results are most of it), so a clone travels light."""
  try:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True, timeout=60).stdout
  except (OSError, subprocess.CalledProcessError) as e:
    pytest.skip(f"not a git checkout ({e})")
  sizes = {p: os.path.getsize(os.path.join(REPO, p)) for p in listed.decode().split("\0")
           if p and os.path.isfile(os.path.join(REPO, p))}
  total = sum(sizes.values())
  largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
  assert total <= TRACKED_LIMIT_BYTES, (f"{total / 1e6:.1f} MB tracked; the largest: {largest}")


def test_compress_points_links_into_committed_studies_where_the_packed_file_goes(tmp_path):
  """A sweep run outside the repository links its reused points by a path from there
  (`../../repo/experiments/results/lr_sensitivity/x`); packed as is, the link breaks once the
  file moves to `experiments/results/<study>/`. compress rewrites it as `../lr_sensitivity/x`."""
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  results = tmp_path / "repo" / "experiments" / "results"
  _sweep(results / "lr_sensitivity", ["lr=1"])
  _run(results / "lr_sensitivity" / "lr=1", 1, rows)
  compress_results.compress_sweep(str(results / "lr_sensitivity"))
  sweep = tmp_path / "runs" / "new_study"
  _sweep(sweep, ["x=1", "x=2"])
  os.symlink(os.path.relpath(results / "lr_sensitivity" / "lr=1", sweep), sweep / "x=1")
  _run(sweep / "x=2", 2, rows)
  assert read_metrics(str(sweep / "x=1")) == {"eval": rows}  # the sweep's own link resolves
  assert compress_results.compress_sweep(str(sweep)) == ([], 1)
  assert packed_runs.entries(str(sweep))["x=1"]["link"] == os.path.join("..", "lr_sensitivity",
                                                                         "lr=1")
  shutil.copytree(sweep, results / "new_study")  # where it is committed
  assert read_metrics(str(results / "new_study" / "x=1")) == {"eval": rows}


def test_compress_refuses_a_sweep_with_a_run_not_ended_and_keeps_its_checkpoints(tmp_path):
  """A run still training (or stopped at a checkpoint) is not packed as if it had ended: the
  whole sweep dir is left as it was, its checkpoints with it, and the error is one line."""
  sweep = tmp_path / "s"
  _sweep(sweep, ["done", "training"])
  _run(sweep / "done", 1, [{"step": 1, "split": "eval", "loss": 2.5}])
  _run(sweep / "training", 2, [{"step": 0, "split": "eval", "loss": 3.0}])
  before = sorted(os.listdir(sweep))
  with pytest.raises(UserFileError) as e:
    compress_results.compress_sweep(str(sweep))
  assert "1 run(s) that have not ended (e.g. training)" in str(e.value)
  assert "\n" not in str(e.value)
  assert sorted(os.listdir(sweep)) == before and os.path.isdir(sweep / "training" / "checkpoints")
  (sweep / "training" / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "train",
                                                                 "diverged": True}) + "\n")
  assert compress_results.compress_sweep(str(sweep)) == ([], 2)  # a diverged run has ended


def test_pack_into_another_folder_writes_the_in_place_bytes_and_keeps_the_sweep(tmp_path):
  """`packed_runs.pack(..., into=OUT)`: the packed file an in-place pack writes (the
  reference), in OUT, with the run folders (checkpoints too) and links left where they were."""
  rows = [{"step": 1, "split": "eval", "loss": 2.5}]
  for name in ("in_place", "kept"):
    _sweep(tmp_path / name, ["a", "b", "linked"])
    _run(tmp_path / name / "a", 1, rows)
    _run(tmp_path / name / "b", 2, rows)
    os.symlink(os.path.join("..", "other", "o"), tmp_path / name / "linked")
  names = ["a", "b", "linked"]
  assert packed_runs.pack(str(tmp_path / "in_place"), names) == (2, 1)
  before = sorted(os.listdir(tmp_path / "kept"))
  os.makedirs(tmp_path / "out")
  assert packed_runs.pack(str(tmp_path / "kept"), names, into=str(tmp_path / "out")) == (2, 1)
  assert ((tmp_path / "out" / packed_runs.PACK).read_bytes()
          == (tmp_path / "in_place" / packed_runs.PACK).read_bytes())
  assert sorted(os.listdir(tmp_path / "kept")) == before
  assert os.path.isdir(tmp_path / "kept" / "a" / "checkpoints" / "1")


def test_in_progress_packs_the_finished_own_runs_and_leaves_the_sweep_as_it_is(tmp_path):
  """`--in_progress`: a sweep still running commits its ended runs (folders that finished and
  runs packed in its file before), never a run still training (its folder and checkpoints
  stay) nor a link to another sweep's run."""
  done, later = [{"step": 1, "split": "eval", "loss": 2.5}], [{"step": 0, "split": "eval",
                                                                "loss": 3.0}]
  sweep = tmp_path / "s"
  _sweep(sweep, ["old", "done", "training", "linked", "next"])
  _run(sweep / "old", 1, done)
  packed_runs.pack(str(sweep), ["old"])  # an earlier session's runs, packed in the sweep dir
  _run(sweep / "done", 2, done)
  _run(sweep / "training", 3, later)  # its final eval (step 1) not written yet
  _sweep(tmp_path / "other", ["o"])
  _run(tmp_path / "other" / "o", 4, done)
  os.symlink(os.path.join("..", "other", "o"), sweep / "linked")
  before = sorted(os.listdir(sweep))
  out = tmp_path / "in_progress" / "study"
  assert compress_results.pack_in_progress(str(sweep), str(out)) == 2
  assert sorted(os.listdir(sweep)) == before and os.path.isdir(sweep / "training" / "checkpoints")
  assert sorted(os.listdir(out)) == [packed_runs.PACK]  # no staging folder left behind
  packed = packed_runs.entries(str(out))
  assert sorted(packed) == ["done", "old"] and all("files" in e for e in packed.values())
  assert json.loads(packed["done"]["files"]["config.json"]) == {"optim": {"learning_rate": 2}}
  _run(sweep / "next", 5, done)  # it runs and finishes: a second pack adds it beside the others
  assert compress_results.pack_in_progress(str(sweep), str(out)) == 3
  fresh = tmp_path / "fresh"  # a new machine's sweep dir, not given the committed file
  _sweep(fresh, ["old", "done", "training", "linked", "next"])
  _run(fresh / "done", 2, done)
  committed = (out / packed_runs.PACK).read_bytes()
  with pytest.raises(UserFileError) as e:
    compress_results.pack_in_progress(str(fresh), str(out))
  assert "holds 2 finished run(s)" in str(e.value) and "\n" not in str(e.value)
  assert (out / packed_runs.PACK).read_bytes() == committed  # nothing lost
  assert sorted(os.listdir(out)) == [packed_runs.PACK]
