"""The import graph of `transformer/`, read from the source with `ast`: no module imports itself
through others (no import cycle; function-level imports count, since they only hide a cycle),
the model package stays pure (nothing from training, the kind registry or the tasks), and the
registry imports none of the modules it names by path (model, data and task classes are
imported when a kind is used, so the config below it can validate kind names against it).
Imports under `if TYPE_CHECKING:` never run and do not count."""

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


def _runtime_nodes(tree: ast.AST):
  """Every node of `tree` except those under `if TYPE_CHECKING:` (imports for type hints)."""
  stack = [tree]
  while stack:
    node = stack.pop()
    yield node
    for child in ast.iter_child_nodes(node):
      test = getattr(child, "test", None)
      if isinstance(child, ast.If) and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        stack.extend(child.orelse)
        continue
      stack.append(child)


def imports_of(source: str, importer: str, modules, is_package: bool = False, *,
               by_path: bool = False) -> dict[str, int]:
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

  for node in _runtime_nodes(ast.parse(source)):
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


def import_graph(root: str = REPO_ROOT, *, by_path: bool = False) -> dict[str, dict[str, int]]:
  """`{module: {module it imports (or names by path): line}}` over the whole package."""
  modules = module_files(root)
  graph = {}
  for name, path in modules.items():
    with open(path, encoding="utf-8") as f:
      graph[name] = imports_of(f.read(), name, modules, path.endswith("__init__.py"),
                               by_path=by_path)
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
