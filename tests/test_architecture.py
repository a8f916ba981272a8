"""The import graph of `transformer/`, read from the source with `ast`: no module imports itself
through others (no import cycle; function-level imports count, since they only hide a cycle),
the model package stays pure (nothing from training, the kind registry or the tasks), and the
registry imports none of the modules it names by path (model, data and task classes are
imported when a kind is used, so the config below it can validate kind names against it).
Imports under `if TYPE_CHECKING:` never run and do not count for cycles; for the floors
they count too (a type-only import is still an arrow a reader follows).

The floors (`FLOORS`, bottom first): a room (a subpackage or a top-level module of
`transformer/`) imports only from rooms on floors below its own, so a reader finds each thing
by going down. The README's Layout lists them from this table, and every module file."""

import ast
import os
import re

from transformer import REPO_ROOT

PACKAGE = "transformer"
# What `transformer.model.*` may not import: the model is built from its config alone.
MODEL_MAY_NOT_IMPORT = ("transformer.train", "transformer.kinds", "transformer.tasks")


def module_files(root: str = REPO_ROOT, package: str = PACKAGE) -> dict[str, str]:
  """`{module name: path}` of every .py file under the package (`__init__` named as its
  package)."""
  modules = {}
  for folder, _, files in os.walk(os.path.join(root, package)):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(folder, f)
        parts = os.path.relpath(path, root)[:-3].split(os.sep)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return modules


def _resolve_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
  """The absolute module a `from ... import` reads from (relative imports resolved)."""
  if not node.level:
    return node.module or ""
  base = importer.split(".")
  base = base[:len(base) - node.level + (1 if is_package else 0)]
  return ".".join(base + ([node.module] if node.module else []))


