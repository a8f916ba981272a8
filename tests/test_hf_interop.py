"""Hugging Face GPT-2 interop that cannot go silently wrong (issue 47): an export folder holds
exactly one model (refused when it holds anything else, replaced whole with --overwrite, no
temporary file left by a failed write); the GPT-2 preset round-trips; an imported model is
evaluated and sampled without a training step; sampling feeds a shifted-id run exactly the
prompt's tokens.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.test_hf_export_tokenizer import _shifted_run, _workdir, bpe_path  # noqa: F401
from tests.test_hf_gpt2 import random_params, tiny_config
from transformer.cli import export
from transformer.errors import CommandLineError, RunError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bytes_run(tmp_path):
  cfg = tiny_config(vocab_size=259)
  _, params = random_params(cfg)
  return _workdir(tmp_path / "bytes_run", params, {}, vocab_size=259)


def test_export_over_an_earlier_export_is_refused_then_replaced_whole(tmp_path, bpe_path):
  _, _, _, bpe_run = _shifted_run(tmp_path, bpe_path)
  out = tmp_path / "hf"
  export.export_run(bpe_run, str(out), log=lambda s: None)
  before = {f: (out / f).read_bytes() for f in os.listdir(out)}
  assert {"tokenizer.json", "tokenizer_config.json"} <= set(before)
  with pytest.raises(CommandLineError, match="already holds an export.*tokenizer.json.*"
                                             "--overwrite") as e:
    export.export_run(_bytes_run(tmp_path), str(out), log=lambda s: None)
  assert "\n" not in str(e.value)
  assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before  # untouched
  lines = []
  export.export_run(_bytes_run(tmp_path), str(out), log=lines.append, overwrite=True)
  assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
  assert json.loads((out / "config.json").read_text())["vocab_size"] == 259
  assert "Removed the earlier export's tokenizer.json, tokenizer_config.json" in lines[0]


def test_export_into_a_folder_with_other_files_is_refused_even_with_overwrite(tmp_path):
  out = tmp_path / "hf"
  out.mkdir()
  (out / "notes.txt").write_text("mine")
  (out / "model.safetensors").write_bytes(b"another model")
  for overwrite in (False, True):
    with pytest.raises(CommandLineError, match="holds files an export does not write "
                                               r"\(notes.txt\)"):
      export.export_run(_bytes_run(tmp_path), str(out), overwrite=overwrite)
  assert (out / "notes.txt").read_text() == "mine"
  assert (out / "model.safetensors").read_bytes() == b"another model"


def test_a_failed_export_write_leaves_no_temporary_file(tmp_path, monkeypatch):
  out = tmp_path / "hf"
  real = os.replace

  def full_disk(src, dst):
    if str(dst).endswith("config.json") and str(out) in str(dst):
      raise OSError(28, "No space left on device")
    return real(src, dst)
  monkeypatch.setattr(os, "replace", full_disk)
  workdir = _bytes_run(tmp_path)
  with pytest.raises(RunError, match="cannot write config.json"):
    export.export_run(workdir, str(out), log=lambda s: None)
  assert not [f for f in os.listdir(out) if f.endswith(".tmp")], os.listdir(out)


def _launch(*args, timeout=240, env=None):
  return subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=env or dict(os.environ))


def test_launch_refuses_an_export_folder_holding_an_export_before_reading_the_run(tmp_path):
  out = tmp_path / "hf"
  out.mkdir()
  (out / "tokenizer.json").write_text("{}")
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "config.json").write_text("{}")  # never read: the flag check comes first
  r = _launch(f"--workdir={workdir}", "--mode=export", f"--export_dir={out}")
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert "already holds an export (tokenizer.json)" in lines[0] and "--overwrite" in lines[0]
