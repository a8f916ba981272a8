"""Provenance: the commit, versions, devices, command and data a run, sweep or report records,
kept across resumption on another commit, warned about when a report's runs mix them; and the
unigram-entropy cache keyed by the data's identity."""

import glob
import json
import lzma
import shutil
import os
import platform
import re
import shlex
import subprocess
import sys
import types
from importlib import metadata

import numpy as np
import pytest

from configs.default import get_config
from transformer import REPO_ROOT, provenance
from transformer.config import from_config_dict
from transformer.sweep import points as sweep_lib
from transformer.report import write as report
from transformer.report import runs as report_runs
from transformer.report import runs as sweep_runs
from transformer.workdir import run_config

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def _git(repo, *args) -> str:
  return subprocess.run([*GIT, "-C", str(repo), *args], capture_output=True, text=True,
                        check=True).stdout.strip()


# --- code and libraries ---------------------------------------------------------------------

def test_git_state_reads_the_commit_and_whether_tracked_files_changed(tmp_path):
  repo = tmp_path / "repo"
  repo.mkdir()
  _git(repo, "init", "-q")
  assert provenance.git_state(str(repo)) == {"commit": None, "dirty": None}  # no commit yet
  (repo / "a.py").write_text("x = 1\n")
  _git(repo, "add", "a.py")
  _git(repo, "commit", "-q", "-m", "first")
  head = _git(repo, "rev-parse", "HEAD")
  assert provenance.git_state(str(repo)) == {"commit": head, "dirty": False}
  (repo / "runs").mkdir()
  (repo / "runs" / "new.txt").write_text("untracked\n")
  assert provenance.git_state(str(repo)) == {"commit": head, "dirty": False}
  # An untracked folder inside a checkout (a virtualenv there) is no checkout of its own.
  assert provenance.git_state(str(repo / "runs")) == {"commit": None, "dirty": None}
  (repo / "a.py").write_text("x = 2\n")
  assert provenance.git_state(str(repo)) == {"commit": head, "dirty": True}


def test_git_state_outside_a_checkout_is_null(tmp_path):
  assert provenance.git_state(str(tmp_path)) == {"commit": None, "dirty": None}
  assert provenance.git_state(str(tmp_path / "missing")) == {"commit": None, "dirty": None}


def test_collect_records_versions_command_and_host_without_devices():
  argv = ["launch.py", "--config.model.norm_placement=post", "--workdir=runs/a b"]
  record = provenance.collect(argv, root=REPO_ROOT)
  assert shlex.split(record["command"]) == argv
  assert record["python"] == platform.python_version()
  for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"):
    assert record["versions"][name] == metadata.version(name)
  assert "devices" not in record and "data" not in record
  assert record["host"] and record["time"].endswith("+00:00")
  json.dumps(record)  # all of it goes into JSON files


def test_the_command_names_no_folder_of_the_checkout(tmp_path):
  """A sweep's children get absolute paths (they may run elsewhere); the record keeps them
  relative to the checkout, and a path outside it as given."""
  root = str(tmp_path / "checkout")
  argv = [f"{root}/launch.py", "--mode=train", f"--config={root}/configs/default.py:smoke",
          f"--workdir={root}/runs/studies/s/seed=0", "--config.data.source_dir=/data/text",
          f"--config.data.data_dir={root}x/tfds"]
  record = provenance.collect(argv, root=root + "/")
  assert shlex.split(record["command"]) == [
      "launch.py", "--mode=train", "--config=configs/default.py:smoke",
      "--workdir=runs/studies/s/seed=0", "--config.data.source_dir=/data/text",
      f"--config.data.data_dir={root}x/tfds"]


