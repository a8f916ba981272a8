"""Where a profiled step's device time goes: a `jax.profiler` trace (`*.trace.json.gz`, the
Chrome trace format) summed per kernel and per kind of kernel, per step. Read by
`accelerator_worker.py` for the bench row it profiles; pure (no JAX), so tests feed it traces.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os

# Kernel kinds by a part of the kernel's name (lower case), first match wins.
KINDS = (("matmul", ("gemm", "cublas", "cutlass", "xmma", "nvjet", "matmul", "dot")),
         ("attention", ("cudnn", "flash", "fmha", "sdpa")),
         ("collective", ("nccl", "all-reduce", "all-gather", "reduce-scatter")),
         ("copy", ("memcpy", "memset", "copy")))
TOP = 12


def kind_of(name: str) -> str:
  low = name.lower()
  return next((kind for kind, parts in KINDS if any(p in low for p in parts)), "other")


def summarize(trace: dict, steps: int, top: int = TOP) -> dict:
  """Device time per step (ms) in all, per kind and for the `top` kernels, from the complete
  events ("ph": "X", "dur" in microseconds) of processes named `/device:...`. Without such a
  process (a CPU backend, whose ops run on host threads), `{"device_timeline": False}`."""
  names = {e["pid"]: e.get("args", {}).get("name", "") for e in trace.get("traceEvents", [])
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  device = {pid for pid, name in names.items() if "/device:" in name}
  if not device:
    return {"device_timeline": False, "processes": sorted(set(names.values()))}
  per_name, per_kind = collections.Counter(), collections.Counter()
  for e in trace["traceEvents"]:
    if e.get("ph") == "X" and e.get("pid") in device:
      per_name[e["name"]] += float(e.get("dur", 0.0))
      per_kind[kind_of(e["name"])] += float(e.get("dur", 0.0))
  busy = sum(per_name.values())
  ms = lambda us: round(us / 1e3 / steps, 3)
  return {"device_timeline": True, "steps": steps, "busy_ms_per_step": ms(busy),
          "by_kind_ms_per_step": {k: ms(v) for k, v in per_kind.most_common()},
          "top": [[name, ms(us), round(us / busy, 4) if busy else 0.0]
                  for name, us in per_name.most_common(top)]}


def read_profile(workdir: str, steps: int) -> dict:
  """The summary of the newest trace under `<workdir>/profile`, or why there is none."""
  files = sorted(glob.glob(os.path.join(workdir, "profile", "**", "*.trace.json.gz"),
                           recursive=True))
  if not files:
    return {"error": "the profiler wrote no *.trace.json.gz"}
  try:
    with gzip.open(files[-1], "rt", encoding="utf-8") as f:
      return summarize(json.load(f), steps)
  except (OSError, ValueError, KeyError, TypeError) as e:
    return {"error": f"unreadable trace {os.path.basename(files[-1])}: {type(e).__name__}: {e}"}
