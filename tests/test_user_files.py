"""Reading the files a user hands in (`transformer/user_files.py`): every failure is one line
naming the file, the line, what is wrong and what to do; reading writes nothing."""

import os

import pytest

from transformer import user_files
from transformer.cli.args import load_config
from transformer.config import ConfigError
from transformer.errors import CommandLineError, MissingFileError, UserFileError
from transformer.sweep.points import load_sweep


def _one_line(e) -> str:
  text = str(e.value)
  assert "\n" not in text and "Traceback" not in text, text
  return text


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


# --- JSON ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, phrases", [
    ('{"model": {"d_model": 32,}}', ["line 1, column 26", "not valid JSON"]),
    ('{\n  "model": {\n    "d_model": 32\n  }\n', ["line 5", "not valid JSON"]),
    ("", ["line 1, column 1", "not valid JSON"]),
    ("[1, 2]", ["line 1", "holds a JSON array, not an object"]),
    ("null", ["holds a JSON null, not an object"]),
], ids=["trailing_comma", "unclosed", "empty", "array", "null"])
def test_a_json_file_that_is_not_an_object_is_one_line_at_its_line(tmp_path, text, phrases):
  path = _write(tmp_path, "config.json", text)
  with pytest.raises(UserFileError) as e:
    user_files.read_json_object(path, "the run's saved config", "Restore it.")
  line = _one_line(e)
  assert line.startswith(f"{path}, ") and line.endswith("Restore it.")
  for phrase in phrases:
    assert phrase in line


def test_a_missing_or_directory_or_binary_file_is_one_line(tmp_path):
  with pytest.raises(MissingFileError) as e:
    user_files.read_json(str(tmp_path / "nope.json"))
  assert "does not exist" in _one_line(e)
  with pytest.raises(MissingFileError) as e:
    user_files.read_json(str(tmp_path))
  assert "is a directory" in _one_line(e)
  path = tmp_path / "bin.json"
  path.write_bytes(b'{"a":\n 1}\n\xff\xfe')
  with pytest.raises(UserFileError) as e:
    user_files.read_json(str(path))
  assert "line 3" in _one_line(e) and "not UTF-8" in str(e.value)


def test_json_lines_leave_out_a_torn_last_line_and_name_a_bad_line_elsewhere(tmp_path):
  good = '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'
  path = _write(tmp_path, "metrics.jsonl", good + '{"step": 3, "lo')
  assert [r["step"] for r in user_files.read_json_lines(path)] == [1, 2]
  path = _write(tmp_path, "metrics.jsonl", good + "\n")  # a blank line is no row
  assert len(user_files.read_json_lines(path)) == 2
  # A torn row that a resumed run appended to: an error naming it, or left out on request.
  path = _write(tmp_path, "metrics.jsonl", '{"step": 1}\n{"step": 2, "lo{"step": 2}\n{"step": 3}\n')
  with pytest.raises(UserFileError) as e:
    user_files.read_json_lines(path, "the run's metrics")
  assert "line 2 (the run's metrics)" in _one_line(e) and "Delete line 2" in str(e.value)
  assert [r["step"] for r in user_files.read_json_lines(path, skip_bad=True)] == [1, 3]
  path = _write(tmp_path, "metrics.jsonl", '{"step": 1}\n[1]\n')
  with pytest.raises(UserFileError, match="line 2: holds a JSON array"):
    user_files.read_json_lines(path)


# --- Python: the config file --------------------------------------------------------------

@pytest.mark.parametrize("text, error, phrases", [
    ("def get_config(:\n  pass\n", UserFileError, ["line 1, column 16", "invalid syntax"]),
    ("def get_config():\n  return 1\n   x = 2\n", UserFileError,
     ["line 3", "unexpected indent"]),
    ("import nosuchmodule\n", UserFileError,
     ["line 1", "ModuleNotFoundError while the file ran: No module named 'nosuchmodule'"]),
    ("x = 1\n", UserFileError, ["defines no get_config()", "ml_collections.ConfigDict"]),
    ("get_config = 3\n", UserFileError, ["get_config is a int, not a function"]),
    ("def get_config():\n  c = {}\n  return c['model']\n", UserFileError,
     ["line 3", "KeyError in get_config(): 'model'"]),
    ("def get_config():\n  return 3\n", UserFileError,
     ["line 1", "get_config() returned a value of type int"]),
    ("from transformer.config import ConfigError\ndef get_config():\n"
     "  raise ConfigError('model.d_model must be even')\n", ConfigError,
     ["line 3", "model.d_model must be even"]),
], ids=["syntax", "indentation", "import", "no_get_config", "not_callable", "raises",
        "returns_int", "raises_config_error"])
def test_a_bad_config_file_is_one_line_at_its_line(tmp_path, text, error, phrases):
  path = _write(tmp_path, "my_config.py", text)
  with pytest.raises(error) as e:
    load_config(path)
  line = _one_line(e)
  assert line.startswith(f"{path}") and "(the --config file)" in line, line
  for phrase in phrases:
    assert phrase in line, line
  assert not (tmp_path / "__pycache__").exists()  # reading wrote nothing


