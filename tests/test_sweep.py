"""Sweep files, point validation and naming, the local runner (with stand-in child processes)
and the SLURM array script (run by a fake `sbatch`)."""

import ast
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from configs.default import get_config
from transformer import packed_runs, provenance
from transformer import study as study_lib
from transformer.workdir import read_metrics
from transformer.report.runs import saved_config
from transformer.sweep import points as sw
from transformer.config import ConfigError
from transformer.errors import CommandLineError, UserFileError
from transformer.sweep.local import Job, cpu_thread_env, run_jobs, visible_gpus
from transformer.sweep.slurm import SlurmResources, array_script, submit, write_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_product_and_zip_axes():
  points = sw.product({"model.norm_placement": ["pre", "post"]},
                      sw.zip_axes({"optim.learning_rate": [1e-3, 3e-3],
                                   "optim.warmup_steps": [0, 50]}),
                      {"seed": [0, 1, 2]})
  assert len(points) == 2 * 2 * 3
  assert points[0] == {"model.norm_placement": "pre", "optim.learning_rate": 1e-3,
                       "optim.warmup_steps": 0, "seed": 0}
  assert points[3] == {"model.norm_placement": "pre", "optim.learning_rate": 3e-3,
                       "optim.warmup_steps": 50, "seed": 0}  # the last axis varies fastest
  assert points[-1]["model.norm_placement"] == "post"
  with pytest.raises(ConfigError, match="one length"):
    sw.zip_axes({"a": [1, 2], "b": [1]})
  with pytest.raises(ConfigError, match="twice"):
    sw.product({"seed": [0]}, {"seed": [1]})
  with pytest.raises(ConfigError, match="list of values"):
    sw.product({"model.norm_placement": "pre"})


def test_load_sweep_with_argument(tmp_path):
  f = tmp_path / "s.py"
  f.write_text("from transformer.sweep.points import product\n"
               "def get_sweep(arg='a,b'):\n"
               "  return product({'model.norm_placement': arg.split(',')}, {'seed': [0, 1]})\n")
  assert len(sw.load_sweep(str(f))) == 4
  assert [p["model.norm_placement"] for p in sw.load_sweep(f"{f}:post")] == ["post", "post"]
  (tmp_path / "none.py").write_text("x = 1\n")
  with pytest.raises(UserFileError, match="no get_sweep"):  # the file is wrong: exit 1
    sw.load_sweep(str(tmp_path / "none.py"))
  with pytest.raises(CommandLineError, match="not a file"):  # the command line is: exit 2
    sw.load_sweep(str(tmp_path / "missing.py"))


STUDIES = ("grad_scale_depth", "grad_profile", "residual_growth", "warmup_stability",
           "lr_sensitivity", "qk_norm_logits", "depth", "warmup_length", "norms",
           "long_training")


@pytest.mark.parametrize("study", STUDIES)
def test_study_files_list_cpu_and_gpu_presets_with_three_seeds(study):
  """The study sweep files load, every point is a valid config, each has a claim and a
  verdict (`analyze`)."""
  path = os.path.join(ROOT, "experiments", f"{study}.py")
  cpu, gpu = sw.load_sweep(f"{path}:cpu"), sw.load_sweep(f"{path}:gpu")
  for points in (cpu, gpu):
    sw.validate_points(get_config(), points)
    assert {p["seed"] for p in points} >= {0, 1, 2}
    assert len(set(sw.point_names(points))) == len(points)
  assert cpu[0]["model.d_model"] < gpu[0]["model.d_model"]
  assert sw.sweep_report_settings(path)["claim"] and callable(study_lib.load(path).analyze)
  with pytest.raises(ConfigError, match="Unknown sweep preset 'tpu'"):
    sw.load_sweep(f"{path}:tpu")


def test_point_names_are_each_points_name_among_all_of_them():
  """`point_names` finds the varying fields once; each name is `point_name(p, points)`'s, on
  points that share a leaf name, set a field only in some, and one whose name is hashed."""
  points = [{"optim.learning_rate": 1e-3, "seed": 0, "data.seed": 1},
            {"optim.learning_rate": 3e-3, "seed": 0, "data.seed": 2, "model.norm": "rms"},
            {"optim.learning_rate": 3e-3, "seed": 1, "data.seed": 2, "train.note": "x" * 130},
            {"optim.learning_rate": 3e-3, "seed": 1, "data.seed": 2}]
  names = sw.point_names(points)
  assert names == [sw.point_name(p, points) for p in points]
  assert names[0] == "learning_rate=0.001,seed=0,data.seed=1"  # two `seed`s: full paths
  assert len(names[2]) <= sw.MAX_NAME and re.fullmatch(r".+-[0-9a-f]{10}", names[2])
  assert len(set(names)) == 4
  assert sw.point_names(points[:1]) == [sw.point_name(points[0])]


