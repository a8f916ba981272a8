"""What a person sees from `launch.py` when a flag, a config argument or a cluster is wrong:
one paragraph, no traceback, exit status 2 (3 for a cluster that does not form), and nothing
written. Each check on its own, in-process: test_flag_checks.py."""

import os
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _launch(*args, timeout=120):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args,expected", [
    (["--config.model.nrom_placement=post"], "Did you mean --config.model.norm_placement?"),
    (["--config.modle.d_model=64"], "Did you mean --config.model.d_model?"),
    (["--config.nosuch=1"], "The sections are: checkpoint, data, model, optim, parallel, train"),
    (["--config.model.d_model=wide"], "--config.model.d_model=wide: expected int"),
    (["--config.train.batch_size=1.5"], "expected int (the config's value is 16)"),
    (["--config.model.scan_layers=maybe"], "expected bool"),
    (["--config=configs/nope.py"], "there is no file configs/nope.py. Config files in configs/:"),
    (["--config=configs/default.py:nosuch"], "Unknown variant 'nosuch' of configs/default.py"),
    (["--config=configs/seq2seq_small.py", "--config.data.src_lne=8"],
     "Did you mean --config.data.src_len?"),
    (["--mdoe=bench"], "Unknown flag --mdoe. Did you mean --mode?"),
    (["--mode=fly"], "value should be one of"),
])
def test_a_bad_argument_is_one_paragraph(tmp_path, args, expected):
  r = _launch(*args, f"--workdir={tmp_path / 'w'}")
  assert r.returncode == 2, r.stderr
  assert expected in r.stderr, r.stderr
  assert "Traceback" not in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("args,expected", [
    (["--mode=sweep", "--sweep=experiments/norm_placement.py", "--parallel=0"],
     "--parallel=0: must be at least 1."),
    (["--mode=sweep", "--sweep=experiments/norm_placement.py", "--sweep_dir=README.md"],
     "--sweep_dir=README.md is a file, not a directory."),
    (["--mode=sweep", "--sweep=experiments"], "--sweep=experiments: experiments is a directory"),
    (["--mode=sweep", "--sweep=experiments/norm_placement.py", "--workdir=runs/x"],
     "--workdir is not read by --mode=sweep"),
    (["--mode=report"], "--mode=report needs --sweep_dir=DIR"),
    (["--mode=report", "--sweep_dir=configs"], "--sweep_dir=configs holds no sweep.json"),
    (["--mode=sample", "--workdir=configs"], "--mode=sample needs the text to start from"),
    (["--mode=sample", "--workdir=configs", "--prompt=x"], "--workdir=configs holds no "
     "config.json"),
    (["--mode=sample", "--workdir=/nowhere", "--prompt=x", "--max_new_tokens=0"],
     "--max_new_tokens=0: must be at least 1."),
    (["--mode=eval", "--workdir=/nowhere/run"], "--workdir=/nowhere/run does not exist"),
    (["--mode=train", "--workdir=README.md"], "--workdir=README.md is a file, not a directory"),
    (["--mode=train", "--prompt=def "], "--prompt is not read by --mode=train"),
    (["--mode=bench", "--bench_steps=0"], "--bench_steps=0: must be at least 1."),
    (["--num_processes=2"], "--coordinator_address, --num_processes and --process_id go "
     "together"),
])
def test_a_bad_flag_of_a_mode_is_one_paragraph_before_anything_runs(args, expected):
  r = _launch("--config=configs/default.py:smoke", *args)
  assert r.returncode == 2, r.stderr
  assert r.stderr.startswith("Error: " + expected), r.stderr
  assert "Traceback" not in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_help_lists_the_modes_and_the_projects_flags():
  from transformer.cli import modes
  r = _launch("--help")
  assert r.returncode == 0, r.stderr
  for text in ("--workdir", "--config", "--coordinator_address", "--distributed_timeout",
               "--prompt"):
    assert text in r.stdout, text
  header = r.stdout.split("Modes (--mode):", 1)[1].split("\n\n", 1)[0].splitlines()
  named = [line.split()[0] for line in header if line[:2] == "  " and line[2:3] != " "]
  assert named == list(modes.NAMES)  # every mode, from the one list
  assert flags_mode_choices() == list(modes.NAMES)


def flags_mode_choices() -> list:
  from transformer.cli import launch  # defines --mode from modes.NAMES
  return list(launch.flags.FLAGS["mode"].parser.enum_values)


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]  # closed again when this returns


@pytest.mark.parametrize("process_id,expected", [
    (1, "nothing answers at that address"),  # the coordinator (process 0) never started
    (0, "the coordinator answers, so some process has not started"),  # process 1 never came
])
def test_joining_a_distributed_run_is_bounded(tmp_path, process_id, expected):
  address = f"127.0.0.1:{_closed_port()}"
  start = time.time()
  r = _launch("--config=configs/default.py:smoke", f"--workdir={tmp_path / 'w'}",
              f"--coordinator_address={address}", "--num_processes=2",
              f"--process_id={process_id}", "--distributed_timeout=5", timeout=100)
  assert r.returncode == 3, r.stderr[-2000:]
  assert f"--coordinator_address={address} within 5s" in r.stderr
  assert expected in r.stderr, r.stderr[-2000:]
  assert "Traceback" not in r.stderr
  assert time.time() - start < 60
