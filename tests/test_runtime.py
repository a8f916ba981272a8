"""Launcher settings: GPU XLA flags (GPU only, user flags win), the CPU backend alone where
libtpu is installed without a TPU, and the compilation cache."""

import importlib.util
import os
import subprocess
import sys

import pytest

from transformer.train import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_user_flags_are_never_overridden():
  user = "--xla_gpu_enable_latency_hiding_scheduler=false --xla_dump_to=/tmp/d"
  assert runtime.with_flags(user, runtime.GPU_XLA_FLAGS) == user
  assert runtime.with_flags("", ("--a=1", "--b=2")) == "--a=1 --b=2"
  assert runtime.with_flags("--b=3", ("--a=1", "--b=2")) == "--b=3 --a=1"


def test_flags_are_added_only_where_a_gpu_is_present(monkeypatch):
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/d"}
  monkeypatch.setattr(runtime, "gpu_present", lambda environ: False)
  assert runtime.add_gpu_xla_flags(True, env) == [] and env["XLA_FLAGS"] == "--xla_dump_to=/tmp/d"
  monkeypatch.setattr(runtime, "gpu_present", lambda environ: True)
  assert runtime.add_gpu_xla_flags(False, env) == []
  assert runtime.add_gpu_xla_flags(True, env) == list(runtime.GPU_XLA_FLAGS)
  assert env["XLA_FLAGS"].split() == ["--xla_dump_to=/tmp/d", *runtime.GPU_XLA_FLAGS]


def test_no_gpu_when_jax_platforms_excludes_it():
  assert not runtime.gpu_present({"JAX_PLATFORMS": "cpu"})


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu installed")
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc/self/maps")
def test_a_launch_without_a_tpu_does_not_start_libtpu():
  """With libtpu installed and no TPU, JAX would start libtpu, which prints its search for a
  TPU (TPU_ACCELERATOR_TYPE, worker hostnames) on every launch; the launcher's setting keeps
  JAX on the CPU first. Checked by whether the process mapped libtpu's library
  (/proc/self/maps), not by libtpu's warning: a process started while another one holds
  libtpu's lock file never prints it, so the outcome would depend on what else runs here."""
  code = ("import jax, sys; from transformer.train import runtime; r = {}; "
          "r['restricted'] = {restrict} and runtime.skip_absent_tpu(); jax.devices(); "
          "print(r['restricted'], 'libtpu' in open('/proc/self/maps').read())")
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  outs = {}
  for restrict in (False, True):
    r = subprocess.run([sys.executable, "-c", code.replace("{restrict}", str(restrict))], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    outs[restrict] = (r.stdout.strip(), r.stderr)
  assert outs[False][0] == "False True"  # without the setting JAX loads libtpu: the check sees it
  assert outs[True] == ("True False", "")  # with it, libtpu is never loaded and nothing printed


def test_the_tpu_setting_leaves_tpu_vms_gpu_machines_and_a_users_choice_alone(monkeypatch):
  from jax._src import hardware_utils  # the private API the setting uses
  assert callable(hardware_utils.num_available_tpu_chips_and_device_id)  # fails if JAX moves it
  assert not runtime.skip_absent_tpu({"JAX_PLATFORMS": "tpu,cpu"})
  monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: (4, 5))
  env = {}
  assert not runtime.skip_absent_tpu(env) and env == {}
  monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: (0, None))
  real_find_spec = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
      object() if name == "jax_cuda12_plugin" else real_find_spec(name, *a)))
  assert not runtime.skip_absent_tpu(env) and env == {}


def test_this_xla_accepts_the_gpu_flags():
  """XLA aborts on a flag it does not know; the CPU build parses the GPU flags too."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(runtime.GPU_XLA_FLAGS))
  ok = subprocess.run([sys.executable, "-c", "import jax; print(int(jax.numpy.ones(2).sum()))"],
                      env=env, capture_output=True, text=True, timeout=120)
  assert ok.returncode == 0 and ok.stdout.strip() == "2", ok.stderr[-2000:]
  env["XLA_FLAGS"] = "--xla_gpu_no_such_flag_at_all=true"  # the check above can fail
  bad = subprocess.run([sys.executable, "-c", "import jax; jax.numpy.ones(2).sum()"],
                       env=env, capture_output=True, text=True, timeout=120)
  assert bad.returncode != 0


def test_compilation_cache_keeps_programs_across_processes(tmp_path):
  code = ("import jax, jax.numpy as jnp\n"
          "from transformer.train import runtime\n"
          f"runtime.enable_compilation_cache({str(tmp_path / 'cache')!r})\n"
          "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
          "print(float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).sum()))\n")
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert os.listdir(tmp_path / "cache")
