"""wandb as a second metric sink (transformer/train/wandb_writer.py), offline only: no network.

The records are read back from wandb's offline run files (tests/wandb_records.py).
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from transformer.config import ConfigError
from transformer.train import wandb_writer
from transformer.train.writers import MetricWriter
from tests.wandb_records import history_rows, history_steps, run_of, settled_history_steps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_group_is_the_config_without_its_seed():
  a = {"seed": 0, "model": {"d_model": 8}, "train": {"num_steps": 5, "wandb_group": ""}}
  b = {**a, "seed": 1, "train": {"num_steps": 5, "wandb_group": "", "wandb_tags": "x"}}
  c = {**a, "model": {"d_model": 16}}
  assert wandb_writer.group_of(a) == wandb_writer.group_of(b) != wandb_writer.group_of(c)


def test_run_id_is_kept_in_the_workdir(tmp_path):
  warnings = []
  first = wandb_writer.run_id(str(tmp_path), warnings.append)
  assert first == wandb_writer.run_id(str(tmp_path), warnings.append) and first.isalnum()
  assert warnings == []  # a first start and a resume say nothing


@pytest.mark.parametrize("saved", ["run-2024-07-a", "lr_3e-4.seed 1", "r\u00e9sum\u00e9"])
def test_any_id_wandb_takes_is_kept(tmp_path, saved):
  """Ids of another tool or an earlier run (wandb's rule: not empty, no surrounding space, none
  of `:;,#?/'`) continue that wandb run."""
  (tmp_path / wandb_writer.RUN_ID_FILE).write_text(saved + "\n")
  warnings = []
  assert wandb_writer.run_id(str(tmp_path), warnings.append) == saved and warnings == []
  assert (tmp_path / wandb_writer.RUN_ID_FILE).read_text() == saved + "\n"


@pytest.mark.parametrize("content, said", [
    (b"team/run:7", "wandb refuses as a run id (Run ID cannot contain the characters"),
    (b"\xff torn", "is unreadable"), (b"two\nlines", "not one line of printable text"),
    (b"  \n", "wandb refuses as a run id (Run ID cannot be empty)")])
def test_an_id_wandb_refuses_is_replaced_in_one_line(tmp_path, content, said):
  (tmp_path / wandb_writer.RUN_ID_FILE).write_bytes(content)
  warnings = []
  new = wandb_writer.run_id(str(tmp_path), warnings.append)
  assert new.isalnum() and (tmp_path / wandb_writer.RUN_ID_FILE).read_text() == new + "\n"
  assert len(warnings) == 1 and "\n" not in warnings[0], warnings
  assert said in warnings[0] and f"new wandb run, id {new}" in warnings[0]
  assert wandb_writer.RUN_ID_FILE in warnings[0]


def test_a_sink_resumes_a_hyphenated_id_without_wandb_warnings(tmp_path, monkeypatch, capfd):
  """The wandb run (offline) gets the stored id, and wandb says nothing about deprecated
  arguments (a boolean `reinit` is deprecated in wandb 0.31)."""
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.delenv("WANDB_SILENT", raising=False)
  (tmp_path / wandb_writer.RUN_ID_FILE).write_text("run-2024-07-a\n")
  config = {"seed": 0, "train": {"wandb_project": "t47", "wandb_entity": "", "wandb_group": "",
                                 "wandb_tags": ""}}
  sink = wandb_writer.WandbSink(str(tmp_path), config, None)
  try:
    assert sink.run.id == "run-2024-07-a"
    sink.log(5, "train", {"loss": 2.0})
  finally:
    sink.close()
  out = "".join(capfd.readouterr())
  assert "reinit" not in out and "deprecated" not in out.lower(), out
  files = glob.glob(str(tmp_path / "wandb/offline-run-*/run-run-2024-07-a.wandb"))
  assert len(files) == 1 and settled_history_steps(files[0], "train/loss") == [5]


def test_missing_wandb_is_one_line_naming_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
  with pytest.raises(ConfigError,
                     match=r"needs the wandb package: pip install 'transformer\[wandb\]'"):
    wandb_writer.check_available("proj")
  wandb_writer.check_available("")  # off: wandb is not needed


class Recorder:
  def __init__(self):
    self.rows, self.closed = [], False

  def log(self, step, split, metrics):
    self.rows.append((step, split, dict(metrics)))

  def close(self):
    self.closed = True


def test_metric_writer_fans_out_the_same_rows(tmp_path):
  sink = Recorder()
  writer = MetricWriter(str(tmp_path), sinks=[sink])
  writer.write(5, "train", {"loss": 2.5})
  writer.write(10, "eval", {"loss": 2.0, "bleu_signature": "x"})
  writer.close()
  rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [(r["step"], r["split"]) for r in rows] == [(s, p) for s, p, _ in sink.rows]
  assert sink.rows[0][2] == {"loss": 2.5} and sink.closed


class HoldingRecorder(Recorder):
  """A sink that says it holds the rows up to `last_step`, as wandb's does after a restart."""

  def __init__(self, last_step):
    super().__init__()
    self.last_step = last_step