def test_a_packed_run_names_no_folder_of_the_checkout_that_ran_it(tmp_path):
  """A run made before `portable_argv` recorded its command with the path of the checkout that
  ran it, in provenance.jsonl and config.json: packing takes that path out of the command, and
  nothing else (a data folder under the checkout stays as saved: it is part of the run's
  identity)."""
  from transformer import packed_runs
  root = str(tmp_path / "checkout")
  command = shlex.join([f"{root}/launch.py", f"--config={root}/configs/default.py",
                        f"--workdir={root}/runs/s/a=1", "--config.seed=0"])
  record = {"command": command, "data": {"source": {"folder": f"{root}/data"}}}
  run = tmp_path / "sweep" / "a=1"
  run.mkdir(parents=True)
  (run / provenance.FILE).write_text(json.dumps(record) + "\n")
  (run / "config.json").write_text(json.dumps({"data": {"source_dir": f"{root}/data"},
                                               "provenance": record}, indent=2))
  packed_runs.pack(str(tmp_path / "sweep"), ["a=1"])
  files = packed_runs.entries(str(tmp_path / "sweep"))["a=1"]["files"]
  portable = ("launch.py --config=configs/default.py --workdir=runs/s/a=1 --config.seed=0")
  assert json.loads(files[provenance.FILE]) == {**record, "command": portable}
  assert json.loads(files["config.json"]) == {"data": {"source_dir": f"{root}/data"},
                                              "provenance": {**record, "command": portable}}


def test_a_run_packed_before_that_loses_the_folder_when_repacked(tmp_path):
  """An entry packed with its checkout's path in its command (as the studies committed before
  packing took it out were) names none once repacked; nothing else of it changes."""
  from transformer import packed_runs
  command = "/home/someone/checkout/launch.py --config=/home/someone/checkout/configs/x.py"
  files = {provenance.FILE: json.dumps({"command": command, "commit": "abc"}) + "\n",
           "config.json": json.dumps({"seed": 0, "provenance": {"command": command}}, indent=2),
           "notes.txt": command}
  sweep = tmp_path / "sweep"
  sweep.mkdir()
  line = json.dumps({"name": "a=1", "files": files})
  (sweep / packed_runs.PACK).write_bytes(lzma.compress(line.encode() + b"\n"))
  assert packed_runs.repack(str(sweep)) == 1
  back = packed_runs.entries(str(sweep))["a=1"]["files"]
  assert json.loads(back[provenance.FILE]) == {"command": "launch.py --config=configs/x.py",
                                               "commit": "abc"}
  assert json.loads(back["config.json"])["provenance"]["command"] == (
      "launch.py --config=configs/x.py")
  assert back["notes.txt"] == command  # not a recorded command: as it was


def test_no_committed_packed_run_names_the_checkout_that_ran_it():
  """The committed packs, read as text (a recorded command is `\\"command\\": \\"...` in
  them), hold no command that starts with an absolute path."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  listed = subprocess.run(["git", "-C", root, "ls-files", "*runs.jsonl.xz"],
                          capture_output=True, text=True, check=True).stdout.split()
  commands, absolute = 0, []
  for path in listed:
    with open(os.path.join(root, path), "rb") as f:
      text = lzma.decompress(f.read()).decode("utf-8")
    commands += text.count('\\"command\\": \\"')
    absolute += [(path, c) for c in re.findall(r'\\"command\\": \\"(/[^ ]*)', text)]
  assert commands > 1000  # the pattern finds the recorded commands
  assert not absolute, absolute[:3]


def test_collect_imports_neither_jax_nor_tensorflow():
  code = ("import sys; from transformer import provenance\n"
          "provenance.collect(['x'], data={'name': 'local_text', 'source_dir': ''})\n"
          "print(sorted(m for m in ('jax', 'tensorflow', 'tensorflow_datasets') "
          "if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


# --- data identity --------------------------------------------------------------------------

def test_data_identity_follows_the_bytes_not_the_folder(tiny_corpus, tmp_path):
  data = {"name": "local_text", "source_dir": tiny_corpus["source_dir"], "suffixes": ".py"}
  first = provenance.data_identity(data)
  assert first["source"]["files"] == 40  # test/ and the .txt file are not read
  moved = tmp_path / "elsewhere"
  subprocess.run(["cp", "-r", tiny_corpus["source_dir"], str(moved)], check=True)
  assert provenance.data_identity({**data, "source_dir": str(moved)})["digest"] == first["digest"]
  path = moved / "pkg" / "mod_00.py"
  text = path.read_text()
  path.write_text(text.replace("def", "fed", 1))  # same size, other bytes
  assert provenance.data_identity({**data, "source_dir": str(moved)})["digest"] != first["digest"]


def test_the_default_corpus_is_this_pythons_stdlib():
  identity = provenance.data_identity({"name": "local_text", "source_dir": "", "suffixes": ".py"})
  assert identity["source"]["folder"] == "python-stdlib"
  assert identity["source"]["python"] == platform.python_version()
  assert identity["source"]["files"] > 100


# --- the unigram-entropy cache --------------------------------------------------------------

def _lm_workdir(path, data, identity=None):
  """A decoder-LM run's workdir holding only config.json (with a recorded data identity)."""
  saved = from_config_dict(get_config("smoke")).to_dict()
  saved["data"].update(data)
  if identity is not None:
    saved["provenance"] = {"data": identity}
  os.makedirs(path)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(saved, f)
  return saved


