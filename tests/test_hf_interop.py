"""Hugging Face GPT-2 interop that cannot go silently wrong (issue 47): an export folder holds
exactly one model (refused when it holds anything else, replaced whole with --overwrite, no
temporary file left by a failed write); the GPT-2 preset round-trips; an imported model is
evaluated and sampled without a training step; sampling feeds a shifted-id run exactly the
prompt's tokens.
"""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.test_hf_export_tokenizer import _shifted_run, _workdir, bpe_path  # noqa: F401
from tests.test_hf_gpt2 import random_params, tiny_config
from transformer import paths
from transformer.cli import export, flag_checks
from transformer.errors import CommandLineError, RunError
from transformer.sampling import Sampling

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
    if str(dst).endswith("config.json"):
      raise OSError(28, "No space left on device")
    return real(src, dst)
  monkeypatch.setattr(os, "replace", full_disk)
  workdir = _bytes_run(tmp_path)
  with pytest.raises(RunError, match="cannot write config.json.*nothing was written there"):
    export.export_run(workdir, str(out), log=lambda s: None)
  assert not out.exists() and not [f for f in os.listdir(tmp_path) if ".export-" in f]


def test_an_overwrite_export_that_runs_out_of_disk_leaves_the_earlier_export(
    tmp_path, bpe_path, monkeypatch):
  """The new export's tokenizer files are written, then its model meets a full disk: the
  folder still holds the earlier export, byte for byte, and nothing else (it used to hold the
  earlier model beside the new tokenizer files), and the error says so in one line."""
  out = tmp_path / "hf"
  export.export_run(_bytes_run(tmp_path), str(out), log=lambda s: None)
  before = {f: (out / f).read_bytes() for f in os.listdir(out)}
  tokenizer_written = []
  real = paths.write_bytes

  def full_disk(path, data, mode=None):
    if os.path.basename(path) == "model.safetensors":
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    tokenizer_written.append(os.path.basename(path))
    return real(path, data, mode)
  monkeypatch.setattr(paths, "write_bytes", full_disk)
  _, _, _, bpe_run = _shifted_run(tmp_path, bpe_path)
  with pytest.raises(RunError) as e:
    export.export_run(bpe_run, str(out), log=lambda s: None, overwrite=True)
  assert "tokenizer.json" in tokenizer_written  # the new tokenizer files were written first
  assert str(e.value) == (f"--export_dir={out}: the export failed (cannot write "
                          "model.safetensors ([Errno 28] No space left on device)); the earlier "
                          "export there is left as it was.")
  assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before
  assert not [f for f in os.listdir(tmp_path) if ".export-" in f]  # the sibling is gone
  monkeypatch.setattr(paths, "write_bytes", real)  # disk space again: the export replaces it
  mode = os.stat(out).st_mode
  export.export_run(bpe_run, str(out), log=lambda s: None, overwrite=True)
  assert "tokenizer.json" in os.listdir(out) and os.stat(out).st_mode == mode
  assert not [f for f in os.listdir(tmp_path) if ".export-" in f]


def test_a_folder_that_cannot_be_renamed_gets_the_new_files_one_by_one(tmp_path, monkeypatch):
  """A mount point cannot be renamed aside: the new export's files replace the earlier ones
  there one by one, and the earlier export's others are removed."""
  out = tmp_path / "hf"
  out.mkdir()
  (out / "model.safetensors").write_bytes(b"old model")
  (out / "tokenizer.json").write_bytes(b"old tokenizer")
  real = os.rename

  def busy(src, dst):
    if os.fspath(src) == str(out):
      raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
    return real(src, dst)
  monkeypatch.setattr(os, "rename", busy)

  def write(folder):
    for name in ("model.safetensors", "config.json"):
      paths.write_bytes(os.path.join(folder, name), b"new " + name.encode())
    return [os.path.join(folder, n) for n in ("model.safetensors", "config.json")]
  assert export.write_swapped(str(out), write) == [str(out / "model.safetensors"),
                                                    str(out / "config.json")]
  assert {f: (out / f).read_bytes() for f in os.listdir(out)} == {
      "model.safetensors": b"new model.safetensors", "config.json": b"new config.json"}
  assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_a_file_url_export_dir_is_its_local_path(tmp_path):
  out = tmp_path / "hf"
  flag_checks.check_export_dir(f"file://{out}", None, str(tmp_path / "w"))  # accepted
  (out / "model.safetensors").parent.mkdir()
  (out / "model.safetensors").write_bytes(b"an earlier export")
  with pytest.raises(CommandLineError, match=f"--export_dir={out} already holds an export"):
    flag_checks.check_export_dir(f"file://{out}", None, str(tmp_path / "w"))
  with pytest.raises(CommandLineError, match="not of another host"):
    flag_checks.check_export_dir("file://otherhost/tmp/hf", None, str(tmp_path / "w"))


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


def _tiny_preset(**model):
  from configs import gpt2_small
  from transformer.config import from_config_dict
  c = gpt2_small.get_config("tiny")
  for k, v in model.items():
    setattr(c.model, k, v)
  return from_config_dict(c)


def test_the_tiny_gpt2_preset_is_exportable_and_the_124m_one_too():
  from configs import gpt2_small
  from transformer.config import from_config_dict
  from transformer.weights import hf_gpt2
  for variant in ("", "tiny"):
    model = from_config_dict(gpt2_small.get_config(variant)).model
    assert hf_gpt2.gpt2_lacks(model) == [] and model.norm_epsilon == 1e-5, variant
  big = from_config_dict(gpt2_small.get_config()).model
  assert (big.d_model, big.num_layers, big.num_heads, big.d_ff, big.max_len) == (
      768, 12, 12, 3072, 1024)