def test_an_error_in_a_module_the_config_imports_names_that_module(tmp_path, monkeypatch):
  _write(tmp_path, "helper_mod_x.py", "def size():\n  return 1 / 0\n")
  path = _write(tmp_path, "c.py", "import helper_mod_x\ndef get_config():\n"
                "  return helper_mod_x.size()\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(UserFileError) as e:
    load_config(path)
  assert "c.py, line 3" in _one_line(e)  # the line of the file handed in comes first
  _write(tmp_path, "helper_mod_y.py", "def f(:\n")
  path = _write(tmp_path, "d.py", "import helper_mod_y\n")
  with pytest.raises(UserFileError) as e:
    load_config(path)
  assert "helper_mod_y.py, line 1" in _one_line(e) and "invalid syntax" in str(e.value)


def test_a_config_path_of_the_wrong_kind_or_a_bad_variant_is_a_command_line_error(tmp_path):
  with pytest.raises(CommandLineError, match="is a directory, not a file"):
    load_config(str(tmp_path))
  with pytest.raises(CommandLineError, match="there is no file"):
    load_config(str(tmp_path / "none.py"))
  with pytest.raises(CommandLineError, match="Unknown variant 'nosuch'"):
    load_config("configs/default.py:nosuch")


# --- Python: the sweep file ---------------------------------------------------------------

@pytest.mark.parametrize("text, error, phrases", [
    ("def get_sweep(:\n  pass\n", UserFileError, ["line 1, column 15", "invalid syntax"]),
    ("import nosuchmodule\n", UserFileError, ["line 1", "ModuleNotFoundError"]),
    ("POINTS = []\n", UserFileError, ["defines no get_sweep()"]),
    ("def get_sweep():\n  x = 1\n  return [{'seed': x / 0}]\n", UserFileError,
     ["line 3", "ZeroDivisionError in get_sweep()"]),
    ("def get_sweep():\n  return {'seed': [0, 1]}\n", UserFileError,
     ["line 1", "get_sweep() returned a value of type dict"]),
    ("def get_sweep():\n  return 3\n", UserFileError, ["returned a value of type int"]),
    ("def get_sweep():\n  return []\n", UserFileError, ["returned no points"]),
    ("def get_sweep():\n  return ['seed=1']\n", UserFileError, ["point 0 is 'seed=1'"]),
    ("from transformer.sweep import product\ndef get_sweep():\n"
     "  return product({'seed': [0]}, {'seed': [1]})\n", ConfigError,
     ["line 3", "set the same field(s) ['seed'] twice"]),
], ids=["syntax", "import", "no_get_sweep", "raises", "dict", "int", "empty", "not_dicts",
        "clash"])
def test_a_bad_sweep_file_is_one_line_at_its_line(tmp_path, text, error, phrases):
  path = _write(tmp_path, "my_sweep.py", text)
  with pytest.raises(error) as e:
    load_sweep(path)
  line = _one_line(e)
  assert line.startswith(path) and "(the --sweep file)" in line, line
  for phrase in phrases:
    assert phrase in line, line


def test_a_sweep_preset_that_the_file_does_not_take_is_a_command_line_error(tmp_path):
  path = _write(tmp_path, "s.py", "def get_sweep():\n  return [{'seed': 0}]\n")
  with pytest.raises(CommandLineError, match="takes no preset; drop ':cpu'"):
    load_sweep(path + ":cpu")
  path = _write(tmp_path, "p.py", "def get_sweep(preset):\n  return [{'seed': 0}]\n")
  with pytest.raises(CommandLineError, match=r"needs one: --sweep=FILE.py:PRESET"):
    load_sweep(path)
  assert load_sweep(path + ":cpu") == [{"seed": 0}]
  with pytest.raises(CommandLineError, match="is not a file"):
    load_sweep(str(tmp_path))


def test_a_good_sweep_file_still_loads():
  points = load_sweep(os.path.join("experiments", "norm_placement.py"))
  assert points and all(isinstance(p, dict) for p in points)


# --- whole-file writes ------------------------------------------------------------------------


def test_a_whole_file_write_that_dies_leaves_the_old_file_and_no_temporary(tmp_path,
                                                                            monkeypatch):
  """paths.write_text (config.json, meta.json, sweep.json, baselines.json, report.md, the
  sbatch script, ...): a write killed half-way, or a full disk, leaves the previous file as it
  was and nothing beside it."""
  from transformer import paths
  target = tmp_path / "config.json"
  target.write_text('{"old": true}\n')

  class DiskFull(OSError):
    pass

  real_fsync = os.fsync

  def dies(fd):  # the new bytes are in the temporary file, not yet renamed
    raise DiskFull(28, "No space left on device")

  monkeypatch.setattr(os, "fsync", dies)
  with pytest.raises(DiskFull):
    paths.write_text(str(target), '{"new": true, "long": "' + "x" * 100_000 + '"}\n')
  monkeypatch.setattr(os, "fsync", real_fsync)
  assert target.read_text() == '{"old": true}\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
  paths.write_text(str(target), "new\n", mode=0o755)
  assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o755
  assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_whole_files_the_project_writes_go_through_the_atomic_writer():
  """No module writes a whole user-visible file with a bare open(..., "w"): each goes through
  paths.write_text, or renames a temporary file itself (the exceptions listed with why)."""
  import re
  root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "transformer")
  allowed = {
      "paths.py": "the writer itself",
      "workdir_lock.py": "the lock: O_EXCL creation and its own rename",
      "hf_tokenizer.py": "export: writes <name>.tmp, then os.replace",
      "hf_gpt2.py": "export: writes <name>.tmp, then os.replace",
      "runs.py": "the report cache: a temporary file, then os.replace",
      "peaks.py": "the CPU peak cache: a temporary file, then os.replace",
  }
  bare = re.compile(r"""open\([^)]*,\s*["']w["']""")
  found = []
  for folder, _, files in os.walk(root):
    for name in files:
      if name.endswith(".py") and name not in allowed:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
          found += [f"{name}:{i}" for i, line in enumerate(f, 1) if bare.search(line)]
  assert found == [], found
