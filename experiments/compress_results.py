"""Makes a study's run data small enough to commit, then the report reads it as before.

  python experiments/compress_results.py experiments/results/warmup_stability \
      --link_to=experiments/results/lr_sensitivity

For every point of the sweep dir (its `sweep.json`):
- with `--link_to=OTHER` (a sweep dir whose runs it reused with `--reuse_runs_from`): a run
  that is a copy of one of OTHER's (the same `run_identity` and the same metrics) becomes a
  relative symlink to it, as `--reuse_runs_from` links it in a fresh sweep;
- `metrics.jsonl` becomes `metrics.jsonl.gz` (gzip, mtime 0 and no file name in the header:
  the same lines give the same bytes), which `transformer.workdir.read_metrics` reads when
  there is no plain file. Training keeps appending to a plain `metrics.jsonl`;
- `log.txt` (the point's console output) is removed: no report reads it, and it was a tenth of
  the committed results (issue 29). Keep the sweep dir itself if you want the logs.

Run it again after a rerun: a plain `metrics.jsonl` replaces the older `.gz`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformer.sweep.points import read_manifest, run_identity  # noqa: E402
from transformer.workdir import CONFIG_FILE, METRICS_FILE, METRICS_GZ  # noqa: E402

LOG_FILE = "log.txt"  # written by transformer/sweep/local.py beside each point's run


def gzip_bytes(data: bytes) -> bytes:
  """`data` gzipped reproducibly: no time stamp, no file name, level 9."""
  return gzip.compress(data, compresslevel=9, mtime=0)


def metrics_bytes(workdir: str) -> bytes | None:
  """The run's metrics lines, plain or from the `.gz`; None when it has neither."""
  plain, packed = os.path.join(workdir, METRICS_FILE), os.path.join(workdir, METRICS_GZ)
  if os.path.exists(plain):
    with open(plain, "rb") as f:
      return f.read()
  if os.path.exists(packed):
    with gzip.open(packed, "rb") as f:
      return f.read()
  return None


def compress_run(workdir: str) -> bool:
  """`metrics.jsonl` -> `metrics.jsonl.gz` in `workdir`, and its `log.txt` removed; False when
  there is no plain metrics file."""
  log = os.path.join(workdir, LOG_FILE)
  if os.path.exists(log):
    os.remove(log)
  plain = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(plain):
    return False
  with open(plain, "rb") as f:
    packed = gzip_bytes(f.read())
  with open(plain + ".gz", "wb") as f:
    f.write(packed)
  os.remove(plain)
  return True


def _identity(workdir: str) -> str | None:
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return run_identity(json.load(f))


def link_copies(sweep_dir: str, other: str) -> list[str]:
  """Replaces each point of `sweep_dir` that copies a run of `other` by a relative symlink to
  it; returns the linked point names."""
  originals = {}
  for p in read_manifest(other)["points"]:
    workdir = os.path.join(other, p["name"])
    if os.path.isdir(workdir) and not os.path.islink(workdir):
      originals.setdefault(_identity(workdir), []).append(workdir)
  linked = []
  for p in read_manifest(sweep_dir)["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    if os.path.islink(workdir) or not os.path.isdir(workdir):
      continue
    mine = metrics_bytes(workdir)
    for original in originals.get(_identity(workdir), ()):
      if mine is not None and metrics_bytes(original) == mine:
        shutil.rmtree(workdir)
        os.symlink(os.path.relpath(original, sweep_dir), workdir)
        linked.append(p["name"])
        break
  return linked


def compress_sweep(sweep_dir: str, link_to: str = "") -> tuple[list[str], int]:
  """Links the copies (when `link_to`) then gzips the metrics of every point's own run."""
  linked = link_copies(sweep_dir, link_to) if link_to else []
  count = 0
  for p in read_manifest(sweep_dir)["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    if os.path.isdir(workdir) and not os.path.islink(workdir):
      count += compress_run(workdir)
  return linked, count


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("sweep_dirs", nargs="+")
  parser.add_argument("--link_to", default="", help="a sweep dir whose runs this one reused")
  args = parser.parse_args(argv)
  for sweep_dir in args.sweep_dirs:
    linked, count = compress_sweep(sweep_dir, args.link_to)
    print(f"{sweep_dir}: {len(linked)} runs linked to {args.link_to or '-'}, "
          f"{count} metrics files gzipped")


if __name__ == "__main__":
  main()