def test_num_steps_0_is_only_for_an_imported_model():
  from configs import gpt2_small
  from transformer.config import ConfigError, from_config_dict
  c = gpt2_small.get_config("tiny")
  c.train.num_steps = 0
  with pytest.raises(ConfigError, match="num_steps=0 trains nothing.*init_from"):
    from_config_dict(c)
  c.model.init_from = "hf:somewhere"
  assert from_config_dict(c).train.num_steps == 0


def test_evaluate_sample_and_export_an_imported_gpt2_without_a_training_step(tmp_path,
                                                                           tiny_corpus):
  """A GPT-2 folder of the tiny preset (bytes ids: nothing shifted) written by our exporter;
  `num_steps=0` with `init_from=hf:` writes it as checkpoint 0, which eval and sample read and
  export writes back bitwise (the round trip of the preset)."""
  from transformer.weights import hf_gpt2
  cfg = _tiny_preset(vocab_size=259)
  _, params = random_params(cfg, seed=11)
  folder, workdir, again = tmp_path / "gpt2", tmp_path / "w", tmp_path / "again"
  hf_gpt2.write_hf_dir(cfg.model, params, str(folder),
                       special_ids={"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2})
  common = [f"--workdir={workdir}", "--config=configs/gpt2_small.py:tiny"]
  r = _launch(*common, f"--config.data.source_dir={tiny_corpus['source_dir']}",
              f"--config.data.data_dir={tiny_corpus['data_dir']}",
              "--config.train.num_steps=0", f"--config.model.init_from=hf:{folder}",
              "--config.train.samples_at_eval=False")
  assert r.returncode == 0, r.stderr[-3000:]
  loaded = [line for line in r.stdout.splitlines() if "a Hugging Face GPT-2 run): loaded" in line]
  assert len(loaded) == 1 and "new (fresh init)" not in r.stdout, r.stdout[-3000:]
  n = loaded[0].split("loaded ")[1].split(" of ")
  assert n[0] == n[1].split()[0]  # every array
  assert sorted(os.listdir(workdir / "checkpoints")) == ["0"]
  r = _launch("--mode=eval", f"--workdir={workdir}")
  assert r.returncode == 0 and "eval of step 0" in r.stdout, r.stderr[-3000:]
  r = _launch("--mode=sample", f"--workdir={workdir}", "--prompt=def ", "--temperature=0",
              "--max_new_tokens=8")
  assert r.returncode == 0 and "--- sample 0" in r.stdout, r.stderr[-3000:]
  r = _launch("--mode=export", f"--workdir={workdir}", f"--export_dir={again}")
  assert r.returncode == 0 and "Exported step 0" in r.stdout, r.stderr[-3000:]
  assert r.stderr.strip() == "", r.stderr[-3000:]  # quiet: no libtpu search, no warnings
  assert (again / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_export_is_as_quiet_as_train_where_libtpu_is_installed_without_a_tpu(tmp_path):
  """JAX_PLATFORMS unset (conftest sets it): export restricts JAX to the CPU as train does, so
  libtpu does not print its search for a TPU (6 lines of INVALID_ARGUMENT trace before). The
  folder is given as a file URL, which names the local folder (it was refused as a bucket)."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  r = _launch("--mode=export", f"--workdir={_bytes_run(tmp_path)}",
              f"--export_dir=file://{tmp_path / 'hf'}", env=env)
  assert r.returncode == 0 and "Exported step 7" in r.stdout, r.stderr[-2000:]
  assert r.stderr.strip() == "", r.stderr[-2000:]
  assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]


def test_greedy_sample_of_a_shifted_id_run_is_the_gpt2_reference_continuation(tmp_path,
                                                                            bpe_path):
  """A BPE run (ids + 3) imported from a GPT-2 folder: `--mode=sample`'s decoding
  (generate_texts) of a prompt continues it as the independent NumPy GPT-2 does greedily on
  the exported tokenizer's ids of that prompt, no start token in front (as Hugging Face's
  generate)."""
  import dataclasses

  from tokenizers import Tokenizer
  from tests.gpt2_numpy_reference import gpt2_logits
  from transformer import kinds
  from transformer.data.tokenizers import build_tokenizer
  from transformer.tasks.generate import generate_texts
  from transformer.weights import hf_gpt2, init_from
  cfg = tiny_config(vocab_size=303, vocab_pad_multiple=64)
  cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=f"hf:{bpe_path}"))
  model, params = random_params(cfg, seed=9)
  folder = tmp_path / "gpt2"
  hf_gpt2.write_hf_dir(cfg.model, params, str(folder), id_offset=3)
  params = init_from.merge(params, init_from.matching_params(
      f"hf:{folder}", params, lambda s: None, vocab_size=303, id_offset=3, model=cfg.model))
  prompt, new = "def f(x):", 6
  ids = Tokenizer.from_file(bpe_path).encode(prompt).ids
  for _ in range(new):
    ids.append(int(np.argmax(gpt2_logits(str(folder), np.asarray([ids]))[0, -1])))
  want = Tokenizer.from_file(bpe_path).decode(ids[-new:])
  got = generate_texts(cfg, kinds.build_model(cfg.model), params, build_tokenizer(
      f"hf:{bpe_path}"), [prompt], Sampling(max_new=new), generative="lm")
  assert got == [want]