def test_a_resume_replays_the_rows_a_sink_lost_and_no_others(tmp_path):
  """A kill -9 just after checkpoint 20: metrics.jsonl has train 5-25, eval 10 and 20 (a torn
  row at the end); wandb wrote through step 10. The resumed writer sends wandb train 15, 20 and
  eval 20 (in metrics.jsonl's order, without its `time`), drops the rows after 20 as before,
  and a sink without `last_step` gets nothing again."""
  rows = [(5, "train"), (10, "train"), (10, "eval"), (15, "train"), (20, "train"),
          (20, "eval"), (25, "train")]
  text = "".join(json.dumps({"step": st, "split": sp, "time": 1.5, "loss": st / 10,
                             **({"bleu_signature": "x"} if sp == "eval" else {})}) + "\n"
                 for st, sp in rows)
  (tmp_path / "metrics.jsonl").write_text(text + '{"step": 30, "spl')
  wandb_like, plain = HoldingRecorder(last_step=10), Recorder()
  writer = MetricWriter(str(tmp_path), sinks=[wandb_like, plain])
  writer.start_at(20)
  assert wandb_like.rows == [(15, "train", {"loss": 1.5}), (20, "train", {"loss": 2.0}),
                             (20, "eval", {"loss": 2.0, "bleu_signature": "x"})]
  assert plain.rows == []
  kept = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [(r["step"], r["split"]) for r in kept] == rows[:-1]
  writer.start_at(20)  # a sink holding everything gets nothing
  fresh = HoldingRecorder(last_step=20)
  MetricWriter(str(tmp_path), sinks=[fresh]).start_at(20)
  assert fresh.rows == []


def _offline_sink(workdir, monkeypatch):
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  config = {"seed": 0, "train": {"wandb_project": "t71", "wandb_entity": "", "wandb_group": "",
                                 "wandb_tags": ""}}
  return wandb_writer.WandbSink(str(workdir), config, None)


