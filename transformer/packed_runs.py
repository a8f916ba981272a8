"""A study's finished runs kept in one file, `<sweep_dir>/runs.jsonl.xz`, instead of a folder
per run: what `experiments/results/` commits (issue 29: 754 run folders made the results 30 MB).

Each line of the (xz-compressed) file is one point of the sweep, by its name:

  {"name": "<point>", "files": {"config.json": "<text>", "metrics.jsonl": "<text>", ...}}
  {"name": "<point>", "link": "../<other sweep dir>/<its point>"}

`files` holds every text file the run's folder held (metrics ungzipped, the logs and the
checkpoints excepted), its `.jsonl` files with their float32 numbers in their shortest text
(`transformer.float_text`, lossless: the committed studies pack 35% smaller), listed under
`"float_text"`; its metrics moreover column by column (`transformer.metric_columns`, as
lossless, listed under `"columns"`: 521 kB, 7%, off the committed packs; its float32 metrics
as binary byte planes in hex: a further 1.21 MB, 19%). One thing is not kept
bit for bit: the train rows' throughput (`THROUGHPUT`: tokens/s, s/step, MFU), float64 ratios
of a host clock, are kept as the float32 nearest to them, as every other metric is (7
significant digits, far finer than the timer's noise; no report reads them), which took 752
kB (10%) off the committed packs (issue 69); `time` stays as it was. `link` is a run reused
from another sweep (`--reuse_runs_from`), read from that sweep, as a relative symlink would
be. The readers of a run's files (`transformer.workdir.read_metrics`,
`transformer.report.runs.saved_config`, `transformer.provenance.read_records`, the baselines
record) fall back on `text(workdir, name)` when the file is not on disk, so a report
regenerates from the packed file alone. `pack` writes it (the same runs give the same bytes;
each recorded command without the folder of the checkout that ran it, `portable_command`),
`unpack` writes the folders back, `repack` rewrites an older file in the current form.
"""

from __future__ import annotations

import functools
import gzip
import json
import lzma
import math
import os
import re
import shutil
from typing import Optional

from transformer import float_text, metric_columns, paths
from transformer.errors import UserFileError

PACK = "runs.jsonl.xz"
SKIPPED = ("log.txt", ".lock")  # console output and the run lock: not the run's record
SKIPPED_IF_EMPTY = ("checkpoint_errors.log",)  # written by every run; empty when all went well
METRICS = "metrics.jsonl"  # transformer.workdir.METRICS_FILE (workdir imports this module)
THROUGHPUT = ("tokens_per_sec", "step_time", "mfu")  # train rows' host-timed ratios: float32
# The lossless forms of a `.jsonl` file, as the entry names the files written in each; `_line`
# tries them in this order (`columns` for the metrics only: 5-13% smaller than `float_text`).
FORMS = {"columns": metric_columns, "float_text": float_text}
ENTRY_KEYS = {"name", "files", "link", *FORMS}  # what an entry may hold; any other is refused
XZ_PRESET = 9 | lzma.PRESET_EXTREME  # 40% smaller than gzip -9 on these files (manifests too)


class PackError(UserFileError):
  """A packed file that cannot be read; its message is one line."""


def _pack_path(workdir: str) -> str:
  return os.path.join(os.path.dirname(os.path.normpath(workdir)), PACK)


@functools.lru_cache(maxsize=16)
def _read(path: str, stamp: tuple) -> dict:
  del stamp  # the cache key only: a rewritten file is read again
  try:
    with open(path, "rb") as f:
      data = lzma.decompress(f.read())
  except lzma.LZMAError as e:
    raise PackError(f"{path}: cannot be read as xz ({e}); restore it from git "
                    "(git checkout -- <file>).") from None
  entries = {}
  for number, line in enumerate(data.split(b"\n"), 1):
    if not line.strip():
      continue
    try:
      entry = json.loads(line.decode("utf-8"))
    except ValueError as e:
      raise PackError(f"{path}, line {number}: not a JSON line ({e}); restore the file from "
                      "git (git checkout -- <file>).") from None
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
            and (isinstance(entry.get("files"), dict) or isinstance(entry.get("link"), str))):
      raise PackError(f"{path}, line {number}: not a packed run ({{\"name\", \"files\" or "
                      "\"link\"}); restore the file from git (git checkout -- <file>).")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:  # a form this code does not know: reading on would see a run with no metrics
      raise PackError(f"{path}, line {number}: names {', '.join(unknown)}, which this checkout "
                      "cannot decode (the file was packed by newer code); read it with a newer "
                      "checkout, or write its folders back with that checkout's "
                      "experiments/compress_results.py --unpack.")
    entries[entry["name"]] = _decoded(entry, f"{path}, line {number}")
  return entries


