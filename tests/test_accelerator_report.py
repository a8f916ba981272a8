"""scripts/accelerator_report.py: the command a GPU lease runs, here on CPU with tiny shapes;
its merge regenerates the README's table (the committed one byte for byte); its time shares
stop a part and keep what it measured; a torn report is one clear line."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.xla_flags import FAST_COMPILE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import accelerator_report as report  # noqa: E402
import accelerator_tables as tables  # noqa: E402
import accelerator_trace as trace  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "accelerator_report.py")


def _run(*args, env=None, timeout=900):
  proc = subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=env)
  return proc.returncode, proc.stdout + proc.stderr


def _readme_copy(tmp_path) -> str:
  path = str(tmp_path / "README.md")
  shutil.copyfile(os.path.join(ROOT, "README.md"), path)
  return path


@pytest.mark.timeout(1200)  # about 100 s alone; several minutes beside the suite on 2 cores
def test_tiny_report_writes_both_files_and_merge_regenerates_the_table(tmp_path):
  env = dict(os.environ, TRANSFORMER_CACHE_DIR=str(tmp_path / "cache"),  # one CPU device,
             TMPDIR=str(tmp_path), XLA_FLAGS=FAST_COMPILE)  # as a GPU host has one GPU
  out = str(tmp_path / "out")
  code, log = _run("run", "--profile=tiny", f"--out={out}", "--budget_s=1000", env=env,
                   timeout=1100)
  assert code == 0, log
  data = json.load(open(os.path.join(out, report.JSON_NAME)))
  assert data["parts"]["probe"]["platform"] == "cpu"
  assert data["parts"]["probe"]["matmul"]["flops_per_s"] > 0
  rows = data["parts"]["bench"]["rows"]
  assert [r["label"] for r in rows] == ["batch 2", "chunked loss, batch 2",
                                       "vocabulary not padded, batch 2", "batch 4"]
  for r in rows:
    assert "step_s" in r, r
    assert r["step_s"] > 0 and (r["mfu"] is None or 0 < r["mfu"] <= 1), r
    mem = r["memory"]
    assert mem["compiled_total_bytes"] == (mem["compiled_argument_bytes"]
                                           + mem["compiled_output_bytes"]
                                           + mem["compiled_temp_bytes"]
                                           - mem["compiled_alias_bytes"]) > 0
    phases = r["phases_s"]  # where a row's time goes: the parts lie inside the whole
    assert phases["init"] + phases["compile"] <= phases["run_benchmark"] + 0.2, phases
  assert rows[1]["config"]["loss_chunk"] == 16 and rows[2]["config"]["vocab_pad_multiple"] == 1
  assert rows[0]["profile"]["device_timeline"] is False  # traced; a CPU has no device lane
  assert "/host:CPU" in rows[0]["profile"]["processes"]
  rep = data["parts"]["replication"]
  assert len(rep["points_finished"]) == 4 and not rep["stopped"], rep  # post, pre x 2 LRs
  heads = open(os.path.join(out, report.LOGS_NAME), encoding="utf-8").read()
  assert heads.count("\n== ") + heads.startswith("== ") == 4, heads[:2000]
  assert "First step (with compilation) took" in heads, heads[:2000]
  md = open(os.path.join(out, report.MD_NAME)).read()
  assert "| batch 4 | decoder_lm |" in md and "## Replication" in md
  assert not os.path.exists(str(tmp_path / f"accelerator-{os.getpid()}"))

  readme, results = _readme_copy(tmp_path), str(tmp_path / "results")
  merged = str(tmp_path / "replication")
  code, log = _run("merge", out, f"--readme={readme}", f"--results={results}",
                   f"--replication={merged}")
  assert code == 0, log
  text = open(readme).read()
  assert "| 1 x cpu | batch 4 | decoder_lm |" in text
  assert os.listdir(results) == sorted(os.listdir(results)) and len(os.listdir(results)) == 2
  assert "## Verdict" in open(os.path.join(merged, "report.md")).read()
  assert not tables.update_readme(readme, results)  # regenerated: the same bytes again
  assert open(readme).read() == text


def test_committed_readme_table_is_generated_from_the_committed_reports():
  text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
  committed = text[text.index(tables.BEGIN):text.index(tables.END) + len(tables.END)]
  generated = tables.readme_table(os.path.join(ROOT, "experiments", "results", "accelerator"))
  assert committed == "\n".join(generated)


RESULTS = os.path.join(ROOT, "experiments", "results", "accelerator")
# A path in this repository, not the tail of another (`~/.cache/transformer/x` is none).
REPO_PATH = r"(?<![\w./~-])((?:transformer|scripts|configs|experiments|tests)/[\w./-]*\w)"


@pytest.mark.parametrize("home", ["/root", "/home/alice", "/Users/bob"])
def test_a_generated_line_names_no_absolute_home_path(tmp_path, home):
  """A CPU peak measured on another machine is cached under its home; the report and the
  README line say `~/.cache/transformer/`, not that machine's folder."""
  rep = tables.read_report(os.path.join(RESULTS, "cpu-cpu.json"))
  rep["parts"]["probe"]["peak"]["source"] = (
      f"measured on 2 CPU cores (cached in {home}/.cache/transformer/cpu_peak.json)")
  (tmp_path / "cpu-cpu.json").write_text(json.dumps(rep))
  for text in (tables.markdown(rep), "\n".join(tables.readme_table(str(tmp_path)))):
    assert f"{home}/" not in text
    assert "(cached in ~/.cache/transformer/cpu_peak.json)" in text


