"""Provenance: which code, libraries, machine, command and data produced a run, sweep or report.

`collect(argv)` is the light record, safe where JAX must not be imported (the sweep runner,
the report): the git commit of the checkout and whether its tracked files differ from it,
the versions of Python and the libraries (read from the installed packages' metadata, so
nothing heavy is imported), the host, the command line (the checkout's folder taken out:
`portable_argv`) and the time; with `data=` (a data
config as a dict) also `data_identity(data)`; with `devices=True` (only in a process that
uses JAX anyway: a run) `device_info()`.

`data_identity` says which bytes a data config reads: for the default corpus (this Python's
standard library) or another local folder, a SHA-1 of the files' contents; for a token file,
its sidecar's digest and the sizes of its `.bin` files; for a TFDS dataset, the digests of the
`dataset_info.json` of its prepared versions. Its `digest` is what two runs compare. It does
not see a `local_text` dataset that TFDS prepared earlier from other files (TFDS builds it once
per data dir and Python minor version): the identity is that of the source as it is now.

A run keeps its records in its workdir (`record_start`): `provenance.jsonl` gets one line per
start or resumption (with the checkpoint step it resumed from), and `config.json` carries the first
start's record under the key `provenance`, which the resume check
(`transformer.workdir.check_workdir_config`) ignores: a run resumed on another commit resumes,
and the report shows (and warns about) the commits it saw.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
import socket
import subprocess
from importlib import metadata
from typing import Any, Iterable, Mapping, Optional, Sequence

from transformer import REPO_ROOT, datasets, packed_runs, paths
from transformer.data.local_files import list_source_files, stdlib_dir
from transformer.data.run_tokenizer import PROVENANCE_KEY, RECORD_KEY

KEY = PROVENANCE_KEY  # config.json's key for the first start's record ("provenance")
FILE = "provenance.jsonl"  # in a workdir: one record per start of the run
GIT_TIMEOUT_S = 10
# Distributions whose versions are recorded when installed (importlib.metadata; no import).
PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "libtpu", "flax",
            "optax", "orbax-checkpoint", "numpy", "ml-collections", "tensorflow",
            "tensorflow-cpu", "tensorflow-datasets", "tensorboard", "sentencepiece")
# Folders larger than this are fingerprinted by file sizes, not contents.
CONTENT_HASH_LIMIT = 512 << 20
# Environment variables naming a cluster job, recorded when set.
JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")


def collect(argv: Sequence[str], *, root: str = REPO_ROOT, data: Optional[Mapping] = None,
            devices: bool = False) -> dict[str, Any]:
  """The provenance record of this process: see the module docstring. `root` is the checkout
  whose commit is recorded (default: the one this package is installed from)."""
  now = datetime.datetime.now(datetime.timezone.utc)
  record = {"time": now.isoformat(timespec="seconds"), "host": socket.gethostname(),
            "command": shlex.join(portable_argv(argv, root)), "git": git_state(root),
            "python": platform.python_version(), "versions": versions()}
  jobs = {k: os.environ[k] for k in JOB_VARIABLES if os.environ.get(k)}
  if jobs:
    record["job"] = jobs
  if data is not None:
    record["data"] = data_identity(data)
  if devices:
    record["devices"] = device_info()
  return record


def portable_argv(argv: Sequence[str], root: str = REPO_ROOT) -> list[str]:
  """`argv` with the checkout's own folder taken out of every argument (`<root>/launch.py` as
  `launch.py`, `--config=<root>/configs/default.py` as `--config=configs/default.py`, a workdir
  under the checkout relative to it): the command as run from the checkout's root, naming no
  machine's folder where it need not. A path outside the checkout stays as it was given."""
  prefix = os.path.join(os.path.abspath(root), "")
  return [arg.replace(prefix, "") for arg in argv]


# --- code ---------------------------------------------------------------------------------------

def _git(root: str, *args: str) -> Optional[str]:
  """`git -C root args` stdout, stripped; None when git is missing, fails or times out."""
  try:
    done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_S, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: str = REPO_ROOT) -> dict[str, Any]:
  """`{"commit": sha or None, "dirty": bool or None}` of the git checkout holding `root`.

  `dirty` is whether tracked files differ from the commit (untracked files, such as run
  directories, do not count). Both are None outside a git checkout, where git is missing, and
  where `root` holds no tracked file (a package installed into a virtualenv that happens to
  lie inside some other repository)."""
  unknown = {"commit": None, "dirty": None}
  commit = _git(root, "rev-parse", "--verify", "HEAD")
  if not commit or not _git(root, "ls-files", "--", "."):
    return unknown
  status = _git(root, "status", "--porcelain", "--untracked-files=no")
  return {"commit": commit, "dirty": None if status is None else bool(status)}