@pytest.fixture
def counted_pipeline(monkeypatch):
  """`lm_data` replaced by eval batches of tokens 3, 3, 4, 5 (entropy of [.5, .25, .25]),
  counting its calls; no TensorFlow."""
  calls = []

  def lm_data(cfg, batch_size, seed, workdir):
    calls.append(cfg.source_dir)
    batch = {"targets": np.array([[3, 3, 4, 5]]), "weights": np.ones((1, 4))}
    return types.SimpleNamespace(tokenizer=types.SimpleNamespace(vocab_size=8),
                                 eval_batches=lambda: iter([batch]))

  monkeypatch.setitem(sys.modules, "transformer.data.pipeline",
                      types.SimpleNamespace(lm_data=lm_data))
  return calls


def test_a_linked_run_without_a_recorded_corpus_keeps_its_home_sweeps_entropy(
    tiny_corpus, tmp_path, counted_pipeline):
  """A run from before provenance, linked into a new sweep (--reuse_runs_from), takes the
  entropy its own sweep measured for it, not one computed from the data here (which may be
  another Python's stdlib)."""
  data = {"source_dir": tiny_corpus["source_dir"], "data_dir": tiny_corpus["data_dir"]}
  home, new = tmp_path / "home", tmp_path / "new"
  saved = _lm_workdir(str(home / "run"), data)
  (home / "unigram_entropy.json").write_text(
      json.dumps({report_runs.entropy_key(saved["data"], None): 3.25}))
  new.mkdir()
  os.symlink(home / "run", new / "run")
  assert report_runs.unigram_entropy(str(new / "run"), str(new)) == 3.25
  assert counted_pipeline == []  # nothing computed
  # Not linked: the run's own sweep's cache is not consulted, and no data is rebuilt.
  os.remove(new / "run")
  shutil.copytree(home / "run", new / "run")
  assert report_runs.unigram_entropy(str(new / "run"), str(new)) is None
  assert counted_pipeline == []


def test_the_entropy_cache_key_follows_the_corpus_identity(tiny_corpus, tmp_path,
                                                           counted_pipeline):
  """A run that recorded the corpus it read is looked up under that corpus's key: a value
  cached by data config alone (another Python's stdlib, say) is not its. The report reads
  the cache, never the data (issue 29)."""
  data = {"source_dir": tiny_corpus["source_dir"], "data_dir": tiny_corpus["data_dir"]}
  identity = provenance.data_identity({**data, "name": "local_text", "suffixes": ".py"})
  saved = _lm_workdir(str(tmp_path / "run"), data, identity)
  cache_dir = tmp_path / "sweep"
  cache_dir.mkdir()
  legacy = report_runs.entropy_key(saved["data"], None)
  assert legacy != report_runs.entropy_key(saved["data"], identity["digest"])
  (cache_dir / "unigram_entropy.json").write_text(json.dumps({legacy: 9.9}))
  assert report_runs.unigram_entropy(str(tmp_path / "run"), str(cache_dir)) is None
  (cache_dir / "unigram_entropy.json").write_text(
      json.dumps({legacy: 9.9, report_runs.entropy_key(saved["data"], identity["digest"]): 1.5}))
  assert report_runs.unigram_entropy(str(tmp_path / "run"), str(cache_dir)) == 1.5
  assert counted_pipeline == []


