"""Every mode that writes checks, before it reads data or compiles anything, that it can write
where it will: a read-only place (a read-only bind mount, which stops root too) is one line
naming the flag, exit status 1, nothing printed on stdout and nothing written."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (mode's arguments, the flag the line names); {ro} is the read-only folder, {rw} a writable one.
CASES = {
    "train": (["--mode=train", "--workdir={ro}/run", "--config=configs/default.py:smoke"],
              "--workdir"),
    "eval": (["--mode=eval", "--workdir={ro}/run"], "--workdir"),
    "sample": (["--mode=sample", "--workdir={ro}/run", "--prompt=def"], "--workdir"),
    "diagnose": (["--mode=diagnose", "--workdir={ro}/run"], "--workdir"),
    "export": (["--mode=export", "--workdir={rw}/run", "--export_dir={ro}/export"],
               "--export_dir"),
    "prepare": (["--mode=prepare", "--prepare_dir={ro}/tokens"], "--prepare_dir"),
    "sweep": (["--mode=sweep", "--sweep=experiments/depth_post.py:cpu", "--sweep_dir={ro}/sw",
               "--dry_run"], "--sweep_dir"),
    "report": (["--mode=report", "--sweep_dir={ro}/sweep"], "--sweep_dir"),
    "report --runs": (["--mode=report", "--runs={rw}/run", "--report_dir={ro}/report"],
                      "--report_dir"),
}


def _fake_run(folder):
  """What the flag checks look for in a run: config.json and a checkpoint folder."""
  os.makedirs(os.path.join(folder, "checkpoints", "4"))
  with open(os.path.join(folder, "config.json"), "w") as f:
    f.write("{}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """`(read-only folder, writable folder)`: a run and a sweep under a read-only bind mount."""
  base = tmp_path_factory.mktemp("read_only")
  src, ro, rw = base / "src", base / "ro", base / "rw"
  for d in (src, ro, rw):
    d.mkdir()
  _fake_run(str(src / "run"))
  _fake_run(str(rw / "run"))
  (src / "sweep").mkdir()
  (src / "sweep" / "sweep.json").write_text('{"points": []}')
  mounted = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True)
  if mounted.returncode != 0:
    pytest.skip(f"needs root and bind mounts (mount said: {mounted.stderr.decode()[:200]})")
  try:
    remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True)
    if remount.returncode != 0:
      pytest.skip(f"cannot remount read-only: {remount.stderr.decode()[:200]}")
    with pytest.raises(OSError):
      (ro / "probe").write_text("x")  # the mount is read-only, for root too
    yield str(ro), str(rw), str(src)
  finally:
    subprocess.run(["umount", str(ro)], capture_output=True)


def _listing(folder):
  return sorted(os.path.relpath(os.path.join(d, f), folder)
                for d, dirs, files in os.walk(folder) for f in files + dirs)


@pytest.mark.parametrize("case", CASES)
def test_a_read_only_place_is_one_line_before_any_work(folders, case, tmp_path):
  ro, rw, src = folders
  args, flag = CASES[case]
  args = [a.replace("{ro}", ro).replace("{rw}", rw) for a in args]
  before = _listing(src), _listing(rw)
  env = {**os.environ, "TFDS_DATA_DIR": str(tmp_path / "tfds")}
  r = subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=120)
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert r.returncode == 1, (args, r.stdout[-500:], r.stderr[-1500:])
  assert len(lines) == 1 and r.stdout.strip() == "", (args, r.stdout[-500:], r.stderr[-1500:])
  assert lines[0].startswith(f"Error: {flag}=") and "cannot be written" in lines[0], lines[0]
  assert "Read-only file system" in lines[0], lines[0]
  assert (_listing(src), _listing(rw)) == before
