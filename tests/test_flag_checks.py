"""Every flag of every mode checked before work starts (`transformer/cli/flag_checks.py`),
in-process: the end-to-end exit status 2 is in test_command_line.py."""

import json

import pytest

from transformer.cli.flag_checks import READ_BY, check_flags
from transformer.errors import CommandLineError

# launch.py's defaults (transformer/cli/launch.py, transformer/cli/sweep_and_report.py).
DEFAULTS = dict(prompt="", source="", max_new_tokens=200, temperature=0.8, top_k=0, top_p=0.95,
                num_samples=1, sample_seed=0, beam_size=1, step=None, eval_split="",
                bench_steps=10, data_bench_batches=200, data_bench_skip_model=False,
                coordinator_address=None, num_processes=None, process_id=None,
                distributed="auto", distributed_timeout=120, heartbeat_timeout=45, sweep=None,
                sweep_dir=None, parallel=1, launcher="local", dry_run=False, report_metric="",
                reuse_runs_from=[], slurm_gpus_per_task=1, slurm_cpus_per_task=0, slurm_mem="",
                slurm_time="", slurm_partition="", slurm_account="", slurm_extra=[])


@pytest.fixture
def run_dir(tmp_path):
  """A workdir as --mode=train leaves it: config.json and checkpoints 10 and 20."""
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "config.json").write_text("{}")
  for step in (10, 20):
    (tmp_path / "run" / "checkpoints" / str(step)).mkdir(parents=True)
  return str(tmp_path / "run")


@pytest.fixture
def sweep_file(tmp_path):
  path = tmp_path / "s.py"
  path.write_text("def get_sweep():\n  return [{'seed': 0}]\n")
  return str(path)


def _check(mode, workdir="runs/x", **given):
  check_flags(mode, {**DEFAULTS, **given}, set(given) | ({"workdir"} if workdir != "runs/x"
                                                          else set()), workdir)


def _refused(mode, *phrases, workdir="runs/x", **given):
  with pytest.raises(CommandLineError) as e:
    _check(mode, workdir, **given)
  for phrase in phrases:
    assert phrase in str(e.value), str(e.value)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("flag, value, phrase", [
    ("max_new_tokens", 0, "--max_new_tokens=0: must be at least 1"),
    ("num_samples", 0, "--num_samples=0: must be at least 1"),
    ("beam_size", 0, "--beam_size=0: must be at least 1"),
    ("top_k", -1, "--top_k=-1: must be at least 0"),
    ("temperature", -0.5, "--temperature=-0.5: must be >= 0"),
    ("temperature", float("nan"), "--temperature=nan"),
    ("top_p", 0.0, "--top_p=0.0: must be in (0, 1]"),
    ("top_p", 1.5, "--top_p=1.5: must be in (0, 1]"),
    ("step", -1, "--step=-1: must be at least 0"),
], ids=lambda v: str(v))
def test_a_sample_setting_out_of_range_is_refused(run_dir, flag, value, phrase):
  _refused("sample", phrase, workdir=run_dir, prompt="x", **{flag: value})


@pytest.mark.parametrize("mode, flag, value", [
    ("bench", "bench_steps", 0), ("data_bench", "bench_steps", -3),
    ("data_bench", "data_bench_batches", 0), ("train", "distributed_timeout", 0),
    ("train", "heartbeat_timeout", 0), ("sweep", "parallel", 0),
    ("sweep", "slurm_gpus_per_task", -1), ("sweep", "slurm_cpus_per_task", -1),
])
def test_a_count_below_its_least_value_is_refused(tmp_path, sweep_file, mode, flag, value):
  extra = {"sweep": sweep_file} if mode == "sweep" else {}
  workdir = str(tmp_path / "w") if mode in READ_BY["workdir"] else "runs/x"
  _refused(mode, f"--{flag}={value}: must be at least", workdir=workdir, **extra,
           **{flag: value})


def test_a_flag_the_mode_does_not_read_is_refused(tmp_path, run_dir):
  _refused("train", "--prompt is not read by --mode=train (only by sample)", prompt="x")
  _refused("train", "--step is not read by --mode=train", "resumes from its latest", step=10)
  _refused("sample", "--eval_split is not read by --mode=sample (only by eval)",
           workdir=run_dir, prompt="x", eval_split="test")
  _refused("eval", "--sweep_dir is not read by --mode=eval", workdir=run_dir, sweep_dir="d")
  _refused("bench", "--data_bench_batches is not read by --mode=bench", data_bench_batches=5)
  _refused("report", "--coordinator_address is not read by --mode=report",
           coordinator_address="h:1")
  _refused("sweep", "--workdir is not read by --mode=sweep", "<--sweep_dir>/<point name>",
           workdir=str(tmp_path))