def test_norm_placement_sweep_validates_on_the_smoke_config():
  points = sw.load_sweep(os.path.join(ROOT, "experiments", "norm_placement.py:pre,post"))
  configs = sw.validate_points(get_config("smoke"), points)
  assert [(c.model.norm_placement, c.seed) for c in configs] == [
      ("pre", 0), ("pre", 1), ("pre", 2), ("post", 0), ("post", 1), ("post", 2)]


def test_reuse_links_only_finished_runs_with_the_same_config_and_data(tmp_path):
  """A finished run of another sweep whose config differs only in checkpoint settings and the
  data-filled vocab size, and that recorded reading the data the point reads now, is linked;
  one with another seed, unfinished, from before provenance (no data recorded) or that read
  other data (another Python's stdlib: another digest) is not."""
  base = get_config("smoke")
  lrs = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
  other_points = [{"optim.learning_rate": lr, "checkpoint.every_steps": 7} for lr in lrs]
  other_configs = sw.validate_points(base, other_points)
  other = tmp_path / "other"
  (tmp_path / "x.py").write_text("def get_sweep():\n  return []\n")
  sw.write_manifest(str(other), str(tmp_path / "x.py"), "c.py", [], other_points, other_configs)
  data_now = provenance.data_identity(other_configs[0].to_dict()["data"])
  recorded = [data_now, data_now, data_now, None, {**data_now, "digest": "0123456789abcdef"}]
  for i, (p, c) in enumerate(zip(other_points, other_configs)):
    w = other / sw.point_name(p, other_points)
    w.mkdir()
    saved = c.to_dict()
    saved["model"]["vocab_size"] = 259  # filled in from the tokenizer when the run started
    (w / "config.json").write_text(json.dumps(saved))
    final = c.train.num_steps if i != 2 else 1  # the third run did not finish
    (w / "metrics.jsonl").write_text(json.dumps({"step": final, "split": "eval", "loss": 1}))
    if recorded[i]:
      (w / provenance.FILE).write_text(json.dumps({"data": recorded[i]}) + "\n")
  points = [{"optim.learning_rate": lr, "seed": 0} for lr in (1e-3, 1e-2, 3e-2, 1e-1)]
  points.append({"optim.learning_rate": 3e-3, "seed": 1})
  configs = sw.validate_points(base, points)
  mine = tmp_path / "mine"
  names = sw.point_names(points)
  linked, refused = sw.link_reusable_runs(str(mine), names, configs, [str(other)])
  assert linked == [(names[0], str(other / "learning_rate=0.001"))]
  assert [(n, os.path.basename(s)) for n, s, _ in refused] == [
      (names[2], "learning_rate=0.03"), (names[3], "learning_rate=0.1")]
  assert "before provenance" in refused[0][2] and "0123456789abcdef" in refused[1][2]
  assert os.path.islink(mine / names[0]) and sw.is_finished(str(mine / names[0]),
                                                             configs[0].train.num_steps)
  assert sorted(os.listdir(mine)) == [names[0]]
  assert sw.link_reusable_runs(str(mine), names, configs, [str(other)])[0] == []  # there


