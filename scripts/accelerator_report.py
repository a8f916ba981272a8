"""Every accelerator figure in one call: bench, memory and a short study, then one JSON and one
markdown file; `merge` puts them into the README's table and `experiments/results/`.

On a bare GPU host (its image: Python 3.12, jax + CUDA plugin, flax, optax, orbax-checkpoint,
tensorboard, numpy, matplotlib, scipy, ...; no ml-collections, TensorFlow or TFDS), from the
repository root:

  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \\
      .whl/*.whl -e . && python3 scripts/accelerator_report.py run --out=$OUT

Carried wheels (in `.whl/`, which git ignores; `scripts/accelerator_wheels.sh` downloads them):
ml_collections (configs) and importlib_resources. Nothing reads TensorFlow: bench draws random
batches, and the study trains on a token file of the host's Python standard library written
with NumPy (`transformer/data/local_tokens.py`). The same command runs on a CPU (`--profile`
is picked from the device: `gpu` or `cpu`; `tiny` is CI's: tiny shapes, seconds).

Parts, each in child processes (so a part that runs out of memory or time cannot take the
others with it, and each bench row's peak device memory is its own), each with a share of
`--budget_s` (default 480 s, sized for one H100 with room to rerun inside a 15-minute lease):
  probe        device, versions, a matmul's achieved FLOP/s (on CPU: the peak MFU is read
               against, re-measured here on a quiet machine and kept only if higher);
  bench        GPT-2 small (124M, bf16, 1024 tokens) at batch 8, 16, 32, 64 until one does
               not fit, then each GPU switch flipped alone (XLA attention, chunked loss,
               unpadded vocabulary): step time, tokens/s, MFU against the data-sheet dense
               peak, the measured peak device memory beside XLA's compiled memory analysis;
               the batch-16 row also traced (steps 6-8) and summed per kernel
               (accelerator_trace.py), so a gap comes with where the device time goes;
  replication  experiments/accelerator_replication.py:gpu (post, pre, peri x 3 LRs, 240
               steps of 64 x 512 tokens), stopped with SIGINT when its share runs out (each
               run saves and exits); finished runs are packed into one file, and each run's
               log head and tail (start, compile, last lines) into replication_logs.txt.
A part that runs out of time keeps what it measured and says so; elapsed time is printed per
part. Measured on one H200 (2026-11-26): probe 5 s, a bench row 67-72 s (compile 17-25 s), a
study point about 45 s: the whole plan needs about 15 minutes, so a 480 s call measures the
rows and points in priority order and `--parts` / `--bench_rows` plus `merge --combine` finish
the rest in a second call. `merge DIR` (on any machine with the project installed) copies the
files into `experiments/results/accelerator/`, regenerates the README table between its markers
from every JSON there, and writes the replication's report into
`experiments/results/accelerator_replication/`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

import accelerator_tables as tables  # noqa: E402

from transformer import paths  # noqa: E402 -- imports neither JAX nor TensorFlow

SCHEMA = 1
JSON_NAME, MD_NAME = "accelerator_report.json", "accelerator_report.md"
RUNS_NAME, SWEEP_NAME = "replication_runs.jsonl.xz", "replication_sweep.json"
LOGS_NAME = "replication_logs.txt"  # each run's log, cut to where its time went
STOP_GRACE_S = 90.0  # the study's sweep gets this long (at most a fifth of its share) to stop
SNAPSHOT_EVERY_S = 60.0  # the runs finished so far are packed into --out this often
VERSIONS = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "ml_collections")
GPT2_GPU = "configs/gpt2_small.py:gpu"
TINY_MODEL = {"model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
              "model.num_layers": 2, "data.seq_len": 32, "model.max_len": 32,
              "model.vocab_size": 500, "model.attention_impl": "xla", "model.dtype": "float32"}
# Each profile: bench rows (label, config, overrides), the batch sizes of the batch sweep, the
# switches flipped one at a time at `switch_batch`, the study's size, the parts' shares.
PROFILES = {
    "gpu": {"config": GPT2_GPU, "base": {}, "batches": [8, 16, 32, 64], "switch_batch": 16,
            "switches": [("xla attention", {"model.attention_impl": "xla"}),
                         ("chunked loss", {"train.loss_chunk": 256}),
                         ("vocabulary not padded", {"model.vocab_pad_multiple": 1}),
                         ("scanned layers", {"model.scan_layers": True})],
            "bench_steps": 10, "trace_steps": [6, 8], "replication": "gpu", "parallel": 1,
            "shares": {"probe": 0.04, "bench": 0.56, "replication": 0.40}},
    "cpu": {"config": "configs/default.py", "base": {}, "batches": [16], "switch_batch": 16,
            "switches": [], "bench_steps": 20, "replication": "",
            "shares": {"probe": 0.2, "bench": 0.8, "replication": 0.0}},
    "tiny": {"config": "configs/gpt2_small.py", "base": TINY_MODEL, "batches": [2, 4],
             "switch_batch": 2,
             "switches": [("chunked loss", {"train.loss_chunk": 16}),
                          ("vocabulary not padded", {"model.vocab_pad_multiple": 1})],
             "bench_steps": 3, "trace_steps": [2, 2], "replication": "tiny", "parallel": 2,
             "shares": {"probe": 0.1, "bench": 0.4, "replication": 0.5}},
}


def log(msg: str) -> None:
  print(f"[accelerator_report {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def versions() -> dict:
  """Installed versions, read from package metadata (no import: the parent never starts JAX,
  which would hold the accelerator its children need)."""
  out = {"python": platform.python_version()}
  for name in VERSIONS:
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      out[name] = None
  return out


def commit() -> str:
  """`$TRANSFORMER_COMMIT` when given (a device receives a copy of the tree, whose .git need not
  be the sender's), else the checkout's commit (+ whether tracked files differ), else
  'unknown'."""
  from transformer import provenance  # imports neither JAX nor TensorFlow
  given = os.environ.get("TRANSFORMER_COMMIT", "")
  if given:
    return f"{given} (given by TRANSFORMER_COMMIT)"
  state = provenance.git_state(ROOT)
  if not state["commit"]:
    return "unknown"
  return state["commit"][:12] + (" + uncommitted changes" if state["dirty"] else "")


# ------------------------------------------------------------------------------ children


def run_child(args: list[str], deadline: float, what: str, stop_signal=signal.SIGKILL,
              grace_s: float = 0.0) -> tuple[int | None, str]:
  """Runs `python args` until it ends or `deadline` (time.monotonic()); past it, sends
  `stop_signal`, waits `grace_s`, then kills. Returns (exit code or None if stopped, output).
  A Ctrl-C or SIGTERM of this process stops the child the same way, then goes on up."""
  left = deadline - time.monotonic()
  if left <= 1:
    return None, f"{what}: not started, its share of the time had run out"
  proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    out, _ = proc.communicate(timeout=left)
    return proc.returncode, out
  except subprocess.TimeoutExpired:
    out = _stop(proc, stop_signal, grace_s)
    return None, out + f"\n{what}: stopped, its share of the time ran out"
  except BaseException:  # the child must not outlive the report
    _stop(proc, stop_signal, grace_s)
    raise


def _stop(proc: subprocess.Popen, stop_signal, grace_s: float) -> str:
  """Sends `stop_signal` to the child's process group, kills it after `grace_s`; its output."""
  os.killpg(proc.pid, stop_signal)
  try:
    out, _ = proc.communicate(timeout=grace_s or 1)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
  return out or ""


def sigterm_as_interrupt(signum, frame) -> None:
  raise KeyboardInterrupt(f"signal {signum}")


def worker(kind: str, spec: dict, deadline: float) -> dict:
  """Runs one measurement (`kind`: probe or bench) in a child; its JSON result, or an error."""
  args = [os.path.join("scripts", "accelerator_worker.py"), kind, json.dumps(spec)]
  t0 = time.monotonic()
  code, out = run_child(args, deadline, f"{kind} {spec.get('label', '')}".strip())
  result = {"elapsed_s": round(time.monotonic() - t0, 1)}
  marker = next((line for line in reversed(out.splitlines())
                 if line.startswith(WORKER_MARK)), None)
  if code == 0 and marker:
    result.update(json.loads(marker[len(WORKER_MARK):]))
  elif code is None:
    result["stopped"] = out.strip().splitlines()[-1]
  else:
    result["error"] = (marker and json.loads(marker[len(WORKER_MARK):]).get("error")) or \
        "\n".join(out.strip().splitlines()[-5:])
  return result


WORKER_MARK = "ACCELERATOR_RESULT "


# ------------------------------------------------------------------------------- parts


def bench_specs(profile: dict, only: tuple[str, ...] = ()) -> list[dict]:
  """The rows in the order they run: the batch sweep up to `switch_batch` (that row traced
  when the profile asks), each switch flipped there, then the larger batches (which a short
  lease may not reach); `only`: these labels."""
  base = {"config": profile["config"], "steps": profile["bench_steps"]}
  at = profile["switch_batch"]

  def batch_row(b: int) -> dict:
    row = {**base, "label": f"batch {b}",
           "overrides": {**profile["base"], "train.batch_size": b}}
    traced = b == at and profile.get("trace_steps")
    return {**row, "trace_steps": profile["trace_steps"]} if traced else row

  switches = [{**base, "label": f"{name}, batch {at}", "switch": name,
               "overrides": {**profile["base"], "train.batch_size": at, **change}}
              for name, change in profile["switches"]]
  rows = ([batch_row(b) for b in profile["batches"] if b <= at] + switches
          + [batch_row(b) for b in profile["batches"] if b > at])
  return [r for r in rows if not only or r["label"] in only]


def run_bench(profile: dict, deadline: float, only: tuple[str, ...] = ()) -> dict:
  """Each row in its own child; the batch sweep stops at the first batch that does not fit."""
  rows, oom_at = [], None
  for spec in bench_specs(profile, only):
    batch = spec["overrides"]["train.batch_size"]
    if "switch" not in spec and oom_at is not None and batch > oom_at:
      rows.append({**spec, "skipped": f"batch {oom_at} already did not fit"})
      continue
    out = worker("bench", spec, deadline)
    rows.append({**spec, **out})
    if out.get("oom") and "switch" not in spec:
      oom_at = batch
    log(f"bench {spec['label']}: {tables.bench_outcome(rows[-1])} ({out['elapsed_s']} s)")
  return {"rows": rows}


def run_replication(size: str, parallel: int, deadline: float, out_dir: str, work: str,
                    study: str = "") -> dict:
  """The study's sweep in a child, SIGINT at the deadline; finished runs packed into out_dir.
  `study`: another sweep spec (`FILE.py:SIZE`) in place of the replication, its points fed
  the same token file (`data.name=token_file`), its report made from the packed runs here."""
  from transformer.data.local_tokens import write_local_token_file  # no JAX in this process
  tokens, sweep_dir = os.path.join(work, "tokens"), os.path.join(work, "replication")
  meta = write_local_token_file(tokens)
  log(f"replication: token file of {meta['source']['resolved_dir']}: "
      f"{meta['splits']['train']['tokens']:,} train tokens")
  sweep = study or f"experiments/accelerator_replication.py:{size}"
  resumed = _resume(study, sweep_dir)
  # The sweep is stopped early enough that its stop (each point saving, then exiting) ends by
  # the share's end: on the first long_runs lease it did not, and the lease killed the call.
  grace = min(STOP_GRACE_S, 0.2 * max(0.0, deadline - time.monotonic()))
  with Snapshots(sweep_dir, out_dir, os.path.join(work, "snapshot")):
    code, out = run_child(["launch.py", "--mode=sweep", f"--sweep={sweep}",
                           f"--sweep_dir={sweep_dir}", "--config=configs/default.py",
                           f"--parallel={parallel}", "--config.data.name=token_file",
                           f"--config.data.source_dir={tokens}"],
                          deadline - grace, "replication",
                          stop_signal=signal.SIGINT, grace_s=grace)
  finished = _pack_finished(sweep_dir, out_dir)
  lines = [line for line in out.splitlines() if line.startswith("[sweep]")]
  return {"sweep": sweep, "exit": code, "points_finished": finished,
          "resumed_from": resumed, "stopped": code is None, "runner": lines[-6:],
          "corpus": {"dir": meta["source"]["resolved_dir"],
                     "train_tokens": meta["splits"]["train"]["tokens"],
                     "validation_tokens": meta["splits"]["validation"]["tokens"]}}


class Snapshots:
  """While the study's sweep runs, every SNAPSHOT_EVERY_S the runs finished so far (and those it
  resumed from) are packed into out_dir's runs file, so a call killed from outside (a lease's
  time limit: what is under --out still comes back) keeps them. The copies are packed, never
  the sweep's own folders, which the sweep still reads."""

  def __init__(self, sweep_dir: str, out_dir: str, staging: str):
    self.sweep_dir, self.out_dir, self.staging = sweep_dir, out_dir, staging
    self.copied: set = set()
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._loop, daemon=True)

  def __enter__(self):
    os.makedirs(self.staging, exist_ok=True)
    resumed = os.path.join(self.sweep_dir, "runs.jsonl.xz")
    if os.path.isfile(resumed):
      shutil.copyfile(resumed, os.path.join(self.staging, "runs.jsonl.xz"))
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.stopped.set()
    self.thread.join()

  def _loop(self) -> None:
    while not self.stopped.wait(SNAPSHOT_EVERY_S):
      try:
        self.take()
        write_log_heads(self.sweep_dir, self.out_dir)
      except Exception as e:  # noqa: BLE001 -- a snapshot is a spare; the final pack still runs
        log(f"replication: snapshot failed ({type(e).__name__}: {e})")

  def take(self) -> int:
    """Packs the runs that finished since the last call; how many."""
    from transformer import packed_runs  # no JAX
    names = sorted(os.listdir(self.sweep_dir)) if os.path.isdir(self.sweep_dir) else []
    new = [n for n in names if n not in self.copied and
           os.path.isdir(os.path.join(self.sweep_dir, n)) and
           _finished(os.path.join(self.sweep_dir, n))]
    for name in new:
      src, dst = os.path.join(self.sweep_dir, name), os.path.join(self.staging, name)
      os.makedirs(dst, exist_ok=True)
      for f in os.listdir(src):  # the record's files; checkpoints are folders
        if os.path.isfile(os.path.join(src, f)):
          shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
    if new:
      packed_runs.pack(self.staging, sorted(set(packed_runs.entries(self.staging)) | set(new)))
      tmp = os.path.join(self.out_dir, RUNS_NAME + ".tmp")
      shutil.copyfile(os.path.join(self.staging, "runs.jsonl.xz"), tmp)
      os.replace(tmp, os.path.join(self.out_dir, RUNS_NAME))
      self.copied.update(new)
    return len(new)