def test_sample_needs_exactly_one_text(run_dir):
  _refused("sample", "needs the text to start from: --prompt=TEXT", workdir=run_dir)
  _refused("sample", "--prompt and --source were both given", workdir=run_dir, prompt="a",
           source="b")
  _check("sample", run_dir, source="b")
  _check("sample", run_dir, prompt=" ")


def test_a_workdir_of_the_wrong_kind_is_refused(tmp_path, run_dir):
  a_file = tmp_path / "f"
  a_file.write_text("x")
  for mode in ("train", "bench", "diagnose"):
    _refused(mode, f"--workdir={a_file} is a file, not a directory", "created if missing",
             workdir=str(a_file))
    _check(mode, str(tmp_path / "new"))  # created later
  for mode, given in (("eval", {}), ("sample", {"prompt": "x"})):
    _refused(mode, "is a file, not a directory", workdir=str(a_file), **given)
    _refused(mode, f"--workdir={tmp_path / 'none'} does not exist", f"--mode={mode} reads a",
             workdir=str(tmp_path / "none"), **given)
    _refused(mode, "holds no config.json", workdir=str(tmp_path), **given)
    _check(mode, run_dir, **given)
  with pytest.raises(CommandLineError, match=r"--workdir \(default runs/nope\) does not exist"):
    check_flags("eval", DEFAULTS, set(), "runs/nope")


def test_a_step_without_a_checkpoint_is_refused_with_the_steps_there(run_dir):
  _refused("eval", "--step=15:", "has steps 10, 20", "Leave --step out for the latest",
           workdir=run_dir, step=15)
  _refused("sample", "--step=30:", workdir=run_dir, prompt="x", step=30)
  _check("eval", run_dir, step=20)
  _check("sample", run_dir, prompt="x", step=10)


def test_the_multihost_flags_go_together_and_fit(tmp_path):
  w = str(tmp_path / "w")
  _refused("train", "go together", workdir=w, num_processes=2)
  _refused("train", "--distributed=off runs one process", workdir=w, distributed="off",
           coordinator_address="h:1234", num_processes=2, process_id=0)
  _refused("train", "--process_id=2 must be in [0, --num_processes=2)", workdir=w,
           coordinator_address="h:1234", num_processes=2, process_id=2)
  _refused("train", "--process_id=-1: must be at least 0", workdir=w,
           coordinator_address="h:1234", num_processes=2, process_id=-1)
  for address in ("h", "h:port", ":1234", "h:70000"):
    _refused("train", f"--coordinator_address={address}: expected HOST:PORT", workdir=w,
             coordinator_address=address, num_processes=2, process_id=0)
  _check("train", w, coordinator_address="[::1]:1234", num_processes=2, process_id=1)


def test_sweep_paths_must_be_of_the_right_kind(tmp_path, sweep_file):
  a_file = tmp_path / "f"
  a_file.write_text("x")
  _refused("sweep", "--mode=sweep needs --sweep=FILE")
  _refused("sweep", f"--sweep={tmp_path}: {tmp_path} is a directory", sweep=str(tmp_path))
  _refused("sweep", "none.py does not exist", sweep=str(tmp_path / "none.py:cpu"))
  _refused("sweep", f"--sweep_dir={a_file} is a file, not a directory", sweep=sweep_file,
           sweep_dir=str(a_file))
  _refused("sweep", "--reuse_runs_from=", "does not exist", sweep=sweep_file,
           reuse_runs_from=[str(tmp_path / "old")])
  _refused("sweep", "holds no sweep.json", sweep=sweep_file, reuse_runs_from=[str(tmp_path)])
  _check("sweep", sweep=sweep_file, sweep_dir=str(tmp_path / "new"))


def test_report_needs_a_sweep_dir(tmp_path):
  a_file = tmp_path / "f"
  a_file.write_text("x")
  _refused("report", "--mode=report needs --sweep_dir=DIR")
  _refused("report", "is a file, not a directory", sweep_dir=str(a_file))
  _refused("report", "does not exist", sweep_dir=str(tmp_path / "none"))
  _refused("report", "holds no sweep.json", sweep_dir=str(tmp_path))
  (tmp_path / "sweep.json").write_text(json.dumps({"points": []}))
  _check("report", sweep_dir=str(tmp_path))