def test_reuse_does_not_link_a_run_of_a_placement_from_before_its_block_was_rebuilt(tmp_path):
  """`hybrid` became the paper's HybridNorm (issue 68): a finished `hybrid` run that started
  before then (one made here with an older provenance time) computed the earlier block and is
  refused, naming hybrid_v0; one that started after is linked. depth_lr's committed 6-layer
  hybrid runs were re-linked from the rebuilt hybrid_norm study, so they are linked too."""
  study = os.path.join(ROOT, "experiments", "results", "depth_lr")
  rebuilt = next(p for p in sw.read_manifest(study)["points"]
                 if p["overrides"]["model.norm_placement"] == "hybrid"
                 and p["overrides"]["model.num_layers"] == 6)
  [now] = sw.validate_points(get_config(), [rebuilt["overrides"]])
  linked, refused = sw.link_reusable_runs(str(tmp_path / "committed"), [rebuilt["name"]], [now],
                                          [study])
  assert [n for n, _ in linked] == [rebuilt["name"]] and refused == []
  assert not sw.ran_earlier_block("hybrid", os.path.join(study, rebuilt["name"]))

  base = get_config("smoke")
  points = [{"model.norm_placement": "hybrid", "seed": s} for s in (0, 1)]
  configs = sw.validate_points(base, points)
  other = tmp_path / "other"
  (tmp_path / "x.py").write_text("def get_sweep():\n  return []\n")
  sw.write_manifest(str(other), str(tmp_path / "x.py"), "c.py", [], points, configs)
  data_now = provenance.data_identity(configs[0].to_dict()["data"])
  since = sw.REBUILT_PLACEMENTS["hybrid"]
  for p, c, started in zip(points, configs, ("2026-11-26T23:39:12+00:00", since)):
    w = other / sw.point_name(p, points)
    w.mkdir()
    (w / "config.json").write_text(json.dumps(c.to_dict()))
    (w / "metrics.jsonl").write_text(json.dumps({"step": c.train.num_steps, "split": "eval",
                                                 "loss": 1}))
    (w / provenance.FILE).write_text(json.dumps({"time": started, "data": data_now}) + "\n")
  names = sw.point_names(points)
  linked, refused = sw.link_reusable_runs(str(tmp_path / "mine"), names, configs, [str(other)])
  assert [n for n, _ in linked] == [names[1]] and [n for n, _, _ in refused] == [names[0]]
  assert "before that block was rebuilt" in refused[0][2] and "hybrid_v0" in refused[0][2]
  assert [sw.ran_earlier_block("hybrid", str(other / n)) for n in names] == [True, False]


def test_reuse_links_a_packed_run_and_reads_it_through_the_link(tmp_path):
  """A finished run that lives only in its sweep's packed file (`runs.jsonl.xz`, as
  experiments/results commits them) is reused like a folder: the point gets a relative
  symlink, is finished, and its config and metrics read through it; packing the new sweep
  keeps the relative link."""
  base = get_config("smoke")
  other_points = [{"optim.learning_rate": lr} for lr in (1e-3, 3e-3)]
  other_configs = sw.validate_points(base, other_points)
  other = tmp_path / "results" / "other"
  (tmp_path / "x.py").write_text("def get_sweep():\n  return []\n")
  sw.write_manifest(str(other), str(tmp_path / "x.py"), "c.py", [], other_points, other_configs)
  data_now = provenance.data_identity(other_configs[0].to_dict()["data"])
  names_other = sw.point_names(other_points)
  for name, c in zip(names_other, other_configs):
    w = other / name
    w.mkdir()
    (w / "config.json").write_text(json.dumps(c.to_dict()))
    (w / "metrics.jsonl").write_text(json.dumps(
        {"step": c.train.num_steps, "split": "eval", "loss": 1.5}) + "\n")
    (w / provenance.FILE).write_text(json.dumps({"data": data_now}) + "\n")
  packed_runs.pack(str(other), names_other)
  assert not (other / names_other[0]).exists()  # the folders are gone: only the file is left
  points = [{"optim.learning_rate": 3e-3}, {"optim.learning_rate": 1e-2}]
  configs = sw.validate_points(base, points)
  mine = tmp_path / "live" / "mine"
  names = sw.point_names(points)
  linked, refused = sw.link_reusable_runs(str(mine), names, configs, [str(other)])
  assert [n for n, _ in linked] == [names[0]] and refused == []
  assert os.readlink(mine / names[0]) == os.path.join("..", "..", "results", "other",
                                                      names_other[1])
  assert sw.is_finished(str(mine / names[0]), configs[0].train.num_steps)
  assert saved_config(str(mine / names[0]))["optim"]["learning_rate"] == 3e-3
  assert read_metrics(str(mine / names[0]))["eval"][0]["loss"] == 1.5
  packed_runs.pack(str(mine), names)
  entry = packed_runs.entries(str(mine))[names[0]]
  assert entry == {"name": names[0], "link": os.path.join("..", "..", "results", "other",
                                                          names_other[1])}
  assert read_metrics(str(mine / names[0]))["eval"][0]["loss"] == 1.5