def _decoded(entry: dict, where: str) -> dict:
  """The entry with its `columns` and `float_text` files back in the text the run wrote."""
  for form, module in FORMS.items():
    try:
      for name in entry.pop(form, []):
        entry["files"][name] = module.decode(entry["files"][name])
    except (ValueError, KeyError, TypeError, IndexError) as e:
      raise PackError(f"{where}: its {form} file cannot be decoded ({e!r}); restore the "
                      "file from git (git checkout -- <file>).") from None
  return entry


def _narrowed(value: float) -> float:
  """`value` as its nearest float32; kept as it is beyond float32's range."""
  narrow = float_text.as_float32(value)
  return narrow if math.isfinite(narrow) else value


def narrowed_throughput(text: str) -> str:
  """`text` (a run's metrics, JSON lines) with each row's `THROUGHPUT` values replaced by the
  float32 nearest to them; every other line and value written as it was. A line that is not a
  JSON object that `json.dumps` wrote is kept as it is."""
  lines = []
  for line in text.split("\n"):
    try:
      row = json.loads(line) if line else None
    except ValueError:
      row = None
    if (isinstance(row, dict) and json.dumps(row) == line
        and any(isinstance(row.get(k), float) for k in THROUGHPUT)):
      line = json.dumps({k: _narrowed(v) if k in THROUGHPUT and isinstance(v, float) else v
                         for k, v in row.items()})
    lines.append(line)
  return "\n".join(lines)


def _line(entry: dict) -> str:
  """The entry's line in the packed file: its recorded commands without their checkout's
  folder (`_portable`), its metrics' throughput as float32
  (`narrowed_throughput`), its metrics in `columns` and its other `.jsonl` files in
  `float_text`, each where that gives back the same text (else the next form, else the text)."""
  if "files" in entry:
    files, forms = dict(entry["files"]), {}
    for name in PORTABLE_FILES:  # a run's folder, or an entry packed before this was done
      if name in files:
        files[name] = _portable(files[name])
    if METRICS in files:
      files[METRICS] = narrowed_throughput(files[METRICS])
    for name, text in sorted(files.items()):
      if not name.endswith(".jsonl"):
        continue
      tried = FORMS if name == METRICS else {"float_text": float_text}
      for form, module in tried.items():
        short = module.encode(text)
        if short is not None and short != text:
          files[name] = short
          forms.setdefault(form, []).append(name)
          break
    entry = {**entry, "files": files, **forms}
  return json.dumps(entry, sort_keys=True, ensure_ascii=False)


def entries(sweep_dir: str) -> dict:
  """`{point name: entry}` of the sweep dir's packed file; `{}` when it has none."""
  path = os.path.join(sweep_dir, PACK)
  try:
    st = os.stat(path)
  except OSError:
    return {}
  return _read(os.path.abspath(path), (st.st_mtime_ns, st.st_size))


def resolve(workdir: str, _depth: int = 0) -> Optional[dict]:
  """The packed entry with `files` for the run at `workdir` (following links); None when the
  run is not packed."""
  if "://" in workdir or _depth > 8:
    return None
  workdir = os.path.normpath(workdir)
  entry = entries(os.path.dirname(workdir)).get(os.path.basename(workdir))
  if entry is None:
    if os.path.islink(workdir) and not os.path.exists(workdir):
      # `--reuse_runs_from` linked a packed run: the symlink names its place in that sweep.
      return resolve(os.path.join(os.path.dirname(workdir), os.readlink(workdir)), _depth + 1)
    return None
  if "link" in entry:
    return resolve(os.path.join(os.path.dirname(workdir), entry["link"]), _depth + 1)
  return entry


def link_target(workdir: str) -> Optional[str]:
  """The workdir a packed link names (relative paths kept relative); None otherwise."""
  if "://" in workdir:
    return None
  workdir = os.path.normpath(workdir)
  entry = entries(os.path.dirname(workdir)).get(os.path.basename(workdir))
  if entry and "link" in entry:
    return os.path.normpath(os.path.join(os.path.dirname(workdir), entry["link"]))
  return None


def text(workdir: str, name: str) -> Optional[str]:
  """The text of the run's file `name` from its sweep's packed file; None when not packed."""
  entry = resolve(workdir)
  if entry is None:
    return None
  return entry["files"].get(name)


# The command a run's provenance records (`provenance.jsonl`, and `config.json`'s first-start
# copy), as a JSON string value: packed with its checkout's folder taken out (`_portable`).
_COMMAND = re.compile(r'("command": ")((?:[^"\\]|\\.)*)(")')
PORTABLE_FILES = ("provenance.jsonl", "config.json")


def portable_command(command: str) -> str:
  """`command` (a run's, `launch.py ...`) with the folder of the checkout that ran it taken
  out: the runner gives a sweep's children absolute paths, so a run made before
  `provenance.portable_argv` recorded `/its/checkout/launch.py --config=/its/checkout/...`;
  this gives `launch.py --config=...`. A path outside that checkout stays as it was."""
  first = command.split(" ", 1)[0].strip("'")
  if not (os.path.isabs(first) and os.path.basename(first) == "launch.py"):
    return command
  return command.replace(os.path.join(os.path.dirname(first), ""), "")