def _named_by_path(node: ast.AST) -> str:
  """`transformer.a.b` of a string constant `"transformer.a.b"` or `"transformer.a.b:Name"`
  (a registry's lazy import by path), else ''."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    if re.fullmatch(rf"{PACKAGE}(\.\w+)+(:\w+)?", node.value):
      return node.value.partition(":")[0]
  return ""


def _runtime_nodes(tree: ast.AST, *, type_only_too: bool = False):
  """Every node of `tree` except those under `if TYPE_CHECKING:` (imports for type hints)."""
  stack = [tree]
  while stack:
    node = stack.pop()
    yield node
    for child in ast.iter_child_nodes(node):
      test = getattr(child, "test", None)
      if (not type_only_too and isinstance(child, ast.If) and isinstance(test, ast.Name)
          and test.id == "TYPE_CHECKING"):
        stack.extend(child.orelse)
        continue
      stack.append(child)


def imports_of(source: str, importer: str, modules, is_package: bool = False, *,
               by_path: bool = False, type_only_too: bool = False) -> dict[str, int]:
  """`{imported module of the package: first line}` for every import in `source` that runs, at
  any depth (functions, methods, conditionals). `from a.b import c` counts as importing `a.b.c`
  where that is a module, else `a.b`. With `by_path`, instead: the modules that a module
  calling `importlib.import_module` names by path in a string ("transformer.a.b:Name")."""
  found = {}
  lazy = "import_module(" in source

  def add(name, line):
    while name and name not in modules:  # `import a.b.C`-style names: the module holding them
      name = name.rpartition(".")[0]
    if name and name != importer:
      found.setdefault(name, line)

  for node in _runtime_nodes(ast.parse(source), type_only_too=type_only_too):
    if by_path:
      if lazy and _named_by_path(node):
        add(_named_by_path(node), node.lineno)
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] == PACKAGE:
          add(alias.name, node.lineno)
    elif isinstance(node, ast.ImportFrom):
      base = _resolve_from(node, importer, is_package)
      if base.split(".")[0] != PACKAGE:
        continue
      for alias in node.names:
        sub = f"{base}.{alias.name}"
        add(sub if sub in modules else base, node.lineno)
  return dict(sorted(found.items(), key=lambda kv: kv[1]))


def import_graph(root: str = REPO_ROOT, *, by_path: bool = False,
                 type_only_too: bool = False) -> dict[str, dict[str, int]]:
  """`{module: {module it imports (or names by path): line}}` over the whole package; with
  `type_only_too`, imports under `if TYPE_CHECKING:` included."""
  modules = module_files(root)
  graph = {}
  for name, path in modules.items():
    with open(path, encoding="utf-8") as f:
      graph[name] = imports_of(f.read(), name, modules, path.endswith("__init__.py"),
                               by_path=by_path, type_only_too=type_only_too)
  return graph


def _components(graph) -> list[list[str]]:
  """Strongly connected components (Tarjan), iteratively; each as a sorted list."""
  index, low, on_stack, stack, out = {}, {}, set(), [], []
  for start in sorted(graph):
    if start in index:
      continue
    work = [(start, iter(sorted(graph.get(start, ()))))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is None:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          comp = []
          while True:
            m = stack.pop()
            on_stack.discard(m)
            comp.append(m)
            if m == node:
              break
          out.append(sorted(comp))
      elif child not in index:
        index[child] = low[child] = len(index)
        stack.append(child)
        on_stack.add(child)
        work.append((child, iter(sorted(graph.get(child, ())))))
      elif child in on_stack:
        low[node] = min(low[node], index[child])
  return out


def _shortest_cycle_through(graph, start: str, allowed: set) -> list[str]:
  """The shortest path start -> ... -> start inside `allowed` (breadth-first)."""
  parent, frontier = {start: None}, [start]
  while frontier:
    nxt = []
    for node in frontier:
      for child in sorted(graph.get(node, ())):
        if child == start:
          path = [node]
          while path[-1] != start:
            path.append(parent[path[-1]])
          return path[::-1] + [start]
        if child in allowed and child not in parent:
          parent[child] = node
          nxt.append(child)
    frontier = nxt
  return []


def find_cycles(graph) -> list[list[str]]:
  """Import cycles as paths `[a, b, ..., a]`: for every group of modules that import each
  other, the shortest cycle through each of its modules (the same cycle counted once)."""
  cycles, seen = [], set()
  for comp in _components(graph):
    if len(comp) == 1 and comp[0] not in graph.get(comp[0], ()):
      continue
    for node in comp:
      cycle = _shortest_cycle_through(graph, node, set(comp))
      key = frozenset(zip(cycle, cycle[1:]))
      if cycle and key not in seen:
        seen.add(key)
        cycles.append(cycle)
  return sorted(cycles, key=lambda c: (len(c), c))  # the direct circles first


def forbidden_imports(graph) -> list[str]:
  """`importer -> imported (line n)` for every import the model package may not make."""
  bad = []
  for importer, targets in sorted(graph.items()):
    if not importer.startswith("transformer.model"):
      continue
    for target, line in sorted(targets.items()):
      if any(target == f or target.startswith(f + ".") for f in MODEL_MAY_NOT_IMPORT):
        bad.append(f"{importer} -> {target} (line {line})")
  return bad


def test_the_cycle_finder_finds_a_hand_made_cycle():
  graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"a": 1}}
  assert find_cycles(graph) == [["a", "b", "c", "a"]]
  assert find_cycles({"a": {"a": 1}}) == [["a", "a"]]
  assert find_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []


def test_imports_are_read_at_every_depth_and_to_the_submodule():
  modules = {"transformer", "transformer.model", "transformer.model.block", "transformer.kinds",
             "transformer.train.loop", "transformer.train"}
  source = ("import os\n"
            "from transformer.model import block\n"
            "def f():\n"
            "  from transformer import kinds\n"
            "  import transformer.train.loop\n"
            "  from . import sibling_name\n")
  got = imports_of(source, "transformer.model.stacks", modules)
  assert got == {"transformer.model.block": 2, "transformer.kinds": 4,
                 "transformer.train.loop": 5, "transformer.model": 6}
  registry = ('"""Names transformer.train.loop in a docstring."""\n'
              'import importlib\n'
              'from typing import TYPE_CHECKING\n'
              'if TYPE_CHECKING:\n'
              '  from transformer.train import loop\n'
              'MODELS = {"lm": "transformer.model.block:Block"}\n'
              'get = lambda path: importlib.import_module(path)\n')
  assert imports_of(registry, "transformer.kinds", modules) == {}
  assert imports_of(registry, "transformer.kinds", modules, by_path=True) == {
      "transformer.model.block": 6}


def test_the_package_has_no_import_cycle():
  cycles = find_cycles(import_graph())
  assert not cycles, "Import cycles (break each by moving what both sides need):\n" + "\n".join(
      "  " + " -> ".join(c) for c in cycles)


def test_the_model_imports_nothing_from_training_kinds_or_tasks():
  bad = forbidden_imports(import_graph())
  assert not bad, ("transformer.model must not import transformer.train, .kinds or .tasks "
                   "(the model is built from its config alone):\n" + "\n".join(
                       "  " + b for b in bad))


def test_the_registry_imports_nothing_it_names_by_path():
  named = import_graph(by_path=True)["transformer.kinds"]
  imported = import_graph()["transformer.kinds"]
  assert named, "the registry names its model, data and task classes by import path"
  assert not set(named) & set(imported), (
      "transformer.kinds imports modules it names by path (import them only when a kind is "
      f"used): {sorted(set(named) & set(imported))}")


# The floors of `transformer/`, bottom first. Rooms on one floor import nothing from each other.
FLOORS = (
    ("errors",),                      # error classes and exit statuses
    ("paths", "float_text", "optim_config", "sampling"),  # files, atomic writes; float32 text;
                                      # the optim section; decoding knobs
    ("metric_columns",),              # metrics column by column (packed runs)
    ("config", "packed_runs", "figure_file"),  # validated config; packed runs; figures
    ("user_files", "datasets"),       # files a user hands in; the dataset registry
    ("model", "data"),                # Linen modules and their FLOPs; input pipelines
    ("provenance", "kinds"),          # where data came from; the model-kind registry
    ("workdir", "workdir_lock", "study"),  # what a run leaves; who holds it; a study's hooks
    ("weights",),                     # parameters in and out: init_from, Hugging Face GPT-2
    ("tasks",),                       # losses, metrics, decoding of each kind
    ("train",),                       # steps, parallel layouts, loop, in-loop evals, bench
    ("evaluation", "sweep"),          # use a finished run; run many
    ("report",),                      # tables, figures and verdicts of runs
    ("cli",),                         # launch.py's modes
)


def room(module: str) -> str:
  """`transformer.train.loop` -> `train`; the package's own `__init__` is the room `transformer`,
  below every floor."""
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else parts[0]


def floor_of(name: str) -> int:
  if name == PACKAGE:
    return -1
  for level, rooms in enumerate(FLOORS):
    if name in rooms:
      return level
  raise KeyError(name)


def back_arrows(graph) -> list[str]:
  """`importer -> imported (line n)` for every import that does not go down a floor."""
  bad = []
  for importer, targets in sorted(graph.items()):
    for target, line in sorted(targets.items()):
      a, b = room(importer), room(target)
      if a != b and floor_of(b) >= floor_of(a):
        bad.append(f"{importer} ({a}, floor {floor_of(a)}) -> {target} ({b}, floor "
                   f"{floor_of(b)}) (line {line})")
  return bad


def render_floors() -> str:
  """The floors as the README's Layout shows them, top first."""
  return "\n".join(" ".join(rooms) for rooms in reversed(FLOORS))