def test_runs_saved_before_a_field_existed_keep_their_identity():
  """A committed run saved before `optim.decay_mask`, `model.vocab_pad_multiple`,
  `parallel.dcn_data` and `train.loss_chunk` existed is the same run as its point made now
  with `decay_mask=ndim` (the others' defaults compute what the old code did), so
  `--reuse_runs_from` and resuming still recognise it; a point that sets one of those fields
  to another value is another run."""
  study = os.path.join(ROOT, "experiments", "results", "grad_profile")  # kept as it was run
  workdir = os.path.join(study, sw.read_manifest(study)["points"][0]["name"])
  saved = saved_config(workdir)  # packed with its study (transformer.packed_runs)
  assert "loss_chunk" not in saved["train"] and "decay_mask" not in saved["optim"]
  manifest = sw.read_manifest(os.path.dirname(workdir))  # the point as that sweep made it
  point = next(p["overrides"] for p in manifest["points"]
               if p["name"] == os.path.basename(workdir))
  [now] = sw.validate_points(get_config(), [{**point, "optim.decay_mask": "ndim"}])
  assert sw.run_identity(saved) == sw.run_identity(now.to_dict())
  for field, value in [("optim.decay_mask", "role"), ("train.loss_chunk", 64),
                       ("model.vocab_pad_multiple", 128)]:
    [other] = sw.validate_points(get_config(), [{**point, "optim.decay_mask": "ndim",
                                                 field: value}])
    assert sw.run_identity(saved) != sw.run_identity(other.to_dict()), field


def test_validate_points_names_the_bad_point():
  c = get_config("smoke")
  good = [{"model.norm_placement": "post", "seed": 1}, {"optim.learning_rate": 1e-3}]
  configs = sw.validate_points(c, good)
  assert configs[0].model.norm_placement == "post" and configs[0].seed == 1
  assert configs[1].optim.learning_rate == 1e-3 and configs[1].seed == 0
  assert c.model.norm_placement == "pre"  # the base config is left alone
  cases = [({"model.norm_plaecment": "post"}, "'model.norm_plaecment': no such field"),
           ({"modle.d_model": 8}, "no such field"),
           ({"model.norm_placement": "middle"}, "norm_placement='middle' is not supported"),
           ({"train.num_steps": "ten"}, "train.num_steps")]
  for bad, message in cases:
    with pytest.raises(ConfigError) as e:
      sw.validate_points(c, good + [bad])
    assert str(e.value).startswith(f"Sweep point 2 {bad}") and message in str(e.value)
  with pytest.raises(ConfigError, match="repeated points"):
    sw.validate_points(c, [{"seed": 1}, {"seed": 1}])


def test_point_names_are_readable_and_distinct():
  points = [{"model.norm_placement": "post", "optim.learning_rate": 0.003, "seed": 1},
            {"model.norm_placement": "pre", "optim.learning_rate": 0.001, "seed": 1}]
  # seed is 1 in every point (a preset's field): it is left out of the names.
  assert sw.point_name(points[0], points) == "norm_placement=post,learning_rate=0.003"
  assert sw.point_name(points[0]) == "norm_placement=post,learning_rate=0.003,seed=1"
  clash = [{"model.dropout_rate": 0.1, "data.dropout_rate": 0.0}]
  assert sw.point_name(clash[0], clash) == "model.dropout_rate=0.1,data.dropout_rate=0.0"
  long_a = {"data.source_dir": "/a/" + "x" * 200}
  long_b = {"data.source_dir": "/b/" + "x" * 200}
  name_a, name_b = sw.point_name(long_a), sw.point_name(long_b)
  assert len(name_a) <= sw.MAX_NAME and name_a != name_b and "/" not in name_a


def test_point_command_overrides_win_and_round_trip_through_flags():
  cmd = sw.point_command("launch.py", "configs/default.py:smoke",
                         ["--config.seed=5", "--config.train.num_steps=7"],
                         {"seed": 1, "optim.learning_rate": 3e-4, "model.scan_layers": True},
                         "/tmp/w", "python")
  assert cmd == ["python", "launch.py", "--mode=train", "--config=configs/default.py:smoke",
                 "--config.train.num_steps=7", "--config.seed=1",
                 "--config.optim.learning_rate=0.0003", "--config.model.scan_layers=True",
                 "--workdir=/tmp/w"]