def _portable(text: str) -> str:
  """`text` (a JSON file) with each recorded command made `portable_command`; nothing else in
  the text changes."""
  def one(m):
    command = json.loads(f'"{m.group(2)}"')
    portable = portable_command(command)
    return (m.group(0) if portable == command
            else m.group(1) + json.dumps(portable)[1:-1] + m.group(3))
  return _COMMAND.sub(one, text)


def _run_files(workdir: str) -> dict:
  files = {}
  for name in sorted(os.listdir(workdir)):
    path = os.path.join(workdir, name)
    if name in SKIPPED or not os.path.isfile(path) or (
        name in SKIPPED_IF_EMPTY and os.path.getsize(path) == 0):
      continue  # checkpoints/, tensorboard/: folders, not the record
    with open(path, "rb") as f:
      data = f.read()
    if name.endswith(".gz"):
      data, name = gzip.decompress(data), name[:-3]
    files[name] = data.decode("utf-8")
  return files


def pack(sweep_dir: str, names: list[str], into: Optional[str] = None) -> tuple[int, int]:
  """Writes the points `names` of `sweep_dir` (run folders, or symlinks to another sweep's run,
  or entries already packed) into its packed file, then removes the folders and symlinks.
  With `into` (an existing folder) the packed file is written there instead and `sweep_dir` is
  left as it is: a sweep still running commits its ended runs so, its folders (checkpoints
  and all) kept for the runs it resumes. A run's recorded commands lose their checkout's path
  (`portable_command`); an entry already packed is otherwise kept as it is. Returns (runs,
  links) packed. The same runs give the same bytes."""
  old = entries(sweep_dir)
  lines, runs, links = [], 0, 0
  for name in names:
    workdir = os.path.join(sweep_dir, name)
    if os.path.islink(workdir):
      entry = {"name": name, "link": os.readlink(workdir)}
    elif os.path.isdir(workdir):
      entry = {"name": name, "files": _run_files(workdir)}
    elif name in old:
      entry = old[name]
    else:
      continue  # a point that never ran
    links += "link" in entry
    runs += "files" in entry
    lines.append(_line(entry))
  _write(into or sweep_dir, lines)
  if into is not None:
    return runs, links
  for name in names:  # only once the file that replaces them is in place
    workdir = os.path.join(sweep_dir, name)
    if os.path.islink(workdir):
      os.remove(workdir)
    elif os.path.isdir(workdir):
      shutil.rmtree(workdir)
  return runs, links


def _write(sweep_dir: str, lines: list[str]) -> None:
  """Replaces the sweep's packed file by `lines` (JSON entries), atomically."""
  data = lzma.compress(("\n".join(lines) + "\n").encode("utf-8"), preset=XZ_PRESET)
  paths.write_bytes(os.path.join(sweep_dir, PACK), data)


def inline_links(sweep_dir: str, into: str) -> int:
  """Replaces each packed link of `sweep_dir` to a run of the sweep dir `into` by a copy of
  that run's files; returns how many. Run it before `into` is re-run under other settings:
  the links would then name runs that are not the ones this sweep reported."""
  into = os.path.abspath(into)
  lines, count = [], 0
  for name, entry in entries(sweep_dir).items():
    target = link_target(os.path.join(sweep_dir, name))
    if target is not None and os.path.dirname(os.path.abspath(target)) == into:
      resolved = resolve(target)
      if resolved is None:
        raise PackError(f"{sweep_dir}: {name} links to {target}, which is not a packed run; "
                        "restore that study's runs.jsonl.xz from git first.")
      entry = {"name": name, "files": resolved["files"]}
      count += 1
    lines.append(_line(entry))
  if count:
    _write(sweep_dir, lines)
  return count


def repack(sweep_dir: str) -> int:
  """Writes the sweep's packed file again in the current form (its runs, their order and their
  texts unchanged but for the throughput as float32, `narrowed_throughput`, and the recorded
  commands without their checkout's folder, `portable_command`); returns its entries."""
  packed = entries(sweep_dir)
  if packed:
    _write(sweep_dir, [_line(entry) for entry in packed.values()])
  return len(packed)


def unpack(sweep_dir: str) -> int:
  """Writes each packed run back as a folder (a link as a relative symlink); returns how many.
  A folder that exists already is left as it is."""
  count = 0
  for name, entry in entries(sweep_dir).items():
    workdir = os.path.join(sweep_dir, name)
    if os.path.lexists(workdir):
      continue
    if "link" in entry:
      os.symlink(entry["link"], workdir)
    else:
      os.makedirs(workdir)
      for file_name, content in entry["files"].items():
        paths.write_text(os.path.join(workdir, file_name), content)
    count += 1
  return count
