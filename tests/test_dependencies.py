"""Every module imports, and every distribution the code imports is declared in pyproject.toml.

A package present only on the machine that ran the tests (tensorboard once was one) must make
this fail there, not on a user's fresh install.
"""

import ast
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The scripts under scripts/ are imported by their bare names too (tests and the accelerator
# report put that folder on sys.path).
LOCAL = {"transformer", "configs", "experiments", "tests", "scripts"} | {
    f[:-3] for f in os.listdir(os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "scripts")) if f.endswith(".py")}
CODE_DIRS = ("transformer", "experiments", "configs", "tests")


def _python_files():
  yield os.path.join(ROOT, "launch.py")
  for top in CODE_DIRS:
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
      yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def _module_name(path: str) -> str:
  return os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")


def _imported_top_levels(path: str) -> set[str]:
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module.split(".")[0])
  return names


def _project() -> dict:
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]


def _names(reqs: list[str], extras: dict[str, list[str]]) -> set[str]:
  """Distribution names in `reqs`, with `transformer[extra]` replaced by that extra's."""
  names = set()
  for req in reqs:
    found = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", req)
    if found.group(1) == "transformer":
      for extra in found.group(2).split(","):
        names |= _names(extras[extra.strip()], extras)
    else:
      names.add(_normalize(found.group(1)))
  return names


def _declared(extras_used=("test",)) -> set[str]:
  project = _project()
  extras = project["optional-dependencies"]
  return _names(list(project["dependencies"]) + [r for e in extras_used for r in extras[e]],
                extras)


def _normalize(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_distribution_is_declared():
  top_to_dists = importlib.metadata.packages_distributions()
  declared = _declared()
  missing = {}
  for path in _python_files():
    for name in _imported_top_levels(path) - LOCAL:
      if name in sys.stdlib_module_names or name == "__future__":
        continue
      dists = {_normalize(d) for d in top_to_dists.get(name, [])}
      assert dists, f"{name} (imported by {path}) is not installed in this environment"
      if not dists & declared:
        missing.setdefault(name, set()).add(os.path.relpath(path, ROOT))
  assert not missing, ("Imported but not declared in pyproject.toml's dependencies (or the "
                       f"[test] extra): {missing}")


# Distributions only an extra declares, and the files of the package that may import them (the
# error there names the extra); the tests may import them all ([test] includes these extras).
OPTIONAL = {"digits": {"transformer/data/builders/digits.py"}}


def test_the_test_extra_declares_the_optional_extras():
  assert {"scikit-learn"} <= _declared()


def test_optional_distributions_are_imported_only_where_their_extra_is_named():
  top_to_dists = importlib.metadata.packages_distributions()
  core = _declared(extras_used=())
  for extra, allowed in OPTIONAL.items():
    only_extra = _declared(extras_used=(extra,)) - core
    assert only_extra, f"[{extra}] declares nothing beyond the core dependencies"
    for path in _python_files():
      rel = os.path.relpath(path, ROOT)
      if rel.startswith("tests" + os.sep) or rel in allowed:
        continue
      used = {n for n in _imported_top_levels(path)
              if {_normalize(d) for d in top_to_dists.get(n, [])} & only_extra}
      assert not used, f"{rel} imports {used}, which only the [{extra}] extra installs"


def test_every_module_imports():
  """In a fresh interpreter, so one module's side effects cannot hide another's missing import."""
  modules = [_module_name(p) for p in _python_files()
             if os.path.basename(p) != "conftest.py"]
  code = ("import importlib, sys, traceback\n"
          "bad = []\n"
          f"for m in {modules!r}:\n"
          "  try:\n"
          "    importlib.import_module(m)\n"
          "  except Exception:\n"
          "    bad.append(m + ': ' + traceback.format_exc(limit=1).strip().splitlines()[-1])\n"
          "print('\\n'.join(bad))\n"
          "sys.exit(1 if bad else 0)\n")
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=240)
  assert done.returncode == 0, f"modules that fail to import:\n{done.stdout}{done.stderr[-2000:]}"


def test_every_config_validates():
  from transformer.config import from_config_dict
  for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
    if name.endswith(".py") and name != "__init__.py":
      module = importlib.import_module(f"configs.{name[:-3]}")
      from_config_dict(module.get_config())  # raises ConfigError naming the field


# Layers (issue 18): the registry sits between the config and the model / task / data code,
# which it names by import path; none of these hides a circle behind an import inside a function.
LAYERED = ("transformer/config.py", "transformer/kinds.py", "transformer/model/flops.py",
           "transformer/tasks/base.py", "transformer/tasks/language.py",
           "transformer/tasks/seq2seq.py", "transformer/tasks/classification.py",
           "transformer/data/facts.py")


def _transformer_imports(path: str) -> list[tuple[str, bool]]:
  """(module, inside a function) for every `transformer...` import of `path`."""
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read(), path)
  found = []

  def visit(node, in_function):
    for child in ast.iter_child_nodes(node):
      inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
      if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
        names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
      elif isinstance(child, ast.Import):
        names = [a.name for a in child.names]
      else:
        visit(child, inner)
        continue
      found.extend((n, in_function) for n in names if n.split(".")[0] == "transformer")
  visit(tree, False)
  return found


def test_the_model_package_imports_neither_training_nor_the_registry():
  model_dir = os.path.join(ROOT, "transformer", "model")
  for name in sorted(os.listdir(model_dir)):
    if name.endswith(".py"):
      bad = [m for m, _ in _transformer_imports(os.path.join("transformer", "model", name))
             if m.startswith(("transformer.train", "transformer.kinds", "transformer.tasks"))]
      assert not bad, f"transformer/model/{name} imports {bad}"


def test_registry_layers_import_at_the_top_and_load_in_any_order():
  for path in LAYERED:
    inner = [m for m, in_function in _transformer_imports(path) if in_function]
    assert not inner, f"{path} imports {inner} inside a function"
  tasks_imports = [m for name in sorted(os.listdir(os.path.join(ROOT, "transformer", "tasks")))
                   if name.endswith(".py")
                   for m, _ in _transformer_imports(os.path.join("transformer", "tasks", name))]
  assert not [m for m in tasks_imports if m.startswith(("transformer.data.pipeline",
                                                        "transformer.data.sources",
                                                        "transformer.kinds"))], tasks_imports
  for path in LAYERED + ("transformer/model/models.py",):  # each one first, in a fresh process
    module = path[:-3].replace("/", ".")
    code = (f"import sys, {module}\n"
            "tf = [m for m in sys.modules if m.split('.')[0] == 'tensorflow']\n"
            "sys.exit(1 if tf else 0)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"), timeout=240)
    assert done.returncode == 0, f"import {module}: {done.stderr[-2000:]} (or TensorFlow loaded)"