def test_a_run_without_provenance_reads_the_data_config_key(tmp_path, counted_pipeline):
  """The committed studies' caches are keyed by data config alone: they still serve."""
  saved = _lm_workdir(str(tmp_path / "run"), {})
  (tmp_path / "unigram_entropy.json").write_text(
      json.dumps({report_runs.entropy_key(saved["data"], None): 1.25}))
  assert report_runs.unigram_entropy(str(tmp_path / "run"), str(tmp_path)) == 1.25
  assert counted_pipeline == []


# --- a run ----------------------------------------------------------------------------------

NUM_STEPS = 4


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
  """A tiny run stopped after step 2, then resumed to the end on another commit. Returns
  (workdir, this checkout's git state, the data identity)."""
  root = tmp_path_factory.mktemp("run")
  src = root / "corpus" / "pkg"
  src.mkdir(parents=True)
  for i in range(20):
    src.joinpath(f"m{i}.py").write_text("".join(f"def f{j}(x):\n  return x + {i * j}\n"
                                                for j in range(20)))
  c = get_config("smoke")
  with c.unlocked():
    c.data.source_dir, c.data.data_dir = str(root / "corpus"), str(root / "tfds")
    c.data.validation_percent, c.data.seq_len, c.data.shuffle_buffer = 20, 32, 16
    c.model.d_model, c.model.num_heads, c.model.num_layers, c.model.d_ff = 16, 2, 1, 32
    c.model.norm_placement = "post"
    c.train.batch_size, c.train.num_steps, c.train.eval_every = 8, NUM_STEPS, NUM_STEPS
    c.checkpoint.every_steps = 2
  config = from_config_dict(c)
  from transformer.train.loop import train_and_evaluate  # JAX, here only
  workdir = str(root / "workdir")
  train_and_evaluate(config, workdir, stop_after=2)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(provenance, "git_state", lambda root=REPO_ROOT: {"commit": "f" * 40,
                                                                 "dirty": True})
    train_and_evaluate(config, workdir)
  data = provenance.data_identity(config.to_dict()["data"])
  return workdir, provenance.git_state(), data


def test_config_json_carries_the_first_starts_provenance(resumed_run):
  workdir, git, data = resumed_run
  with open(os.path.join(workdir, "config.json")) as f:
    first = json.load(f)["provenance"]
  assert first["git"] == git and first["resumed_from"] is None
  assert first["data"]["digest"] == data["digest"]
  assert first["devices"]["platform"] == "cpu" and first["devices"]["count"] == 8
  assert first["devices"]["processes"] == 1
  assert first["versions"]["jax"] == metadata.version("jax")
  assert run_config(workdir).model.norm_placement == "post"  # provenance is not config


def test_a_resume_on_another_commit_resumes_and_appends_a_record(resumed_run):
  workdir, git, _ = resumed_run
  with open(os.path.join(workdir, provenance.FILE)) as f:
    records = [json.loads(line) for line in f]
  assert [r["resumed_from"] for r in records] == [None, 2]
  assert records[0]["git"] == git
  assert records[1]["git"] == {"commit": "f" * 40, "dirty": True}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    assert max(json.loads(line)["step"] for line in f) == NUM_STEPS