def test_every_repo_path_the_committed_accelerator_reports_cite_exists():
  cited = set()
  for name in sorted(os.listdir(RESULTS)):
    if name.endswith(".md"):
      text = open(os.path.join(RESULTS, name), encoding="utf-8").read()
      found = re.findall(REPO_PATH, text)
      cited |= {(name, path) for path in found}
  assert ("cpu-cpu.md", "transformer/model/flops.py") in cited  # the search finds paths
  missing = [(n, p) for n, p in sorted(cited) if not os.path.exists(os.path.join(ROOT, p))]
  assert not missing, missing


def test_the_readmes_switch_figures_are_the_committed_h200_rows():
  with open(os.path.join(ROOT, "experiments", "results", "accelerator", "gpu-nvidia-h200.json"),
            encoding="utf-8") as f:
    rows = {r["label"]: r for r in json.load(f)["parts"]["bench"]["rows"]}
  base, xla, chunk = (rows[k] for k in ("batch 16", "xla attention, batch 16",
                                        "chunked loss, batch 16"))
  ms = {k: r["step_s"] * 1e3 for k, r in (("base", base), ("xla", xla), ("chunk", chunk))}
  gib = {k: r["memory"]["device_peak_bytes"] / 2**30
         for k, r in (("base", base), ("xla", xla), ("chunk", chunk))}
  phrases = [
      f"**cuDNN attention is {ms['xla'] / ms['base']:.2f}x XLA's** at batch 16 "
      f"({ms['base']:.1f} against {ms['xla']:.1f} ms; {gib['base']:.1f} against "
      f"{gib['xla']:.1f} GiB)",
      f"**the chunked loss (256 positions) costs {ms['chunk'] / ms['base'] - 1:.0%} step time "
      f"for {1 - gib['chunk'] / gib['base']:.0%} less memory** ({ms['chunk']:.1f} against "
      f"{ms['base']:.1f} ms; {gib['chunk']:.1f} against {gib['base']:.1f} GiB)"]
  text = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
  assert [p for p in phrases if p not in text] == []