def write_log_heads(sweep_dir: str, out_dir: str, head_lines: int = 12) -> int:
  """Each run's log from this call (finished or not; runs packed earlier have none), cut to
  where its time went: its first lines other than step lines (start time, model, baselines,
  the first step's compile time), its last two and when it was last written, into out_dir's
  LOGS_NAME. A lease's logs never come back otherwise. Returns how many runs it holds."""
  names = sorted(os.listdir(sweep_dir)) if os.path.isdir(sweep_dir) else []
  parts = []
  for name in names:
    path = os.path.join(sweep_dir, name, "log.txt")
    if os.path.islink(os.path.join(sweep_dir, name)) or not os.path.isfile(path):
      continue
    with open(path, encoding="utf-8", errors="replace") as f:
      lines = [line.rstrip("\n")[:300] for line in f]
    head = [line for line in lines[:60] if not line.lstrip().startswith("step ")][:head_lines]
    written = time.strftime("%H:%M:%S", time.gmtime(os.path.getmtime(path)))
    parts.append("\n".join([f"== {name} (last written {written} UTC)", *head, "...",
                            *lines[-2:]]))
  tmp = os.path.join(out_dir, LOGS_NAME + ".tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    f.write("\n\n".join(parts) + "\n")
  os.replace(tmp, os.path.join(out_dir, LOGS_NAME))
  return len(parts)


def _resume(study: str, sweep_dir: str) -> dict:
  """A study's runs committed in `experiments/in_progress/<name>/` (earlier leases) go into
  `sweep_dir` packed, so its sweep skips them and the runs file written back holds them too."""
  from transformer import packed_runs  # no JAX
  name = os.path.basename(study.split(":")[0]).removesuffix(".py") if study else ""
  src = os.path.join(ROOT, "experiments", "in_progress", name, "runs.jsonl.xz")
  if not name or not os.path.isfile(src):
    return {}
  os.makedirs(sweep_dir, exist_ok=True)
  shutil.copyfile(src, os.path.join(sweep_dir, "runs.jsonl.xz"))
  done = sorted(packed_runs.entries(sweep_dir))
  log(f"replication: {len(done)} runs of {name} already done (packed in {src})")
  return {"path": os.path.relpath(src, ROOT), "runs": len(done)}


def _pack_finished(sweep_dir: str, out_dir: str) -> list[str]:
  """Packs the finished run folders of `sweep_dir` with the runs it already held packed, into
  out_dir's runs file (and copies its sweep.json); the names of the runs that finished here."""
  from transformer import packed_runs  # no JAX
  if not os.path.isdir(sweep_dir):
    return []
  write_log_heads(sweep_dir, out_dir)  # before packing, which removes the finished folders
  names = sorted(n for n in os.listdir(sweep_dir) if os.path.isdir(os.path.join(sweep_dir, n)))
  finished = [n for n in names if _finished(os.path.join(sweep_dir, n))]
  earlier = sorted(packed_runs.entries(sweep_dir))
  if finished or earlier:
    packed_runs.pack(sweep_dir, sorted(set(finished) | set(earlier)))
    shutil.copyfile(os.path.join(sweep_dir, "runs.jsonl.xz"), os.path.join(out_dir, RUNS_NAME))
  if os.path.exists(os.path.join(sweep_dir, "sweep.json")):
    shutil.copyfile(os.path.join(sweep_dir, "sweep.json"), os.path.join(out_dir, SWEEP_NAME))
  return finished


def _finished(workdir: str) -> bool:
  """A run that reached its last step or stopped at a non-finite one (its own record)."""
  from transformer.errors import UserFileError
  from transformer.sweep import points  # no JAX
  from transformer.report import runs
  try:
    saved = runs.saved_config(workdir) or {}
  except UserFileError:  # a torn config.json: not a finished run
    return False
  steps = (saved.get("train") or {}).get("num_steps")
  return isinstance(steps, int) and points.is_finished(workdir, steps)


def run_parts(profile_name: str, out_dir: str, budget_s: float, parts: tuple[str, ...],
              only: tuple[str, ...] = (), study: str = "", parallel: int = 0) -> dict:
  """Probe, then `parts` (bench, replication) in turn, each to its share's end (time a part
  leaves passes on; a part left out gives its share to the next)."""
  profile = PROFILES[profile_name]
  start = time.monotonic()
  report = {"parts": {}}
  share_end = 0.0
  for part in ("probe", "bench", "replication"):
    share_end += profile["shares"][part]
    if (profile["shares"][part] <= 0 or (part != "probe" and part not in parts)
        or (part == "replication" and not profile["replication"])):
      continue
    t0 = time.monotonic()
    deadline = start + min(share_end, 1.0) * budget_s  # time a part leaves passes on
    if part == "probe":  # it names the device (about 6-9 s on a GPU): never a sliver
      deadline = max(deadline, start + min(20.0, budget_s))
    log(f"{part}: up to {deadline - t0:.0f} s")
    if part == "probe":
      result = worker("probe", {"label": "probe", "matmul": profile_name}, deadline)
    elif part == "bench":
      result = run_bench(profile, deadline, only)
    else:
      work = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"accelerator-{os.getpid()}")
      try:
        result = run_replication(profile["replication"], parallel or profile["parallel"],
                                 deadline, out_dir, work, study)
      finally:
        shutil.rmtree(work, ignore_errors=True)  # checkpoints: GBs on a GPU, never reported
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    result["share_s"] = round(deadline - t0, 1)
    report["parts"][part] = result
    log(f"{part}: done in {result['elapsed_s']} s")
  report["elapsed_s"] = round(time.monotonic() - start, 1)
  return report