def test_tensorboard_holds_the_config_as_hparams(resumed_run):
  from tensorboard.backend.event_processing.event_file_loader import (
      EventFileLoader)
  from tensorboard.plugins.hparams import metadata as hp_metadata
  workdir = resumed_run[0]
  files = glob.glob(os.path.join(workdir, "tensorboard", "events.out.tfevents.*"))
  assert len(files) == 2  # one per start, beside the train/ and eval/ runs
  values = [v for e in EventFileLoader(files[0]).Load() for v in e.summary.value
            if v.metadata.plugin_data.plugin_name == hp_metadata.PLUGIN_NAME]
  assert [v.tag for v in values] == [hp_metadata.SESSION_START_INFO_TAG]
  info = hp_metadata.parse_session_start_info_plugin_data(values[0].metadata.plugin_data.content)
  assert info.hparams["model.norm_placement"].string_value == "post"
  assert info.hparams["model.num_layers"].number_value == 1
  assert info.hparams["train.num_steps"].number_value == NUM_STEPS


# --- a sweep and its report -----------------------------------------------------------------

def test_sweep_json_records_the_commands_provenance(tmp_path):
  config = from_config_dict(get_config("smoke"))
  points = [{"seed": 0}, {"seed": 1}]
  sweep_file = tmp_path / "s.py"
  sweep_file.write_text("def get_sweep():\n  return [{'seed': 0}, {'seed': 1}]\n")
  sweep_lib.write_manifest(str(tmp_path), str(sweep_file), "configs/default.py:smoke", [],
                           points, [config, config])
  manifest = sweep_lib.read_manifest(str(tmp_path))
  prov = manifest["provenance"]
  assert prov["git"] == provenance.git_state(REPO_ROOT)
  assert prov["versions"]["numpy"] == metadata.version("numpy")
  assert [d["digest"] for d in prov["datasets"]] == [
      provenance.data_identity(config.to_dict()["data"])["digest"]]
  assert "devices" not in prov  # the runner initialises no accelerator


def test_run_identity_ignores_provenance():
  saved = from_config_dict(get_config("smoke")).to_dict()
  assert (sweep_lib.run_identity({**saved, "provenance": {"git": {"commit": "a"}}})
          == sweep_lib.run_identity(saved))


def _record(commit, dirty=False, digest="d1"):
  return {"git": {"commit": commit, "dirty": dirty}, "python": "3.12.1",
          "versions": {"jax": "0.12.0"}, "time": "t", "host": "h",
          "data": {"name": "local_text", "source": {"files": 3, "bytes": 10}, "digest": digest}}


def _sweep(directory, records):
  """A sweep of one run per entry of `records` (a list of its provenance records, None for a
  run from before provenance, "absent" for a point not started), each finished at step 2."""
  names = [f"seed={i}" for i in range(len(records))]
  directory.mkdir(parents=True)
  for name, recs in zip(names, records):
    if recs == "absent":
      continue
    workdir = directory / name
    workdir.mkdir(parents=True)
    with open(workdir / "metrics.jsonl", "w") as f:
      for step in (1, 2):
        f.write(json.dumps({"step": step, "split": "train", "loss": 2.0, "time": 0.0}) + "\n")
      f.write(json.dumps({"step": 2, "split": "eval", "loss": 1.5, "time": 1.0}) + "\n")
    if recs:
      (workdir / provenance.FILE).write_text("".join(json.dumps(r) + "\n" for r in recs))
      (workdir / "config.json").write_text(json.dumps({"provenance": recs[0]}))
  (directory / "sweep.json").write_text(json.dumps(
      {"sweep_file": "s.py", "config": "c.py", "overrides": [],
       "points": [{"name": n, "overrides": {"seed": i}, "num_steps": 2}
                  for i, n in enumerate(names)]}))
  return str(directory)


@pytest.fixture
def no_entropy(monkeypatch):
  monkeypatch.setattr(sweep_runs, "unigram_entropy", lambda workdir, cache: None)