def test_is_finished_reads_the_final_eval(tmp_path):
  w = tmp_path / "run"
  assert not sw.is_finished(str(w), 10)
  w.mkdir()
  rows = [{"step": 5, "split": "eval", "loss": 1.0}, {"step": 10, "split": "train", "loss": 1}]
  (w / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 1')
  assert not sw.is_finished(str(w), 10)
  with open(w / "metrics.jsonl", "a") as f:
    f.write("\n" + json.dumps({"step": 10, "split": "eval", "loss": 0.5}) + "\n")
  assert sw.is_finished(str(w), 10)
  d = tmp_path / "diverged"
  d.mkdir()
  (d / "metrics.jsonl").write_text(json.dumps({"step": 4, "split": "train", "loss": None,
                                               "grad_norm": None, "diverged": 1}) + "\n")
  assert sw.is_finished(str(d), 10)  # a run that stopped at a non-finite step has ended


# A stand-in for `launch.py --mode=train`: `fake_train.py WORKDIR BEHAVIOUR`.
_FAKE_TRAIN = textwrap.dedent("""
    import json, os, signal, sys, time
    workdir, behaviour = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "pid"), "w") as f:
      f.write(str(os.getpid()))
    def finish():
      with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": 3, "split": "eval", "loss": 1.0}) + "\\n")
    if behaviour == "fail":
      sys.exit("boom")
    if behaviour == "wait":  # like the train loop: on SIGINT save and exit 0 (unfinished)
      def stop(signum, frame):
        with open(os.path.join(workdir, "signals"), "a") as f:
          f.write(signal.Signals(signum).name + "\\n")
        sys.exit(0)
      signal.signal(signal.SIGINT, stop)
      signal.signal(signal.SIGTERM, stop)
      for _ in range(600):
        time.sleep(0.05)
      sys.exit("never signalled")
    finish()
""")


def _jobs(tmp_path, behaviours):
  script = tmp_path / "fake_train.py"
  script.write_text(_FAKE_TRAIN)
  jobs = []
  for i, b in enumerate(behaviours):
    w = str(tmp_path / "sweep" / f"p{i}")
    jobs.append(Job(f"p{i}", w, [sys.executable, str(script), w, b],
                    finished=lambda w=w: sw.is_finished(w, 3)))
  return jobs


def test_runner_isolates_failures_and_skips_finished_points_on_rerun(tmp_path):
  lines = []
  jobs = _jobs(tmp_path, ["ok", "fail", "ok", "ok"])
  out = run_jobs(jobs, parallel=2, poll_s=0.05, print_fn=lines.append)
  assert sorted(j.name for j in out["finished"]) == ["p0", "p2", "p3"]
  assert [j.name for j in out["failed"]] == ["p1"] and out["failed"][0].returncode == 1
  assert "boom" in open(out["failed"][0].log_path).read()
  assert any("FAILED p1" in line and "log.txt" in line for line in lines)
  assert "[sweep] done 3 | running 0 | failed 1 | left 0" in lines
  # Rerun: the three finished points are skipped (their pid files are not rewritten).
  pids = {j.name: open(os.path.join(j.workdir, "pid")).read() for j in jobs}
  for j in jobs:
    os.remove(os.path.join(j.workdir, "pid"))
  out = run_jobs(_jobs(tmp_path, ["ok", "ok", "ok", "ok"]), parallel=2, poll_s=0.05,
                 print_fn=lines.append)
  assert len(out["finished"]) == 4 and not out["failed"]
  assert [j for j in pids if os.path.exists(os.path.join(tmp_path, "sweep", j, "pid"))] == ["p1"]


def test_a_point_linked_to_no_finished_run_fails_alone_in_one_line(tmp_path):
  """A reused point whose link no longer reaches a finished run (it moved, or the packed file
  that held it went elsewhere) is not started over the link: it fails with one line, and the
  other points run."""
  jobs = _jobs(tmp_path, ["ok", "ok", "ok"])
  os.makedirs(tmp_path / "sweep")
  os.symlink("../elsewhere/p1", jobs[1].workdir)
  lines = []
  out = run_jobs(jobs, parallel=2, poll_s=0.05, print_fn=lines.append)
  assert sorted(j.name for j in out["finished"]) == ["p0", "p2"]
  assert [j.name for j in out["failed"]] == ["p1"]
  assert (f"[sweep] FAILED p1: its workdir links to ../elsewhere/p1, which holds no finished run "
          f"from here; restore that run, or delete the link ({jobs[1].workdir}) to run the "
          "point.") in lines
  assert os.readlink(jobs[1].workdir) == "../elsewhere/p1"  # left as it was


def test_parallel_points_on_a_cpu_host_share_the_cores():
  env = cpu_thread_env({"PATH": "/bin"}, parallel=2, cpus=2)
  assert env["XLA_FLAGS"] == ("--xla_cpu_multi_thread_eigen=false "
                              "intra_op_parallelism_threads=1")
  assert cpu_thread_env({"XLA_FLAGS": "--a"}, 2, cpus=8)["XLA_FLAGS"] == (
      "--a intra_op_parallelism_threads=4")
  mine = {"XLA_FLAGS": "intra_op_parallelism_threads=3"}
  assert cpu_thread_env(mine, 2, cpus=8) == mine and cpu_thread_env({}, 1) == {}


def test_runner_gives_each_parallel_point_its_own_gpu(tmp_path, monkeypatch):
  assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
  script = tmp_path / "env.py"
  script.write_text("import os, sys\nopen(sys.argv[1], 'w').write("
                    "os.environ['CUDA_VISIBLE_DEVICES'])\n")
  jobs = [Job(f"p{i}", str(tmp_path / f"p{i}"), [sys.executable, str(script),
                                                   str(tmp_path / f"gpu{i}")],
              finished=lambda i=i: os.path.exists(tmp_path / f"gpu{i}"))
          for i in range(2)]
  out = run_jobs(jobs, parallel=2, gpus=["2", "3"], poll_s=0.05, print_fn=lambda s: None)
  assert len(out["finished"]) == 2
  assert sorted(open(tmp_path / f"gpu{i}").read() for i in range(2)) == ["2", "3"]


def test_sigint_reaches_every_child_once_and_leaves_no_process(tmp_path):
  """SIGINT to the runner: each running child gets one SIGINT (it saves and exits), points not
  started stay so, the runner exits; no child outlives it."""
  jobs = _jobs(tmp_path, ["wait", "wait", "ok"])
  runner = tmp_path / "runner.py"
  runner.write_text(textwrap.dedent(f"""
      import sys
      from transformer.sweep.local import Job, run_jobs
      from transformer.sweep.points import is_finished
      jobs = [Job(n, w, c, finished=lambda w=w: is_finished(w, 3)) for n, w, c in {
          [(j.name, j.workdir, j.command) for j in jobs]!r}]
      out = run_jobs(jobs, parallel=2, poll_s=0.05)
      print("OUTCOME", {{k: [j.name for j in v] for k, v in out.items()}}, flush=True)
  """))
  env = dict(os.environ, PYTHONPATH=ROOT)
  proc = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
  pid_files = [os.path.join(j.workdir, "pid") for j in jobs[:2]]
  deadline = time.time() + 60
  while not all(os.path.exists(p) for p in pid_files):
    assert time.time() < deadline, "children did not start"
    time.sleep(0.05)
  time.sleep(0.3)  # the children's handlers are installed right after the pid file
  proc.send_signal(signal.SIGINT)
  output, _ = proc.communicate(timeout=60)
  assert proc.returncode == 0, output
  outcome = ast.literal_eval(output.split("OUTCOME ", 1)[1].splitlines()[0])
  outcome["stopped"].sort()  # the order the two children exit in is the machine's
  assert outcome == {"finished": [], "failed": [], "stopped": ["p0", "p1"],
                     "not_started": ["p2"], "in_use": []}, output
  for j in jobs[:2]:
    assert open(os.path.join(j.workdir, "signals")).read() == "SIGINT\n"
    pid = int(open(os.path.join(j.workdir, "pid")).read())
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)
  assert not os.path.exists(jobs[2].workdir)