def test_an_offline_sink_knows_the_last_step_an_earlier_process_wrote(tmp_path, monkeypatch):
  """The earlier process's offline file says how far wandb got (its own file, being written,
  does not count); a file cut short by a kill reads up to its last whole record."""
  sink = _offline_sink(tmp_path, monkeypatch)
  assert sink.last_step == -1  # a first start: nothing held
  for step in (5, 10, 15):
    sink.log(step, "train", {"loss": 1.0})
  sink.close()
  (first,) = glob.glob(str(tmp_path / "wandb/offline-run-*/run-*.wandb"))
  assert settled_history_steps(first, "train/loss")[-1:] == [15]
  time.sleep(1.1)  # wandb names its offline folders by the second
  again = _offline_sink(tmp_path, monkeypatch)
  try:
    assert again.last_step == 15
    again.log(15, "train", {"loss": 9.0})  # held already: not sent again
    again.log(20, "train", {"loss": 2.0})
  finally:
    again.close()
  second = next(f for f in glob.glob(str(tmp_path / "wandb/offline-run-*/run-*.wandb"))
                if f != first)
  assert settled_history_steps(second, "train/loss") == [20]
  data = open(first, "rb").read()
  torn = tmp_path / "torn.wandb"
  for cut in range(8, len(data), max(1, len(data) // 40)):  # a kill at any byte
    torn.write_bytes(data[:cut])
    assert set(history_steps(str(torn), "train/loss")) <= {5, 10, 15}


def _train(workdir, steps):
  env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
  return subprocess.Popen(
      [sys.executable, "launch.py", "--config=configs/default.py:smoke", f"--workdir={workdir}",
       f"--config.train.num_steps={steps}", "--config.train.eval_every=1000",
       "--config.train.samples_at_eval=False", "--config.checkpoint.async_save=False",
       "--config.train.wandb_project=t32", "--config.train.wandb_tags=a,b"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True)


@pytest.mark.slow
def test_a_run_killed_and_resumed_logs_into_one_wandb_run(tmp_path):
  workdir = tmp_path / "w"
  metrics = workdir / "metrics.jsonl"
  proc = _train(workdir, 300)
  deadline = time.monotonic() + 240
  while time.monotonic() < deadline and proc.poll() is None:
    rows = metrics.read_text().splitlines() if metrics.exists() else []
    if any(json.loads(r)["step"] >= 25 for r in rows) and (workdir / "checkpoints/20").exists():
      break
    time.sleep(0.2)
  time.sleep(3 * wandb_writer.FLUSH_SECONDS)  # the service writes its rows this often
  assert proc.poll() is None, "the run ended before it could be killed"
  os.killpg(proc.pid, signal.SIGKILL)  # the whole job, as a node loss would
  proc.wait()
  run_id = (workdir / "wandb_run_id").read_text().strip()
  killed_at = max(json.loads(r)["step"] for r in metrics.read_text().splitlines())

  proc = _train(workdir, 300)
  _, err = proc.communicate(timeout=280)
  assert proc.returncode == 0, err[-2000:]
  assert (workdir / "wandb_run_id").read_text().strip() == run_id
  files = sorted(glob.glob(str(workdir / "wandb/offline-run-*/run-*.wandb")))
  assert len(files) == 2 and all(f.endswith(f"run-{run_id}.wandb") for f in files), files
  before, after = (history_steps(f, "train/loss") for f in files)
  resumed = json.loads((workdir / "provenance.jsonl").read_text().splitlines()[-1])
  resumed = resumed["resumed_from"]
  assert resumed >= 20
  # The killed process: its rows from the start, up to what wandb had written when killed
  # (rows logged more than FLUSH_SECONDS before the kill, less the last step's, still open),
  # which covers every step up to the checkpoint the run resumed from.
  assert before == list(range(5, 5 * len(before) + 1, 5)) and len(before) * 5 <= killed_at
  assert len(before) * 5 >= resumed, (before, resumed)
  # The resumed process, in the same wandb run: every row after its checkpoint, but those the
  # killed process's wandb file holds already (each step once).
  assert before + after == list(range(5, 301, 5))
  # metrics.jsonl: each step once, the killed process's rows after the checkpoint dropped.
  rows = [json.loads(r) for r in metrics.read_text().splitlines()]
  keys = [(r["split"], r["step"]) for r in rows]
  assert len(keys) == len(set(keys)) and max(k[1] for k in keys) == 300
  for f in files:
    run = run_of(f)
    assert run.run_id == run_id and run.run_group.startswith("cfg-")
    assert list(run.tags) == ["a", "b"]
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["train"]["num_steps"] == 300 and "commit" in json.dumps(config["provenance"])


def _smoke(workdir, steps=30):
  env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
  return subprocess.Popen(
      [sys.executable, "launch.py", "--config=configs/default.py:smoke", f"--workdir={workdir}",
       f"--config.train.num_steps={steps}", "--config.checkpoint.every_steps=20",
       "--config.train.samples_at_eval=False", "--config.checkpoint.async_save=False",
       "--config.train.wandb_project=t71"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 210 s on 2 busy cores: two processes of a 30-step run
def test_wandb_gets_every_row_of_metrics_jsonl_through_a_kill_at_the_checkpoint(tmp_path):
  """Log every 5, eval every 10, kill -9 as soon as checkpoint 20 lands: the killed process's
  wandb file lacks step 20 (wandb writes a step's row once the next step begins), and the
  resumed run sends it from metrics.jsonl. Both wandb files together hold metrics.jsonl, row for
  row, each step once."""
  workdir = tmp_path / "w"
  proc = _smoke(workdir)
  deadline = time.monotonic() + 240
  while time.monotonic() < deadline and proc.poll() is None:
    if (workdir / "checkpoints" / "20").exists():
      break
    time.sleep(0.02)
  assert proc.poll() is None, "the run ended before it could be killed"
  os.killpg(proc.pid, signal.SIGKILL)  # the whole job, wandb's service too, as a node loss
  proc.wait()
  proc = _smoke(workdir)
  out, _ = proc.communicate(timeout=280)
  assert proc.returncode == 0, out[-2000:]
  files = sorted(glob.glob(str(workdir / "wandb/offline-run-*/run-*.wandb")))
  assert len(files) == 2, files
  killed, resumed = (history_rows(f) for f in files)
  assert 20 not in killed  # what this test is about (the kill came before step 25's row)
  assert not set(killed) & set(resumed)  # each step once
  wandb_rows = {**killed, **resumed}
  expected = {}
  for line in (workdir / "metrics.jsonl").read_text().splitlines():
    row = json.loads(line)
    expected.setdefault(row["step"], {}).update(
        {f"{row['split']}/{k}": v for k, v in row.items()
         if k not in ("step", "split", "time") and not isinstance(v, str)})
  assert sorted(expected) == list(range(5, 31, 5))
  assert wandb_rows == expected