def test_the_readmes_scanned_layers_figures_are_the_third_leases_rows():
  results = os.path.join(ROOT, "experiments", "results", "accelerator")
  with open(os.path.join(ROOT, "experiments", "results", "accelerator_calls",
                         "gpu-nvidia-h200-2026-11-27T1844.json"),
            encoding="utf-8") as f:
    (unrolled,) = json.load(f)["parts"]["bench"]["rows"]  # that call ran batch 16 alone
  with open(os.path.join(results, "gpu-nvidia-h200.json"), encoding="utf-8") as f:
    scanned = next(r for r in json.load(f)["parts"]["bench"]["rows"]
                   if r["label"] == "scanned layers, batch 16")
  assert unrolled["label"] == "batch 16" and unrolled["config"]["scan"] is False
  assert scanned["config"]["scan"] is True
  u, s = unrolled, scanned
  saved = (u["init_s"] + u["compile_s"]) - (s["init_s"] + s["compile_s"])
  even = saved / (s["step_s"] - u["step_s"])
  phrases = [f"of the batch-16 row's {u['elapsed_s']:.1f} s, **{u['init_s']:.1f} s are the "
             f"initializer**",
             f"**scanned layers start {saved:.0f} s sooner and step "
             f"{s['step_s'] / u['step_s'] - 1:.0%} slower** (initializer {s['init_s']:.1f} "
             f"against {u['init_s']:.1f} s, step compiled in {s['compile_s']:.1f} against "
             f"{u['compile_s']:.1f} s; {s['step_s'] * 1e3:.1f} against {u['step_s'] * 1e3:.1f} "
             f"ms per step): they pay off in runs under about {round(even, -2):,.0f} steps"]
  text = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
  assert [p for p in phrases if p not in text] == []


@pytest.mark.parametrize("content, why", [(b"", "unreadable"), (b"\xff\xfe{", "unreadable"),
                                          (b'{"schema": 1, "parts"', "unreadable"),
                                          (b"[1, 2]", "not an accelerator report")])
def test_a_torn_or_foreign_report_is_one_clear_line(tmp_path, content, why):
  (tmp_path / report.JSON_NAME).write_bytes(content)
  code, log = _run("merge", str(tmp_path), f"--readme={_readme_copy(tmp_path)}",
                   f"--results={tmp_path / 'results'}", timeout=120)
  assert code == 2 and why in log and "Traceback" not in log, log
  code, log = _run("merge", str(tmp_path / "missing"), timeout=120)
  assert code == 2 and "no such file" in log


def test_a_part_past_its_share_is_stopped_and_says_so():
  t0 = time.monotonic()
  code, out = report.run_child(["-c", "import time; print('started', flush=True); "
                                "time.sleep(60)"], time.monotonic() + 3, "sleeper")
  assert code is None and "started" in out and "sleeper: stopped" in out
  assert time.monotonic() - t0 < 20
  code, out = report.run_child(["-c", "print(1)"], time.monotonic(), "late")
  assert code is None and "late: not started" in out


def test_a_stopped_study_gets_sigint_and_time_to_save():
  child = ("import signal, sys, time\n"
           "def save(*_):\n  print('saved', flush=True); sys.exit(130)\n"
           "signal.signal(signal.SIGINT, save)\nprint('running', flush=True)\ntime.sleep(60)")
  code, out = report.run_child(["-c", child], time.monotonic() + 3, "study",
                               stop_signal=report.signal.SIGINT, grace_s=20)
  assert code is None and "saved" in out, out


def _finished_run(workdir, steps: int, loss: float) -> None:
  os.makedirs(workdir)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"train": {"num_steps": steps}}, f)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": steps, "split": "eval", "loss": loss}) + "\n")


