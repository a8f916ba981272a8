"""Packs a study's runs into one small file that its report reads as it read the folders.

  python experiments/compress_results.py experiments/results/warmup_stability \
      --link_to=experiments/results/lr_sensitivity

For the points of the sweep dir (its `sweep.json`):
- with `--link_to=OTHER[,OTHER2...]` (the sweep dirs whose runs it reused with
  `--reuse_runs_from`, packed or not): a run that is a copy of one of OTHER's (the same
  `run_identity` and the same metrics) becomes a link to it, as `--reuse_runs_from` links it in
  a fresh sweep;
- every run folder (and link) becomes one line of `runs.jsonl.xz` (`transformer.packed_runs`):
  its config, metrics (ungzipped; the train rows' throughput as float32), provenance and
  baselines record; `log.txt` (the point's
  console output), checkpoints and TensorBoard files are dropped (no report reads them). The
  folders are removed once the file is written. The same runs give the same bytes.
- `sweep.json` becomes `sweep.json.xz` (`transformer.sweep.points.pack_manifest`; the points
  repeat the study's shared overrides, so it packs to 3% of its size).

Run it again after more points finish: their folders join the packed file. A sweep dir
holding a run that has not ended (no final eval, no `diverged` row) is refused, nothing
packed: its partial metrics are not the run, and its checkpoints would go with its folder.
`python experiments/compress_results.py --in_progress=experiments/in_progress/<study> DIR`
packs DIR's own finished runs for `experiments/in_progress/` while its sweep goes on, leaving
DIR as it is (runs still training keep their folders and checkpoints).
`python experiments/compress_results.py --unpack DIR` writes the folders back;
`--repack DIR...` writes a packed file of an older form in the current one (the same runs,
throughput as float32).
`python experiments/compress_results.py --inline_links=OTHER DIR...` copies into DIR's packed
file the runs it links to in OTHER: run it before OTHER is re-run under new settings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformer import packed_runs, paths
from transformer.errors import UserFileError
from transformer.sweep.points import (MANIFEST, PACKED_MANIFEST, is_finished, pack_manifest,
                                      read_manifest, run_identity)
from transformer.report.runs import STUDY_BASELINES, read_cache, recorded_baselines
from transformer.workdir import CONFIG_FILE, METRICS_FILE, METRICS_GZ

LOG_FILE = "log.txt"  # written by transformer/sweep/local.py beside each point's run


def gzip_bytes(data: bytes) -> bytes:
  """`data` gzipped reproducibly: no time stamp, no file name, level 9."""
  return gzip.compress(data, compresslevel=9, mtime=0)


def metrics_text(workdir: str) -> str | None:
  """The run's metrics lines as its packed file keeps them (throughput as float32,
  `packed_runs.narrowed_throughput`): from the plain file, the `.gz`, or its sweep's packed
  file; None when it has none."""
  plain, zipped = os.path.join(workdir, METRICS_FILE), os.path.join(workdir, METRICS_GZ)
  if os.path.exists(plain):
    with open(plain, "rb") as f:
      text = f.read().decode("utf-8")
  elif os.path.exists(zipped):
    with gzip.open(zipped, "rb") as f:
      text = f.read().decode("utf-8")
  else:
    text = packed_runs.text(workdir, METRICS_FILE)
  return None if text is None else packed_runs.narrowed_throughput(text)


def _identity(workdir: str) -> str | None:
  path = os.path.join(workdir, CONFIG_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return run_identity(json.load(f))
  text = packed_runs.text(workdir, CONFIG_FILE)
  return None if text is None else run_identity(json.loads(text))


def _is_own_run(workdir: str) -> bool:
  """A run folder of this sweep, or a packed run of its own (not a link to another sweep)."""
  if os.path.islink(workdir):
    return False
  if os.path.isdir(workdir):
    return True
  return packed_runs.link_target(workdir) is None and packed_runs.resolve(workdir) is not None


def link_copies(sweep_dir: str, other: str) -> list[str]:
  """Replaces each run folder of `sweep_dir` that copies a run of `other` by a relative
  symlink to it (which `pack` keeps as a link); returns the linked point names."""
  originals = {}
  for p in read_manifest(other)["points"]:
    workdir = os.path.join(other, p["name"])
    if _is_own_run(workdir):
      originals.setdefault(_identity(workdir), []).append(workdir)
  linked = []
  for p in read_manifest(sweep_dir)["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    if os.path.islink(workdir) or not os.path.isdir(workdir):
      continue
    mine = metrics_text(workdir)
    for original in originals.get(_identity(workdir), ()):
      if mine is not None and metrics_text(original) == mine:
        shutil.rmtree(workdir)
        os.symlink(os.path.relpath(original, sweep_dir), workdir)
        linked.append(p["name"])
        break
  return linked


def relink_to_results(sweep_dir: str) -> int:
  """Rewrites each symlinked point of `sweep_dir` whose target is a run of a committed study
  (`<anything>/experiments/results/<study>/<point>`) as `../<study>/<point>`: where the packed
  file goes, `experiments/results/<this study>/`, that is where the run is. A sweep run
  outside the repository (or in `runs/studies/`) links by a path that breaks once the packed
  file moves there. Returns the links rewritten."""
  count = 0
  for p in read_manifest(sweep_dir)["points"]:
    link = os.path.join(sweep_dir, p["name"])
    if not os.path.islink(link):
      continue
    target = os.path.normpath(os.path.join(sweep_dir, os.readlink(link)))
    study, point = os.path.split(target)
    results, study_name = os.path.split(study)
    wanted = os.path.join("..", study_name, point)
    if results.endswith(os.path.join("experiments", "results")) and os.readlink(link) != wanted:
      os.remove(link)
      os.symlink(wanted, link)
      count += 1
  return count


def compress_sweep(sweep_dir: str, link_to: str = "") -> tuple[list[str], int]:
  """Links the copies of runs of `link_to` (comma-separated sweep dirs, as
  `--reuse_runs_from`), points the links into committed studies where the packed file will
  live (`relink_to_results`), then packs every point into `runs.jsonl.xz`. Returns the linked
  point names and the number of runs packed (links aside). Packs the manifest too. Refuses,
  before anything is written, a sweep with a run that has not ended (`_check_runs_ended`)."""
  _check_runs_ended(sweep_dir)
  linked = [name for other in filter(None, link_to.split(","))
            for name in link_copies(sweep_dir, other)]
  relink_to_results(sweep_dir)
  names = [p["name"] for p in read_manifest(sweep_dir)["points"]]
  runs, _ = packed_runs.pack(sweep_dir, names)
  if os.path.exists(os.path.join(sweep_dir, MANIFEST)):
    pack_manifest(sweep_dir)
  return linked, runs


def _own_run_folders(sweep_dir: str) -> list[tuple[dict, str]]:
  """(point, its folder) for each point of `sweep_dir` run into a folder of its own (not a
  link to another sweep's run, not a packed entry), finished or not."""
  found = []
  for p in read_manifest(sweep_dir)["points"]:
    workdir = os.path.join(sweep_dir, p["name"])
    if os.path.isdir(workdir) and not os.path.islink(workdir):
      found.append((p, workdir))
  return found


def _check_runs_ended(sweep_dir: str) -> None:
  """Refuses a sweep dir holding a run folder that has not ended: packing would keep its
  partial metrics as the run and remove its folder with the checkpoints it resumes from."""
  left = [p["name"] for p, workdir in _own_run_folders(sweep_dir)
          if not is_finished(workdir, p["num_steps"])]
  if left:
    raise UserFileError(
        f"{sweep_dir} holds {len(left)} run(s) that have not ended (e.g. {left[0]}); nothing "
        "was packed. Let the sweep finish them (run its command again), or pack the ended "
        "ones with --in_progress=experiments/in_progress/<study>.")


def pack_in_progress(sweep_dir: str, out_dir: str) -> int:
  """Packs the runs of `sweep_dir`'s own that have ended (its run folders that `is_finished`,
  and the runs already in its packed file) into `out_dir/runs.jsonl.xz`, the file
  `experiments/in_progress/<study>/` commits while the sweep goes on. The sweep dir is left as
  it is: a run still training keeps its folder and checkpoints, and runs unfinished or linked
  from other sweeps are left out. Nothing is written when `out_dir`'s file holds a run the
  sweep dir has not (`_check_keeps_committed`). Returns the runs packed."""
  ended = {p["name"] for p, workdir in _own_run_folders(sweep_dir)
           if is_finished(workdir, p["num_steps"])}
  packed = packed_runs.entries(sweep_dir)
  names = [p["name"] for p in read_manifest(sweep_dir)["points"]
           if p["name"] in ended or (not os.path.lexists(os.path.join(sweep_dir, p["name"]))
                                     and "files" in packed.get(p["name"], {}))]
  os.makedirs(out_dir, exist_ok=True)
  _check_keeps_committed(out_dir, names, sweep_dir)
  runs, _ = packed_runs.pack(sweep_dir, names, into=out_dir)
  return runs


def _check_keeps_committed(out_dir: str, names: list[str], sweep_dir: str) -> None:
  """Refuses to write `out_dir`'s packed file without a run it holds now (a sweep dir that
  was not given the committed file first would drop those runs)."""
  dropped = [n for n in packed_runs.entries(out_dir) if n not in names]
  if dropped:
    raise UserFileError(
        f"{os.path.join(out_dir, packed_runs.PACK)} holds {len(dropped)} finished run(s) that "
        f"{sweep_dir} has not (e.g. {dropped[0]}); nothing was written. Copy that file into "
        "the sweep dir (the sweep then skips those points) and pack again.")


def inline_links(sweep_dir: str, other: str) -> int:
  """`packed_runs.inline_links`, and the baselines measured afterwards for the copied runs
  (their home study's `study_baselines.json` records, for runs from before `baselines.json`)
  added to this study's, so its report reads the same levels. Returns the runs copied."""
  measured = {}  # point name -> its record in the home study's study_baselines.json
  for name in packed_runs.entries(sweep_dir):
    target = packed_runs.link_target(os.path.join(sweep_dir, name))
    if (target is not None and os.path.dirname(os.path.abspath(target)) == os.path.abspath(other)
        and packed_runs.text(target, "baselines.json") is None):
      record = recorded_baselines(target)
      if record:
        measured[name] = record
  count = packed_runs.inline_links(sweep_dir, other)
  if measured:
    path = os.path.join(sweep_dir, STUDY_BASELINES)
    study = read_cache(path) or {"written_by": "experiments/compress_results.py --inline_links "
                                  "(records measured for the studies the runs came from)"}
    records = study.setdefault("records", [])
    for name, record in measured.items():
      same = next((r for r in records if {k: v for k, v in r.items() if k != "points"} == record),
                  None)
      if same is None:
        same = {**record, "points": []}
        records.append(same)
      if name not in same["points"]:
        same["points"].append(name)
    paths.write_text(path, json.dumps(study, indent=1) + "\n")
  return count


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("sweep_dirs", nargs="+")
  parser.add_argument("--link_to", default="", help="the sweep dirs (comma-separated) whose "
                      "runs this one reused")
  parser.add_argument("--unpack", action="store_true", help="write the run folders back")
  parser.add_argument("--in_progress", default="", metavar="OUT_DIR",
                      help="pack the sweep's own finished runs into OUT_DIR/runs.jsonl.xz "
                      "(experiments/in_progress/<study>), leaving the sweep dir as it is")
  parser.add_argument("--repack", action="store_true", help="write the packed file again in "
                      "the current form (float32 metrics in their shortest text)")
  parser.add_argument("--inline_links", default="", metavar="OTHER",
                      help="copy into each packed file the runs it links to in OTHER (before "
                      "OTHER is re-run under new settings)")
  args = parser.parse_args(argv)
  for sweep_dir in args.sweep_dirs:
    if args.inline_links:
      print(f"{sweep_dir}: {inline_links(sweep_dir, args.inline_links)} linked "
            f"runs of {args.inline_links} copied in")
      continue
    if args.in_progress:
      print(f"{sweep_dir}: {pack_in_progress(sweep_dir, args.in_progress)} finished runs "
            f"packed into {os.path.join(args.in_progress, packed_runs.PACK)}")
      continue
    if args.unpack:
      print(f"{sweep_dir}: {packed_runs.unpack(sweep_dir)} run folders written")
      continue
    if args.repack:
      print(f"{sweep_dir}: {packed_runs.repack(sweep_dir)} entries written again")
      continue
    linked, count = compress_sweep(sweep_dir, args.link_to)
    print(f"{sweep_dir}: {len(linked)} runs linked to {args.link_to or '-'}, {count} runs "
          f"packed into {packed_runs.PACK}, the manifest into {PACKED_MANIFEST}")


if __name__ == "__main__":
  try:
    main()
  except UserFileError as e:  # a packed file or a sweep dir in the way: one line, exit 1
    sys.exit(f"compress_results.py: {e}")
