"""Every flag of `launch.py`, set to a malformed value, stops the launch at once with exit
status 2 and one line naming the flag: no traceback, nothing started, nothing written.

The cases are generated from the flag definitions (absl's registry, for the modules that
define the project's flags): an int flag gets "abc" and a value below its least one, a float
"x", an enum a value outside its choices, a bool "maybe". Flags that take free text each name
their malformed value in `TEXT_CASES`, or the reason they have none in `FREE_TEXT`; a flag
defined later in neither fails `test_every_text_flag_has_a_case_or_a_reason`, so a new flag
is covered by being defined.

Each case runs `python launch.py` as a user would (no `JAX_PLATFORMS` from the test setup):
libtpu, where installed, must not add its own lines.
"""

import os
import subprocess
import sys

import pytest
from absl import flags
from absl.flags import _argument_parser as parsers

from transformer.cli import flag_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = "--sweep=experiments/depth_post.py:cpu"
SLURM = [SWEEP, "--sweep_dir={tmp}/sweep", "--launcher=slurm"]

# Text flags: (mode, malformed value, other flags the mode needs to reach the check).
TEXT_CASES = {
    "config": ("train", "configs/no_such_config.py", []),
    "workdir": ("eval", "{tmp}/a_file", []),
    "prepare_dir": ("prepare", "{tmp}/a_file", []),
    "topology": ("compile", "v9-1", []),
    "export_dir": ("export", "{tmp}/a_file", ["--workdir={tmp}/run"]),
    "coordinator_address": ("train", "no-port-here", ["--num_processes=2", "--process_id=0"]),
    "bench_batch_sizes": ("bench", "16,x", []),
    "sweep": ("sweep", "experiments/no_such_study.py", ["--sweep_dir={tmp}/sweep"]),
    "sweep_dir": ("report", "{tmp}/no_such_sweep", []),
    "runs": ("report", "{tmp}/no_such_run", ["--report_dir={tmp}/report"]),
    "report_dir": ("report", "{tmp}/a_file", ["--runs={tmp}/run"]),
    "reuse_runs_from": ("sweep", "{tmp}/no_such_sweep", [SWEEP, "--sweep_dir={tmp}/sweep"]),
    "points": ("sweep", "seed=(", [SWEEP, "--sweep_dir={tmp}/sweep"]),
    "slurm_mem": ("sweep", "lots", SLURM),
    "slurm_time": ("sweep", "soon", SLURM),
    "slurm_partition": ("sweep", "two words", SLURM),
    "slurm_account": ("sweep", "two words", SLURM),
    "slurm_extra": ("sweep", "qos=high,not an option", SLURM),
}
# Text flags with no malformed value the flags alone can show, and where their checks are.
FREE_TEXT = {
    "prompt": "any text is a prompt (both --prompt and --source: tests/test_flag_checks.py)",
    "source": "any text is a source (both --prompt and --source: tests/test_flag_checks.py)",
    "eval_split": "checked against the data's splits, which needs the dataset built "
                  "(tests/test_run_files.py)",
    "report_metric": "checked against the metrics the runs logged, when the report is made "
                     "(tests/test_report.py)",
}
# Floats with a range beyond their type.
FLOAT_RANGE = {"temperature": "-1", "top_p": "1.5"}


def project_flags() -> list:
  from transformer.cli import launch  # noqa: F401 -- defines every flag
  by_module = flags.FLAGS.flags_by_module_dict()
  return sorted({f.name: f for module, fs in by_module.items()
                 if module.startswith("transformer.") for f in fs}.values(),
                key=lambda f: f.name)


def _mode(name: str) -> str:
  return flag_checks.READ_BY.get(name, ("train",))[0]


def cases() -> list:
  """`(id, flag, mode, value, other args)` for every flag."""
  out = []
  for f in project_flags():
    parser, mode = f.parser, _mode(f.name)
    if isinstance(parser, parsers.EnumParser):
      out.append((f.name, mode, "not_a_choice", []))
    elif isinstance(parser, parsers.BooleanParser):
      out.append((f.name, mode, "maybe", []))
    elif isinstance(parser, parsers.IntegerParser):
      out.append((f.name, mode, "abc", []))
      if f.name in flag_checks.MINIMUM:
        out.append((f.name, mode, str(flag_checks.MINIMUM[f.name] - 1), []))
    elif isinstance(parser, parsers.FloatParser):
      out.append((f.name, mode, "x", []))
      if f.name in FLOAT_RANGE:
        out.append((f.name, mode, FLOAT_RANGE[f.name], []))
    elif f.name in TEXT_CASES:
      mode, value, others = TEXT_CASES[f.name]
      out.append((f.name, mode, value, others))
  return [pytest.param(name, mode, value, others, id=f"{name}={value}")
          for name, mode, value, others in out]


def test_every_text_flag_has_a_case_or_a_reason():
  typed = (parsers.EnumParser, parsers.BooleanParser, parsers.IntegerParser,
           parsers.FloatParser)
  text = {f.name for f in project_flags() if not isinstance(f.parser, typed)}
  assert text - set(TEXT_CASES) - set(FREE_TEXT) == set(), "give each new flag a case"
  assert set(TEXT_CASES) | set(FREE_TEXT) <= text, "a case for a flag that is gone"
  assert len(project_flags()) >= 45  # the registry is read, not an empty module list


@pytest.mark.parametrize("name, mode, value, others", cases())
def test_a_malformed_flag_is_one_line_and_exit_status_2(tmp_path, name, mode, value, others):
  (tmp_path / "a_file").write_text("not a directory\n")
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "config.json").write_text("{}")
  fill = lambda s: s.replace("{tmp}", str(tmp_path))
  args = [f"--mode={mode}", *(fill(a) for a in others), f"--{name}={fill(value)}"]
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  env["TFDS_DATA_DIR"] = str(tmp_path / "tfds")
  before = sorted(os.listdir(tmp_path))
  r = subprocess.run([sys.executable, "launch.py", *args], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=120)
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert r.returncode == 2, (args, r.returncode, r.stderr[-1500:])
  assert len(lines) == 1 and "Traceback" not in r.stderr, (args, r.stderr[-1500:])
  assert lines[0].startswith("Error: ") and name in lines[0], (args, lines[0])
  assert sorted(os.listdir(tmp_path)) == before, args  # nothing written beside the inputs