def test_a_study_resumes_from_its_in_progress_runs_and_returns_them_with_the_new(
    tmp_path, monkeypatch):
  """`--study`: the runs an earlier lease committed to experiments/in_progress/<study>/ are
  put in the sweep dir first (so the sweep skips them), and the runs file that comes back holds
  them beside the runs finished in this call, not in their place, and already while the sweep
  runs (a call killed from outside keeps them); the sweep is interrupted early enough that its
  stop ends inside the share."""
  from transformer import packed_runs
  root, work, out = tmp_path / "repo", tmp_path / "work", tmp_path / "out"
  earlier = root / "experiments" / "in_progress" / "long_runs_gpu"
  _finished_run(str(earlier / "a=1"), 5, 1.5)
  packed_runs.pack(str(earlier), ["a=1"])
  os.makedirs(out)
  monkeypatch.setattr(report, "ROOT", str(root))
  import transformer.data.local_tokens as local_tokens
  monkeypatch.setattr(local_tokens, "write_local_token_file", lambda path: {
      "source": {"resolved_dir": "stdlib"},
      "splits": {"train": {"tokens": 10}, "validation": {"tokens": 2}}})
  seen = {}

  def fake_sweep(args, deadline, what, stop_signal, grace_s):
    sweep_dir = next(a.split("=", 1)[1] for a in args if a.startswith("--sweep_dir="))
    seen.update(skipped=sorted(packed_runs.entries(sweep_dir)), stop_at=deadline, grace=grace_s)
    _finished_run(os.path.join(sweep_dir, "a=2"), 5, 1.4)  # finished in this call
    with open(os.path.join(sweep_dir, "a=2", "log.txt"), "w") as f:
      f.write("=== start\nFinal eval at step 5: loss 1.4\n")
    os.makedirs(os.path.join(sweep_dir, "a=3"))  # stopped before its end: not returned
    with open(os.path.join(sweep_dir, "a=3", "log.txt"), "w") as f:
      f.write("=== start\nFirst step (with compilation) took 3.0s.\nstep 1/5\nstep 2/5\n")
    snapshot = out / report.RUNS_NAME  # while the sweep still runs, as a killed call leaves it
    for _ in range(200):
      if snapshot.exists():
        shutil.copyfile(snapshot, tmp_path / "snapshot" / "runs.jsonl.xz")
        seen["snapshot"] = sorted(packed_runs.entries(str(tmp_path / "snapshot")))
        if seen["snapshot"] == ["a=1", "a=2"]:
          break
      time.sleep(0.05)
    assert os.path.isdir(os.path.join(sweep_dir, "a=2")), "the sweep's own folder stays"
    return None, "[sweep] finished 1 of 3"

  os.makedirs(tmp_path / "snapshot")
  monkeypatch.setattr(report, "SNAPSHOT_EVERY_S", 0.05)
  monkeypatch.setattr(report, "run_child", fake_sweep)
  share_end = time.monotonic() + 1000
  result = report.run_replication("cpu", 8, share_end, str(out), str(work),
                                  study="experiments/long_runs_gpu.py:cpu")
  assert seen["skipped"] == ["a=1"] and seen["snapshot"] == ["a=1", "a=2"]
  assert seen["grace"] == report.STOP_GRACE_S
  assert seen["stop_at"] + seen["grace"] <= share_end + 1e-6
  assert result["points_finished"] == ["a=2"] and result["stopped"]
  assert result["resumed_from"]["runs"] == 1
  shutil.copyfile(out / report.RUNS_NAME, tmp_path / "runs.jsonl.xz")
  assert sorted(packed_runs.entries(str(tmp_path))) == ["a=1", "a=2"]
  logs = (out / report.LOGS_NAME).read_text()  # the finished and the stopped run's logs
  assert "== a=3 (last written" in logs and "took 3.0s." in logs and "step 2/5" in logs
  assert "== a=2 (last written" in logs and "Final eval at step 5" in logs  # read before packing
  assert "== a=1" not in logs  # packed by an earlier lease: its log stayed there


def test_the_log_heads_keep_the_start_and_the_end_skip_step_lines_and_read_any_bytes(tmp_path):
  sweep, out = tmp_path / "sweep", tmp_path / "out"
  os.makedirs(sweep / "run")
  os.makedirs(out)
  steps = [f"step {i:5d}/900 | loss 1.0" for i in range(1, 900)]
  lines = ["=== 2026-11-28 19:23:46 launch.py", "Model: decoder_lm", *steps[:3],
           "First step (with compilation) took 12.5s.", *steps[3:], "Final eval: loss 0.98"]
  (sweep / "run" / "log.txt").write_bytes("\n".join(lines).encode() + b"\n\xff torn")
  os.symlink(sweep / "run", sweep / "linked")  # a reused run: not this call's
  assert report.write_log_heads(str(sweep), str(out)) == 1
  text = (out / report.LOGS_NAME).read_text()
  assert "took 12.5s." in text and "Final eval: loss 0.98" in text and "torn" in text
  assert "step     1/900" not in text and "== linked" not in text
  assert len(text.splitlines()) < 10


