"""Inputs that ended badly at `launch.py` (issue 47): a missing `gpt2:` file under
`--mode=prepare` (found only after the dataset was prepared), `--mode=prepare` without
TensorFlow (a traceback), and `--workdir=file://...` (refused as a bucket without a name)."""

import os
import subprocess
import sys

import pytest

from transformer import paths
from transformer.errors import CommandLineError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(argv, *, hide_tensorflow=False, timeout=300):
  """launch.py with `argv`, in a fresh Python (TensorFlow made unimportable if asked)."""
  code = ("import runpy, sys\n"
          + ("sys.modules['tensorflow'] = None\n" if hide_tensorflow else "")
          + f"sys.argv = ['launch.py', *{argv!r}]\n"
          "runpy.run_path('launch.py', run_name='__main__')\n")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ))
  lines = [line for line in out.stderr.splitlines() if line.strip()]
  assert "Traceback" not in out.stdout + out.stderr, out.stderr
  return out.returncode, lines


def _prepare_flags(tiny_corpus, tmp_path, *more):
  return ["--config=configs/default.py:smoke", "--mode=prepare",
          f"--prepare_dir={tmp_path / 'tokens'}",
          f"--config.data.source_dir={tiny_corpus['source_dir']}",
          f"--config.data.data_dir={tiny_corpus['data_dir']}",
          "--config.data.validation_percent=20", *more]


def test_prepare_checks_the_gpt2_file_before_the_dataset(tiny_corpus, tmp_path):
  missing = tmp_path / "r50k_base.tiktoken"
  rc, lines = _run(_prepare_flags(tiny_corpus, tmp_path, f"--config.data.tokenizer=gpt2:{missing}"))
  assert rc == 1 and len(lines) == 1, lines
  assert f"'{missing}' is not a file; give the path of a tiktoken ranks file" in lines[0]
  assert not os.path.exists(tiny_corpus["data_dir"])  # no dataset was prepared
  assert not (tmp_path / "tokens").exists()


def test_prepare_without_tensorflow_is_one_line(tiny_corpus, tmp_path):
  rc, lines = _run(_prepare_flags(tiny_corpus, tmp_path), hide_tensorflow=True)
  assert rc == 1 and len(lines) == 1, lines
  assert "--mode=prepare reads datasets with TensorFlow" in lines[0]
  assert "pip install -e ." in lines[0]
  assert not os.path.exists(tiny_corpus["data_dir"])


@pytest.mark.parametrize("url, path", [
    ("file:///tmp/runs/a", "/tmp/runs/a"), ("file://localhost/tmp/r%20b", "/tmp/r b"),
    ("/tmp/plain", "/tmp/plain"), ("gs://bucket/run", "gs://bucket/run"),
    ("file://otherhost/tmp/a", "file://otherhost/tmp/a")])
def test_a_file_url_names_its_local_path(url, path):
  assert paths.local_path(url) == path


def test_a_file_url_is_a_local_workdir_and_elsewhere_names_the_path(tmp_path):
  run = tmp_path / "no-run"
  rc, lines = _run(["--mode=eval", f"--workdir=file://{run}"])
  assert rc == 2 and len(lines) == 1, lines
  assert f"--workdir={run} does not exist" in lines[0] and "bucket" not in lines[0]
  with pytest.raises(CommandLineError, match=f"give its path \\({tmp_path}\\) instead"):
    paths.check_backend(f"file://{tmp_path}", "--sweep_dir")
  with pytest.raises(CommandLineError, match="not of another host"):
    paths.check_backend("file://otherhost/tmp", "--sweep_dir")