def test_every_room_has_a_floor():
  rooms = {room(m) for m in module_files()} - {PACKAGE}
  listed = {r for rooms in FLOORS for r in rooms}
  assert rooms == listed, (f"rooms without a floor: {sorted(rooms - listed)}; floors naming no "
                           f"room: {sorted(listed - rooms)}")


def test_every_import_goes_down_a_floor_type_only_ones_included():
  bad = back_arrows(import_graph(type_only_too=True))
  assert not bad, ("Imports that do not go down a floor (move the code, or the name it needs, "
                   "to the lower room):\n" + "\n".join("  " + b for b in bad))


def test_the_floor_check_catches_an_arrow_up_and_one_across():
  graph = {"transformer.model.block": {"transformer.train.loop": 3},
           "transformer.kinds": {"transformer.provenance": 5, "transformer.config": 1},
           "transformer.train.loop": {"transformer.train.steps": 2}}
  assert back_arrows(graph) == [
      "transformer.kinds (kinds, floor 6) -> transformer.provenance (provenance, floor 6) (line 5)",
      "transformer.model.block (model, floor 5) -> transformer.train.loop (train, floor 10) "
      "(line 3)"]


def _readme_layout() -> str:
  with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  start = text.index("## Layout")
  return text[start:text.index("\n## ", start + 1)]


def test_the_readme_layout_shows_the_floors_and_every_module():
  layout = _readme_layout()
  assert render_floors() in layout, ("README Layout's floors differ from FLOORS in "
                                     "tests/test_architecture.py; paste:\n" + render_floors())
  missing = []
  for module, path in sorted(module_files().items()):
    name = os.path.basename(path)
    if name == "__init__.py":
      name = module.rpartition(".")[2] + "/"
    if not re.search(rf"(?<![\w/.]){re.escape(name)}", layout):
      missing.append(os.path.relpath(path, REPO_ROOT))
  assert not missing, f"README Layout does not mention: {missing}"
  named = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*\.py)\b", layout))
  files = {os.path.basename(p) for p in module_files().values()}
  others = {f for folder in ("configs", "experiments", "scripts", "tests", ".")
            for f in os.listdir(os.path.join(REPO_ROOT, folder))}
  stale = sorted(n for n in named if n not in files | others)
  assert not stale, f"README Layout names files that do not exist: {stale}"