def test_a_study_that_is_not_a_file_is_refused_before_anything_runs(tmp_path):
  code, log = _run("run", f"--out={tmp_path}", "--study=experiments/no_such.py:cpu")
  assert code == 2 and "--study=experiments/no_such.py:cpu: no such sweep file" in log
  assert os.listdir(tmp_path) == []


def _row(label, batch, step_s, mfu, peak=None, compiled=None, switch=None):
  row = {"label": label, "step_s": step_s, "mfu": mfu, "tokens_per_s": 1.0,
         "config": {"batch": batch}, "memory": {"device_peak_bytes": peak,
                                                 "compiled_total_bytes": compiled}}
  return {**row, "switch": switch} if switch else row


def test_gaps_name_low_mfu_memory_off_the_analysis_and_a_slower_configured_switch():
  rows = [_row("batch 16", 16, 0.10, 0.30, peak=12 * 2**30, compiled=10 * 2**30),
          _row("batch 32", 32, 0.18, 0.50, peak=20 * 2**30, compiled=19.5 * 2**30),
          _row("xla attention, batch 16", 16, 0.08, 0.37, switch="xla attention"),
          _row("chunked loss, batch 16", 16, 0.12, 0.25, switch="chunked loss")]
  rep = {"profile": "gpu", "parts": {"probe": {"device_kind": "NVIDIA H100 80GB HBM3"},
                                     "bench": {"rows": rows}}}
  found = tables.gaps(rep)
  assert any(g.startswith("batch 16: MFU 30.0%") for g in found)
  assert not any(g.startswith("batch 32: MFU") for g in found)
  assert any("batch 16: measured peak 12.00 GiB against XLA's compiled 10.00 GiB (+20%)" in g
             for g in found)
  assert not any("batch 32: measured" in g for g in found)  # within 10%
  assert any(g.startswith("xla attention, batch 16: 80.0 ms against the config's 100.0 ms")
             for g in found)
  assert any(g.startswith("chunked loss, batch 16: 120.0 ms against the config's 100.0 ms "
                          "(+20%)") and "makes the step slower" in g for g in found)
  rep["parts"]["probe"]["device_kind"] = "cpu"
  assert not any("MFU" in g for g in tables.gaps(rep))  # the 45% bar is the H100's


def _report(rows, command="first", amended=None):
  rep = {"schema": 1, "profile": "gpu", "command": command, "started": "then", "commit": "c",
         "parts": {"probe": {"device_kind": "NVIDIA H200"}, "bench": {"rows": rows}}}
  return {**rep, "amended": amended} if amended else rep


def _full_report(rows):
  """`_report` with the header fields `markdown` writes (versions, budget, host)."""
  return {**_report(rows), "versions": {"jax": "0.11.2"}, "budget_s": 100.0,
          "elapsed_s": 61.0, "host": {"cpu_cores": 16, "load_average": [0.0, 0.0, 0.0]}}


def test_a_report_whose_traced_row_was_stopped_still_writes_its_markdown():
  # a third H200 lease: the batch-16 row, the one traced, ran out of its share; the spec's
  # trace steps once shared the key of the trace summary, and markdown() raised on them
  spec = next(s for s in report.bench_specs(report.PROFILES["gpu"]) if s.get("trace_steps"))
  stopped = {**spec, "stopped": "bench batch 16: stopped, its share of the time ran out"}
  assert "profile" not in stopped
  text = tables.markdown(_full_report([stopped]))
  assert "| batch 16 | stopped: bench batch 16: stopped" in text
  assert "## Profile" not in text
  config = {"kind": "decoder_lm", "batch": 16, "length": 1024, "dtype": "bfloat16",
            "attention": "cudnn", "vocab_pad_multiple": 64, "loss_chunk": 0}
  measured = {**_row("batch 16", 16, 0.04, 0.35, peak=13.44 * 2**30,
                     compiled=13.44 * 2**30), "config": config, "params": 124.5e6,
              "init_s": 42.44, "compile_s": 19.5, "elapsed_s": 69.5}
  row_line = next(line for line in tables.markdown(_full_report([measured])).splitlines()
                  if line.startswith("| batch 16 |"))
  assert row_line.endswith("| 13.44 | 13.44 | 42.4 | 19.5 | 70 |")  # init s beside compile s
  del measured["init_s"]  # rows measured before init_s was recorded
  assert "| 13.44 | - | 19.5 | 70 |" in tables.markdown(_full_report([measured]))