@pytest.mark.parametrize("flag, value, phrase", [
    ("slurm_time", "4h", "expected MINUTES, HH:MM:SS or D-HH:MM:SS"),
    ("slurm_time", "04:00:00 extra", "expected MINUTES"),
    ("slurm_mem", "32 GB", "expected a size such as 32G"),
    ("slurm_extra", ["qos high"], "'qos high' is not an sbatch option"),
    ("slurm_extra", ["qos=high\n#SBATCH --x"], "is not an sbatch option"),
    ("slurm_partition", "gpu a100", "a SLURM name has no spaces"),
])
def test_a_slurm_option_sbatch_would_refuse_is_refused(sweep_file, flag, value, phrase):
  _refused("sweep", phrase, sweep=sweep_file, launcher="slurm", **{flag: value})


def test_good_slurm_options_pass(sweep_file):
  for time in ("60", "04:00:00", "1-12", "2-00:30:00"):
    _check("sweep", sweep=sweep_file, slurm_time=time, slurm_mem="32G",
           slurm_extra=["qos=high", "--exclusive"])


@pytest.mark.parametrize("sizes, phrase", [
    (["16", "0"], "'0' is not a positive int"), (["16", "x"], "'x' is not a positive int"),
    (["16", "16"], "a batch size is repeated"),
])
def test_bench_batch_sizes_must_be_distinct_positive_ints(tmp_path, sizes, phrase):
  _refused("bench", phrase, workdir=str(tmp_path / "w"), bench_batch_sizes=sizes)


def test_bench_batch_sizes_are_read_by_bench_only(tmp_path):
  check_flags("bench", {**DEFAULTS, "bench_batch_sizes": ["16", "32"]}, ["bench_batch_sizes"],
              str(tmp_path / "w"))
  _refused("train", "bench_batch_sizes", workdir=str(tmp_path / "w"),
           bench_batch_sizes=["16"])


# --- issue 31: numbers that pass str.isdigit() but not int(); a time limit inside the lead ---

@pytest.mark.parametrize("sizes", [["²"], ["16", "٣"], ["１６"]])
def test_batch_sizes_refuse_digits_int_cannot_read(sizes):
  from transformer.cli.flag_checks import check_batch_sizes
  with pytest.raises(CommandLineError, match="is not a positive int"):
    check_batch_sizes(sizes)


@pytest.mark.parametrize("flag,value", [("slurm_time", "٣٠"), ("slurm_mem", "٣G")])
def test_slurm_numbers_are_ascii_digits(flag, value):
  from transformer.cli.flag_checks import check_slurm
  with pytest.raises(CommandLineError, match=f"--{flag}="):
    check_slurm({flag: value})


@pytest.mark.parametrize("time,seconds", [("30", 1800), ("2:30", 150), ("01:00:00", 3600),
                                          ("1-0", 86400), ("1-2:3", 93780),
                                          ("0-00:02:01", 121)])
def test_slurm_seconds_reads_every_sbatch_form(time, seconds):
  from transformer.cli.flag_checks import slurm_seconds
  assert slurm_seconds(time) == seconds


@pytest.mark.parametrize("time", ["1", "2", "00:02:00", "0-0:1"])
def test_slurm_time_must_outlast_the_save_lead(time):
  from transformer.cli.flag_checks import check_slurm
  from transformer.sweep.slurm import SlurmResources
  with pytest.raises(CommandLineError, match=f"USR1@{SlurmResources.signal_lead_s}"):
    check_slurm({"slurm_time": time})
  check_slurm({"slurm_time": "00:02:01"})  # one second past the lead is a valid limit


def test_prepare_refuses_a_folder_holding_a_token_file_without_overwrite(tmp_path):
  """--mode=prepare into another source's token file replaced it without a word (issue 31)."""
  (tmp_path / "meta.json").write_text("{}")
  with pytest.raises(CommandLineError, match="already holds a token file.*--overwrite"):
    check_flags("prepare", dict(DEFAULTS, prepare_dir=str(tmp_path)), {"prepare_dir"}, "w")
  check_flags("prepare", dict(DEFAULTS, prepare_dir=str(tmp_path), overwrite=True),
              {"prepare_dir", "overwrite"}, "w")
  check_flags("prepare", dict(DEFAULTS, prepare_dir=str(tmp_path / "new")), {"prepare_dir"}, "w")
  with pytest.raises(CommandLineError, match="--overwrite"):
    check_flags("train", dict(DEFAULTS, overwrite=True), {"overwrite"}, "w")