def cmd_run(args) -> int:
  profile = args.profile or ("gpu" if shutil.which("nvidia-smi") else "cpu")
  os.makedirs(args.out, exist_ok=True)
  head = {"schema": SCHEMA, "profile": profile, "budget_s": args.budget_s,
          "command": "python scripts/accelerator_report.py " + shlex.join(sys.argv[1:]),
          "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "versions": versions(), "commit": commit(), "host": tables.host()}
  log(f"profile {profile}, budget {args.budget_s:.0f} s, {head['versions']}")
  parts = tuple(p for p in args.parts.split(",") if p)
  report = {**head, **run_parts(profile, args.out, args.budget_s, parts,
                                bench_row_labels(args.bench_rows), args.study, args.parallel)}
  report["host"]["load_average_end"] = tables.host()["load_average"]
  paths.write_text(os.path.join(args.out, JSON_NAME), json.dumps(report, indent=1,
                                                                  sort_keys=True))
  paths.write_text(os.path.join(args.out, MD_NAME), tables.markdown(report))
  log(f"wrote {args.out}/{JSON_NAME} and {MD_NAME} in {report['elapsed_s']} s")
  return 0


def cmd_merge(args) -> int:
  """Copies each DIR's files into the results and regenerates the README table."""
  for directory in args.dirs:
    report = tables.read_report(os.path.join(directory, JSON_NAME))
    slug = tables.slug(report)
    os.makedirs(args.results, exist_ok=True)
    target = os.path.join(args.results, slug)
    if args.combine and os.path.exists(f"{target}.json"):
      report = tables.combine(tables.read_report(f"{target}.json"), report)
    paths.write_text(f"{target}.json", json.dumps(report, indent=1, sort_keys=True))
    paths.write_text(f"{target}.md", tables.markdown(report))
    if os.path.exists(os.path.join(directory, RUNS_NAME)) and args.replication:
      _merge_replication(directory, args.replication)
  changed = tables.update_readme(args.readme, args.results)
  log(f"{args.readme}: table {'regenerated' if changed else 'unchanged'} from "
      f"{args.results}")
  return 0


def _merge_replication(directory: str, dest: str) -> None:
  os.makedirs(dest, exist_ok=True)
  shutil.copyfile(os.path.join(directory, RUNS_NAME), os.path.join(dest, "runs.jsonl.xz"))
  shutil.copyfile(os.path.join(directory, SWEEP_NAME), os.path.join(dest, "sweep.json"))
  from transformer.sweep.points import pack_manifest  # no JAX
  pack_manifest(dest)  # committed as every study's: sweep.json.xz
  # relative to the repository, so the report names no machine's path
  subprocess.run([sys.executable, "launch.py", "--mode=report",
                  f"--sweep_dir={os.path.relpath(dest, ROOT)}"],
                 cwd=ROOT, check=True, timeout=600)


def bench_row_labels(text: str) -> tuple[str, ...]:
  """`--bench_rows`' labels: separated by ';', since a switch row's label holds a comma."""
  return tuple(r.strip() for r in text.split(";") if r.strip())


def _check_run_args(parser, args) -> None:
  if args.budget_s <= 0:
    parser.error(f"--budget_s={args.budget_s} must be > 0")
  unknown = sorted(set(p for p in args.parts.split(",") if p) - {"bench", "replication"})
  if unknown:
    parser.error(f"--parts: unknown part(s) {unknown}; choose from bench,replication")
  if args.parallel < 0:
    parser.error(f"--parallel={args.parallel} must be >= 1 (0: the profile's)")
  if args.study and not os.path.isfile(os.path.join(ROOT, args.study.split(":")[0])):
    parser.error(f"--study={args.study}: no such sweep file; give FILE.py:SIZE, e.g. "
                 "experiments/long_runs.py:cpu")
  labels = {r["label"] for p in PROFILES.values() for r in bench_specs(p)}
  wrong = sorted(set(bench_row_labels(args.bench_rows)) - labels)
  if wrong:
    parser.error(f"--bench_rows: no row named {wrong}; rows: {sorted(labels)}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  run = sub.add_parser("run", help="measure; write DIR/accelerator_report.{json,md}")
  run.add_argument("--out", required=True)
  run.add_argument("--profile", choices=sorted(PROFILES), default="")
  run.add_argument("--budget_s", type=float, default=480.0)
  run.add_argument("--parts", default="bench,replication",
                   help="which of bench,replication to run after the probe")
  run.add_argument("--bench_rows", default="",
                   help="only these bench rows, by label, separated by ';' (labels hold commas: "
                        "'xla attention, batch 16;batch 64')")
  run.add_argument("--study", default="",
                   help="the replication part runs this sweep spec (FILE.py:SIZE) instead, on "
                        "the same token file; merge leaves its runs alone (copy them by hand)")
  run.add_argument("--parallel", type=int, default=0,
                   help="points at a time in the replication part (0: the profile's; on one "
                        "GPU the points share it, memory not preallocated)")
  merge = sub.add_parser("merge", help="results + README table from run folders")
  merge.add_argument("dirs", nargs="*")
  merge.add_argument("--combine", action="store_true",
                     help="fill the rows a device's committed report lacks from DIR's report "
                          "(a second call on the same device) instead of replacing it")
  merge.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
  merge.add_argument("--results", default=os.path.join(ROOT, "experiments", "results",
                                                       "accelerator"))
  merge.add_argument("--replication", default=os.path.join(
      ROOT, "experiments", "results", "accelerator_replication"))
  args = parser.parse_args(argv)
  if args.command == "run":
    _check_run_args(parser, args)
  signal.signal(signal.SIGTERM, sigterm_as_interrupt)
  try:
    return cmd_run(args) if args.command == "run" else cmd_merge(args)
  except tables.ReportError as e:
    print(f"accelerator_report: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("accelerator_report: interrupted; the running child was stopped (a study's runs "
          "saved), nothing was written.", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