def test_a_second_call_fills_the_rows_the_first_could_not_measure():
  first = _report([_row("batch 8", 8, 0.02, 0.3), {"label": "batch 64", "stopped": "share"},
                   {"label": "xla attention, batch 16", "stopped": "not started"}])
  second = _report([_row("batch 64", 64, 0.13, 0.38), _row("batch 8", 8, 0.5, 0.01),
                    {"label": "xla attention, batch 16", "error": "boom"},
                    {"label": "chunked loss, batch 16", "stopped": "share"}], command="second")
  out = tables.combine(first, second)
  rows = {r["label"]: r for r in out["parts"]["bench"]["rows"]}
  # nothing unmeasured is added
  assert list(rows) == ["batch 8", "batch 64", "xla attention, batch 16"]
  assert rows["batch 8"]["step_s"] == 0.02  # a measured row is never replaced
  assert rows["batch 64"]["step_s"] == 0.13 and rows["batch 64"]["measured_in"] == "second"
  assert rows["xla attention, batch 16"] == {"label": "xla attention, batch 16",
                                             "stopped": "not started"}
  assert out["amended"] == "rows batch 64 measured by `second` (then, commit c)"
  assert first["parts"]["bench"]["rows"][1] == {"label": "batch 64", "stopped": "share"}
  # a row whose label the first call lacks (its settings changed since) is appended
  third = _report([{**_row("chunked loss, batch 16", 16, 0.04, 0.32),
                    "device_kind": "NVIDIA H200"}], command="third")
  third["parts"]["probe"] = {"stopped": "its share ran out"}  # the bench row names the device
  assert tables.slug(third) == tables.slug(first) == "gpu-nvidia-h200"
  out = tables.combine(out, third)
  assert [r["label"] for r in out["parts"]["bench"]["rows"]][-1] == "chunked loss, batch 16"
  assert out["parts"]["bench"]["rows"][-1]["measured_in"] == "third"
  assert out["amended"].endswith("rows chunked loss, batch 16 measured by `third` (then, commit c)")
  # a later call's study replaces the earlier's (merge commits its runs), and says so
  fourth = _report([_row("batch 8", 8, 0.5, 0.01)], command="fourth")
  fourth["parts"]["replication"] = {"points_finished": ["a", "b"]}
  out = tables.combine(out, fourth)
  assert out["parts"]["replication"] == {"points_finished": ["a", "b"]}
  assert out["parts"]["bench"]["rows"][0]["step_s"] == 0.02
  assert out["amended"].endswith("; the replication measured by `fourth` (then, commit c)")
  other = _report([])
  other["parts"]["probe"]["device_kind"] = "NVIDIA H100 80GB HBM3"
  with pytest.raises(tables.ReportError, match="cannot combine"):
    tables.combine(first, other)