def test_slurm_script_runs_each_point_under_a_fake_sbatch(tmp_path, monkeypatch):
  jobs = _jobs(tmp_path, ["ok", "ok", "ok"])
  res = SlurmResources(gpus_per_task=2, time="01:00:00", partition="gpu", max_parallel=2,
                       extra=("qos=high",))
  text = array_script([j.name for j in jobs], [j.command for j in jobs], str(tmp_path / "sweep"),
                      ROOT, res, job_name="sweep-test")
  for line in ("#SBATCH --array=0-2%2", "#SBATCH --gpus-per-task=2", "#SBATCH --time=01:00:00",
               "#SBATCH --partition=gpu", "#SBATCH --qos=high", "#SBATCH --ntasks=1",
               "#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@120"):
    assert line in text.splitlines()
  path = write_script(text, str(tmp_path / "sweep"))
  assert subprocess.run(["bash", "-n", path]).returncode == 0  # valid bash
  # The fake sbatch runs every array task locally, one after another, then reports a job id.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "sbatch").write_text(textwrap.dedent("""\
      #!/bin/bash
      range=$(grep -o '^#SBATCH --array=[0-9]*-[0-9]*' "$1" | sed 's/.*=//')
      for i in $(seq ${range%-*} ${range#*-}); do
        SLURM_ARRAY_TASK_ID=$i bash "$1" > /dev/null || exit 1  # real sbatch: --output
      done
      echo "Submitted batch job 4242"
      """))
  (bin_dir / "sbatch").chmod(0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
  assert submit(path) == "Submitted batch job 4242"
  assert all(sw.is_finished(j.workdir, 3) for j in jobs)
  # A task id outside the array is an error, not a silent success.
  r = subprocess.run(["bash", path], env=dict(os.environ, SLURM_ARRAY_TASK_ID="7"),
                     capture_output=True, text=True)
  assert r.returncode == 2 and "no sweep point for array task 7" in r.stderr


@pytest.mark.parametrize("when", ["before the run's pid is known", "while the run starts",
                                  "as the shell waits, the run dying at once"])
def test_the_time_limit_warning_requeues_however_early_it_comes(tmp_path, when):
  """The batch shell's USR1 (time limit near) stops the run and requeues the task, also when it
  lands between the trap and `run=$!` (forced here by the shell signalling itself there), and
  when the run dies of the SIGTERM before the trap returns (forced by a trap that waits for the
  shell to reap the run): the cut-short `wait` then says 138, not the run's 143. A CI run met
  that last one on a real cluster, the run killed while it imported."""
  jobs = _jobs(tmp_path, ["ok"])
  text = array_script([jobs[0].name], [["sleep", "30"]], str(tmp_path / "sweep"), ROOT,
                      SlurmResources(gpus_per_task=0, time="01:00:00"), job_name="t")
  if when == "before the run's pid is known":
    assert text.count("\nrun=$!\n") == 1
    text = text.replace("\nrun=$!\n", "\nkill -USR1 $$\nrun=$!\n")
  elif when == "while the run starts":
    assert text.count('"${point[@]}" &') == 1
    text = text.replace('"${point[@]}" &', '{ kill -USR1 $$; exec "${point[@]}"; } &')
  else:
    kill = """kill -TERM "$run" 2>/dev/null' USR1"""
    assert text.count(kill) == 1 and text.count("\nrun=$!\n") == 1
    text = text.replace(kill, kill[:-6] + """; while kill -0 "$run" 2>/dev/null; do sleep 0.01;"""
                        " done' USR1")
    text = text.replace("\nrun=$!\n", "\nrun=$!\n{ sleep 0.2; kill -USR1 $$; } &\n")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/calls\n")
  (bin_dir / "scontrol").chmod(0o755)
  env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_ARRAY_TASK_ID="0",
             SLURM_JOB_ID="42")
  r = subprocess.run(["bash", write_script(text, str(tmp_path / "sweep"))], env=env,
                     capture_output=True, text=True, timeout=20)
  assert r.returncode == 143 and "time limit near" in r.stdout, r.stdout + r.stderr
  assert (tmp_path / "calls").read_text() == "requeue 42\n"


def test_sweep_cli_rejects_a_bad_point_before_starting_anything(tmp_path):
  f = tmp_path / "bad.py"
  f.write_text("def get_sweep():\n  return [{'seed': 0}, {'model.norm_plaecment': 'post'}]\n")
  r = subprocess.run([sys.executable, "launch.py", "--mode=sweep", f"--sweep={f}",
                      "--config=configs/default.py:smoke", f"--sweep_dir={tmp_path / 'out'}"],
                     cwd=ROOT, capture_output=True, text=True, timeout=120,
                     env=dict(os.environ, PYTHONPATH=ROOT))
  assert r.returncode == 1  # the sweep file is wrong, not the command line (that is 2)
  assert "Sweep point 1 {'model.norm_plaecment': 'post'}" in r.stderr
  assert not os.path.exists(tmp_path / "out")


def test_sweep_cli_points_runs_a_subset_and_keeps_every_point_in_the_manifest(tmp_path):
  """--points=REGEX: only the matching points run (here: printed by --dry_run); the manifest
  keeps all three, so the report still sees the whole sweep. A pattern that matches no point
  stops with one line before anything is written."""
  f = tmp_path / "three.py"
  f.write_text("def get_sweep():\n  return [{'model.norm_placement': 'post' if s == 2 else "
               "'pre', 'seed': s} for s in (0, 1, 2)]\n")
  common = [sys.executable, "launch.py", "--mode=sweep", f"--sweep={f}",
            "--config=configs/default.py:smoke", "--dry_run"]
  env = dict(os.environ, PYTHONPATH=ROOT)
  r = subprocess.run(common + [f"--sweep_dir={tmp_path / 'out'}", "--points=seed=[12]$"],
                     cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "--points=seed=[12]$: 2 of 3 points run here" in r.stdout
  assert [line.split(":")[0] for line in r.stdout.splitlines() if "--mode=train" in line] == [
      "norm_placement=pre,seed=1", "norm_placement=post,seed=2"]
  with open(tmp_path / "out" / "sweep.json") as manifest:
    assert len(json.load(manifest)["points"]) == 3
  r = subprocess.run(common + [f"--sweep_dir={tmp_path / 'out'}",  # a field's full key
                               r"--points=^model\.norm_placement=post"],
                     cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
  assert r.returncode == 0 and ": 1 of 3 points run here" in r.stdout, r.stdout + r.stderr
  r = subprocess.run(common + [f"--sweep_dir={tmp_path / 'none'}", "--points=seed=9"],
                     cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
  assert r.returncode == 2 and "--points=seed=9 matches none of the sweep's 3 points" in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "none")


def test_point_text_keeps_every_field_of_a_name_cut_by_its_length():
  """A name past MAX_NAME is cut and hashed (its seed lost); `point_text`, which --points also
  matches, writes every field in full."""
  long = {"train.num_steps": 9600, "optim.warmup_steps": 960, "train.diagnostics_every": 2400,
          "model.norm_placement": "pre", "model.norm": "dyt", "model.dyt_alpha_init": 0.5,
          "optim.learning_rate": 0.003, "seed": 3}
  name = sw.point_name(long)  # named alone: every field in its name, which is too long
  assert len(name) <= sw.MAX_NAME and "seed" not in name
  assert sw.point_text(long) == (
      "train.num_steps=9600,optim.warmup_steps=960,train.diagnostics_every=2400,"
      "model.norm_placement=pre,model.norm=dyt,model.dyt_alpha_init=0.5,"
      "optim.learning_rate=0.003,seed=3")


@pytest.mark.slow
def test_sweep_cli_end_to_end_slurm_then_local_rerun_and_report(tiny_corpus, tmp_path):
  """Real `launch.py` training: two points through a fake sbatch, then the local runner finds
  both finished, skips them and writes the report (about 1-2 minutes on 2 cores)."""
  f = tmp_path / "two.py"
  f.write_text("from transformer.sweep.points import product\n"
               "def get_sweep():\n"
               "  return product({'model.norm_placement': ['pre', 'post']})\n")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "sbatch").write_text(
      "#!/bin/bash\nfor i in 0 1; do SLURM_ARRAY_TASK_ID=$i bash \"$1\" > /dev/null 2>&1 "
      "|| exit 1; done\necho 'Submitted batch job 7'\n")
  (bin_dir / "sbatch").chmod(0o755)
  out = tmp_path / "out"
  common = [sys.executable, "launch.py", "--mode=sweep", f"--sweep={f}",
            "--config=configs/default.py:smoke", f"--sweep_dir={out}",
            f"--config.data.source_dir={tiny_corpus['source_dir']}",
            f"--config.data.data_dir={tiny_corpus['data_dir']}",
            "--config.data.validation_percent=20", "--config.data.seq_len=32",
            "--config.data.shuffle_buffer=64", "--config.train.num_steps=6",
            "--config.train.log_every=2", "--config.train.eval_every=3",
            "--config.checkpoint.every_steps=3"]
  env = dict(os.environ, PYTHONPATH=ROOT, PATH=f"{bin_dir}:{os.environ['PATH']}")
  r = subprocess.run(common + ["--launcher=slurm", "--slurm_time=00:10:00"], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "Submitted batch job 7" in r.stdout
  r = subprocess.run(common + ["--parallel=2"], cwd=ROOT, env=env, capture_output=True,
                     text=True, timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "2 of 2 points already finished" in r.stdout and "[sweep] start" not in r.stdout
  text = open(out / "report.md").read()
  assert "2 points: " in text
  assert not any(s in text for s in ("incomplete", "missing", "diverged")), text
  with open(out / "norm_placement=post" / "config.json") as cfg:
    assert json.load(cfg)["model"]["norm_placement"] == "post"
  with open(out / "results.csv") as f:
    assert len(f.read().splitlines()) == 3