def test_the_report_warns_when_runs_mix_commits_and_data(tmp_path, capsys, no_entropy):
  resumed = [_record("a" * 40), _record("b" * 40, dirty=True, digest="d2")]
  sweep_dir = _sweep(tmp_path / "s", [[_record("a" * 40)], resumed, None])
  text = open(report.write_report(sweep_dir)).read()
  out = capsys.readouterr().out
  for warning in ("the runs mix 2 commits (aaaaaaaaaaaa, bbbbbbbbbbbb)",
                  "1 run(s) started from a tree with uncommitted changes (seed=1)",
                  "the runs mix 2 data identities"):
    assert f"**Warning:** {warning}" in text
    assert f"[report] WARNING: {warning}" in out
  section = text[text.index("## Provenance"):]
  assert "bbbbbbbbbbbb (dirty): seed=1" in section
  assert "aaaaaaaaaaaa: seed=0, seed=1" in section
  assert "Not recorded (runs from before provenance): seed=2" in section


def test_the_report_of_one_commit_has_a_section_and_no_warning(tmp_path, capsys, no_entropy):
  sweep_dir = _sweep(tmp_path / "s", [[_record("a" * 40)], [_record("a" * 40)], "absent"])
  text = open(report.write_report(sweep_dir)).read()
  assert "## Provenance" in text and "Warning" not in text
  assert "aaaaaaaaaaaa: seed=0, seed=1" in text
  assert "Not recorded" not in text  # seed=2 has not started: nothing to record yet
  assert "WARNING" not in capsys.readouterr().out


def test_a_report_without_provenance_has_no_section(tmp_path, no_entropy):
  text = open(report.write_report(_sweep(tmp_path / "s", [None, None]))).read()
  assert "Provenance" not in text and "Warning" not in text


# --- issue 31: a torn or garbled provenance.jsonl --------------------------------------------

def test_a_resume_after_a_torn_record_keeps_its_own_record(tmp_path):
  """A kill while provenance.jsonl was written leaves a last line without its newline; the
  next start's record goes after the last complete line, so it still parses."""
  first = json.dumps({"command": "first", "resumed_from": None}) + "\n"
  (tmp_path / provenance.FILE).write_text(first + '{"command": "torn", "resu')
  provenance.record_start(str(tmp_path), {}, ["launch.py"], resumed_from=10)
  records = provenance.read_records(str(tmp_path))
  assert [r.get("resumed_from") for r in records] == [None, 10], records
  assert (tmp_path / provenance.FILE).read_text().count("\n") == 2


def test_provenance_that_is_not_utf8_is_read_around(tmp_path):
  good = json.dumps({"command": "ok"}).encode()
  (tmp_path / provenance.FILE).write_bytes(b"\xff\xfe garbage\n" + good + b"\n\x80")
  assert provenance.read_records(str(tmp_path)) == [{"command": "ok"}]


def test_a_resumed_runs_wall_time_leaves_out_the_pause(tmp_path):
  """Stopped after 12 s of rows, resumed an hour later for 140 s more: 152 s, not 3,752 (the
  committed Cost lines once counted the pause; norm_type_placement's said 3.97 h for 2.26)."""
  import datetime
  from transformer.report.runs import Run, wall_seconds
  t0 = datetime.datetime(2026, 11, 27, 4, 34, 31, tzinfo=datetime.timezone.utc).timestamp()
  later = t0 + 3600
  records = [{"time": datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(
      timespec="seconds"), "resumed_from": r} for t, r in ((t0, None), (later, 25))]
  (tmp_path / "provenance.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  rows = {"train": [{"step": s, "time": t} for s, t in
                    ((0, t0 + 5), (25, t0 + 17), (50, later + 20), (600, later + 160))]}
  assert wall_seconds(Run("p", {}, 600, str(tmp_path), rows)) == pytest.approx(152)
  (tmp_path / "provenance.jsonl").write_text(json.dumps(records[0]) + "\n")  # one start
  assert wall_seconds(Run("p", {}, 600, str(tmp_path), rows)) == pytest.approx(3755)