def test_bench_rows_run_the_switches_before_the_largest_batches_and_can_be_picked():
  labels = [s["label"] for s in report.bench_specs(report.PROFILES["gpu"])]
  assert labels == ["batch 8", "batch 16", "xla attention, batch 16", "chunked loss, batch 16",
                    "vocabulary not padded, batch 16", "scanned layers, batch 16", "batch 32",
                    "batch 64"]
  picked = report.bench_specs(report.PROFILES["gpu"], ("batch 64", "chunked loss, batch 16"))
  assert [s["label"] for s in picked] == ["chunked loss, batch 16", "batch 64"]
  code, log = _run("run", "--out=/nonexistent/x", "--bench_rows=batch 3", timeout=60)
  assert code == 2 and "no row named ['batch 3']" in log
  # a label holds a comma, so rows are separated by ';': only 'batch 3' is unknown
  code, log = _run("run", "--out=/nonexistent/x",
                   "--bench_rows=xla attention, batch 16; batch 3", timeout=60)
  assert code == 2 and "no row named ['batch 3']" in log


def test_a_gpu_trace_is_summed_per_kernel_and_kind_per_step():
  events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:GPU:0"}},
            {"ph": "X", "pid": 1, "name": "train", "dur": 9e6},  # host: not device time
            {"ph": "X", "pid": 7, "name": "sm90_xmma_gemm_bf16", "dur": 6000.0},
            {"ph": "X", "pid": 7, "name": "sm90_xmma_gemm_bf16", "dur": 2000.0},
            {"ph": "X", "pid": 7, "name": "cudnn_generated_fort_native_sdpa", "dur": 1000.0},
            {"ph": "X", "pid": 7, "name": "loop_add_fusion", "dur": 1000.0},
            {"ph": "i", "pid": 7, "name": "marker"}]
  got = trace.summarize({"traceEvents": events}, steps=2)
  assert got["busy_ms_per_step"] == 5.0  # 10 ms of kernels over 2 steps
  assert got["by_kind_ms_per_step"] == {"matmul": 4.0, "attention": 0.5, "other": 0.5}
  assert got["top"][0] == ["sm90_xmma_gemm_bf16", 4.0, 0.8]
  assert trace.summarize({"traceEvents": events[:1] + events[2:3]}, 1) == {
      "device_timeline": False, "processes": ["/host:CPU"]}
  row = {"label": "batch 16", "step_s": 0.01, "synced_step_s": 0.01, "profile": got,
         "config": {"batch": 16}}
  found = tables.gaps({"profile": "gpu", "parts": {"probe": {"device_kind": "x"},
                                                   "bench": {"rows": [row]}}})
  assert found == ["batch 16: kernels busy 5.0 ms of a 10.0 ms step: the device waits 50% of it."]
  assert "| matmul | 4.00 | 80% |" in "\n".join(tables.profile_lines(row))


def test_a_missing_or_torn_trace_is_named_not_raised(tmp_path):
  assert "no *.trace.json.gz" in trace.read_profile(str(tmp_path), 1)["error"]
  folder = tmp_path / "profile" / "plugins" / "profile" / "t"
  folder.mkdir(parents=True)
  (folder / "vm.trace.json.gz").write_bytes(b"\x1f\x8b not gzip at all")
  assert "unreadable trace vm.trace.json.gz" in trace.read_profile(str(tmp_path), 1)["error"]


def test_a_terminated_report_takes_its_child_with_it(tmp_path):
  """SIGTERM to the report while a child runs: the child (its own process group) is stopped
  too, and the report exits 130 saying so; nothing is left running."""
  marker = tmp_path / "child.pid"
  child = (f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); "
           "time.sleep(120)")
  code = (f"import os, sys, time; sys.path[:0] = [{os.path.join(ROOT, 'scripts')!r}]\n"
          "import accelerator_report as r\n"
          "r.signal.signal(r.signal.SIGTERM, r.sigterm_as_interrupt)\n"
          f"try:\n  r.run_child(['-c', {child!r}], time.monotonic() + 120, 'sleeper')\n"
          "except KeyboardInterrupt:\n  print('interrupted', flush=True); sys.exit(130)\n")
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True)
  deadline = time.monotonic() + 60
  while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
  time.sleep(0.2)
  child = int(marker.read_text())
  proc.terminate()
  out, _ = proc.communicate(timeout=30)
  assert proc.returncode == 130 and "interrupted" in out
  time.sleep(0.5)
  with pytest.raises(ProcessLookupError):
    os.kill(child, 0)