# --- libraries and devices ----------------------------------------------------------------------

def versions(packages: Iterable[str] = PACKAGES) -> dict[str, str]:
  """`{distribution: version}` of the installed ones among `packages` (nothing imported)."""
  out = {}
  for name in packages:
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  return out


def device_info() -> dict[str, Any]:
  """The backend, device kind and counts. Imports JAX and initialises its backends: call it
  only in a process that runs JAX anyway (never in the sweep runner)."""
  import jax  # see the docstring
  return {"platform": jax.default_backend(), "kind": jax.devices()[0].device_kind,
          "count": jax.device_count(), "local_count": jax.local_device_count(),
          "processes": jax.process_count()}


# --- data ---------------------------------------------------------------------------------------

def _sha1(payload: Any) -> str:
  return hashlib.sha1(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def folder_fingerprint(folder: str, suffixes: tuple[str, ...]) -> dict[str, Any]:
  """Files, bytes and a SHA-1 of the `suffixes` files under `folder` as the local corpus
  builders list them: of their paths and contents, or (`"method": "sizes"`, past
  `CONTENT_HASH_LIMIT` bytes in all) of their paths and sizes."""
  if not os.path.isdir(folder):
    return {"error": f"{folder} is not a folder"}
  files = list_source_files(folder, suffixes)
  sizes = [os.path.getsize(os.path.join(folder, f)) for f in files]
  h = hashlib.sha1()
  method = "contents" if sum(sizes) <= CONTENT_HASH_LIMIT else "sizes"
  for f, size in zip(files, sizes):
    h.update(f"{f.replace(os.sep, '/')}\0{size}\0".encode())
    if method == "contents":
      with open(os.path.join(folder, f), "rb") as fh:
        h.update(fh.read())
  return {"files": len(files), "bytes": sum(sizes), "method": method, "sha1": h.hexdigest()}


def _local_source(data: Mapping) -> dict[str, Any]:
  suffixes = (".py",)
  if data.get("name") == "local_text":
    suffixes = tuple(s.strip() for s in str(data.get("suffixes", ".py")).split(",") if s.strip())
  source_dir = data.get("source_dir") or ""
  where = ({"folder": "python-stdlib", "python": platform.python_version()} if not source_dir
           else {"folder": os.path.abspath(os.path.expanduser(source_dir))})
  return {**where, **folder_fingerprint(os.path.expanduser(source_dir) or stdlib_dir(), suffixes)}


def _token_file_source(data: Mapping) -> dict[str, Any]:
  folder = os.path.abspath(os.path.expanduser(data.get("source_dir") or ""))
  meta = os.path.join(folder, "meta.json")
  if not os.path.isfile(meta):
    return {"folder": folder, "error": "no meta.json"}
  with open(meta, "rb") as f:
    meta_sha1 = hashlib.sha1(f.read()).hexdigest()
  bins = {n: os.path.getsize(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
          if n.endswith(".bin")}
  return {"folder": folder, "meta_sha1": meta_sha1, "bin_bytes": bins}


def tfds_root(data: Mapping) -> str:
  """Where TFDS keeps prepared datasets for this data config (TFDS's own default rule)."""
  return os.path.expanduser(data.get("data_dir") or os.environ.get("TFDS_DATA_DIR")
                            or "~/tensorflow_datasets")


def _tfds_source(data: Mapping) -> dict[str, Any]:
  """The prepared versions of TFDS dataset `name` (`name[/config][:version]`): for each
  `<name>/[config/]<version>/dataset_info.json`, its SHA-1 (it records the splits' shards,
  example counts and bytes)."""
  name, _, version = str(data.get("name", "")).partition(":")
  base = os.path.join(tfds_root(data), *name.split("/"))
  prepared = {}
  if os.path.isdir(base):
    for dirpath, dirs, files in os.walk(base):
      dirs.sort()
      rel = os.path.relpath(dirpath, base)
      if rel != "." and rel.count(os.sep) >= 1:  # <config>/<version>: no deeper
        dirs[:] = []
      if "dataset_info.json" in files and (not version or os.path.basename(dirpath) == version):
        with open(os.path.join(dirpath, "dataset_info.json"), "rb") as f:
          prepared[rel.replace(os.sep, "/")] = hashlib.sha1(f.read()).hexdigest()
  return {"tfds_dir": base, "prepared": prepared}


# `Dataset.identity` (transformer/datasets.py) -> the fingerprint of the bytes it reads
_IDENTITY = {"local_files": _local_source, "token_file": _token_file_source, "tfds": _tfds_source}

# Where the data lies and which Python lists it: recorded, but not part of the digest (the same
# bytes elsewhere are the same data).
_LOCATION = ("folder", "tfds_dir", "python")


def data_identity(data: Mapping) -> dict[str, Any]:
  """Which bytes the data config `data` (`DataConfig` as a dict) reads: `{"name", "source":
  {...}, "digest"}`; `digest` (16 hex digits) covers the name and the source's fingerprint,
  not its location.
  Never raises on a missing source: the `source` then says what is missing."""
  name = str(data.get("name", ""))
  dataset = datasets.lookup(name)
  fingerprint = _IDENTITY[dataset.identity if dataset else "tfds"]
  try:
    source = fingerprint(data)
  except OSError as e:
    source = {"error": f"{type(e).__name__}: {e}"}
  content = {k: v for k, v in source.items() if k not in _LOCATION}
  return {"name": name, "source": source, "digest": _sha1([name, content])}


def describe_data(identity: Mapping) -> str:
  """One line for a data identity: its name, Python version, files and digest."""
  source = identity.get("source") or {}
  parts = [str(identity.get("name"))]
  if source.get("folder"):
    parts.append(f"{source['folder']}" + (f" {source['python']}" if source.get("python") else ""))
  if "files" in source:
    parts.append(f"{source['files']} files, {source['bytes']:,} bytes")
  if source.get("prepared"):
    parts.append("prepared " + ", ".join(sorted(source["prepared"])))
  if source.get("error"):
    parts.append(source["error"])
  return f"{' | '.join(parts)} (digest {identity.get('digest')})"


def recorded_data(record: Mapping) -> Optional[Mapping]:
  """The data identity a provenance record holds (`data_identity`); None without one."""
  data = record.get("data")
  return data if isinstance(data, Mapping) and data.get("digest") else None


# --- a run's workdir ----------------------------------------------------------------------------

def read_records(workdir: str) -> list[dict]:
  """The run's provenance records, oldest first: the lines of `provenance.jsonl`, else the
  record in config.json; [] for a run from before provenance (or an unreadable file)."""
  records = []
  try:
    with paths.open_file(paths.join(workdir, FILE), "rb") as f:
      lines = f.read().split(b"\n")
  except OSError:
    packed = packed_runs.text(workdir, FILE)  # a run of a packed study
    lines = [] if packed is None else packed.encode("utf-8").split(b"\n")
  for line in lines:
    try:
      row = json.loads(line.decode("utf-8"))
    except ValueError:  # a line cut short by a kill, or bytes that are not UTF-8 text
      continue
    if isinstance(row, dict):
      records.append(row)
  if records:
    return records
  try:
    saved = json.loads(paths.read_text(paths.join(workdir, "config.json")))
  except (OSError, ValueError):
    return []
  first = saved.get(KEY) if isinstance(saved, dict) else None
  return [first] if isinstance(first, dict) else []


def record_start(workdir: str, data: Mapping, argv: Sequence[str],
                 resumed_from: Optional[int], tokenizer: Optional[Mapping] = None) -> dict:
  """Records this start of the run in `workdir` and returns the record config.json keeps.

  A fresh start (`resumed_from` None: the workdir holds no checkpoint) begins the run:
  `provenance.jsonl` is written anew with this record, which config.json keeps. A resumption
  from checkpoint step `resumed_from` appends its record, and config.json keeps the first
  record the workdir has (this one for a run from before provenance). `tokenizer` (the file
  and sha256 of the tokenizer file the run reads, `run_tokenizer.tokenizer_record`) goes in
  under `"tokenizer"`. Call it before config.json is rewritten."""
  record = {**collect(argv, data=data, devices=True), "resumed_from": resumed_from}
  if tokenizer is not None:
    record[RECORD_KEY] = dict(tokenizer)
  earlier = read_records(workdir) if resumed_from is not None else []
  line = json.dumps(record, sort_keys=True) + "\n"
  if resumed_from is None:
    paths.write_text(paths.join(workdir, FILE), line)
  else:
    paths.append_text(paths.join(workdir, FILE), line)
  return earlier[0] if earlier else record


def config_json(config: Mapping, first: Mapping) -> str:
  """config.json's text: the config (`ExperimentConfig.to_dict()`) with the run's first
  provenance record under `KEY`, formatted as `ExperimentConfig.to_json` formats it."""
  return json.dumps({**config, KEY: first}, indent=2, sort_keys=True)
