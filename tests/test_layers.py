"""The import graph of zoo (zoo.tasks and zoo.kernels included): every import goes down the layers, and no modules import each other.

``LAYERS`` lists the layers from the bottom. A module may import modules of its own layer and of the
layers below it; names of one layer separated by `` | `` are independent (neither imports the other).
A name covers its module and every module below it (the longest name wins), and every module needs one.
``zoo`` itself (``zoo/__init__.py``) is no layer: importing any part of zoo runs it, so it imports nothing.

Every import counts, those inside functions too: a lazy import is still a dependency, and two modules
that import each other lazily are still one module split in two files. Imports by name at run time
(``importlib.import_module``: the registries' built-ins, a config's ``imports``) are not edges.
"""
from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"zoo": "zoo", "zoo.tasks": "tasks", "zoo.kernels": "kernels"}  # import name -> folder

LAYERS = [
    "zoo.errors zoo.optional zoo.registry zoo.devices",  # base: the standard library and torch only
    "zoo.kernels | zoo.tasks",               # plain PyTorch references and Triton kernels | synthetic tasks
    "zoo.rope zoo.mixers",                   # sequence mixers
    "zoo.model zoo.autoencoder",             # the models around the mixers
    "zoo.spec",                              # what a run needs from its task, resolved once; config -> model
    "zoo.config",                            # the run config: schema, checks, run ids
    "zoo.data zoo.graphs zoo.step zoo.evaluation zoo.checkpoint zoo.lit zoo.results",  # training one run or a group
    "zoo.run",
    "zoo.scheduler zoo.worker zoo.backends | zoo.plotstyle zoo.figures zoo.leaderboard | zoo.bench",  # many runs | reports | benches
    "zoo.sweep",
]

# Known violations, as (importer, imported) edges left out of the graph, each with its reason. None today.
ALLOWED: dict[tuple[str, str], str] = {}


def modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Module name -> file, for every ``*.py`` under the folders of ``packages`` (import name -> folder)."""
    files = {}
    for name, folder in packages.items():
        for directory, _, names in os.walk(root / folder):  # not into links: zoo/tasks is tasks/, mapped on its own
            for path in sorted(Path(directory) / n for n in names if n.endswith(".py")):
                parts = path.relative_to(root / folder).with_suffix("").parts
                files[".".join((name, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return files


def import_graph(root: Path, packages: dict[str, str]) -> dict[str, set[str]]:
    """Module name -> the modules of ``packages`` that it imports."""
    files = modules(root, packages)
    graph = {module: set() for module in files}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up from the module's own package
                    base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in graph else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target not in graph and "." in target:  # `import zoo.x.y` of a name inside module zoo.x
                    target = target.rpartition(".")[0]
                if target in graph and target != module:
                    graph[module].add(target)
    return graph


def layer_violations(graph: dict[str, set[str]], layers: list[str], top: str = "zoo") -> list[str]:
    """One line per module without a layer, per import of a higher layer or of an independent sibling, and
    per import in ``top`` (the package every other module is imported through)."""
    where = {name: (level, group) for level, layer in enumerate(layers)
             for group, names in enumerate(layer.split("|")) for name in names.split()}

    def layer_of(module):
        covering = [name for name in where if module == name or module.startswith(name + ".")]
        return where[max(covering, key=len)] if covering else None

    problems = [f"{module} has no layer: add it to LAYERS" for module in sorted(graph)
                if module != top and layer_of(module) is None]
    problems += [f"{top} imports {target}: every import of a module of {top} would run it" for target in sorted(graph.get(top, ()))]
    for module in sorted(graph):
        for target in sorted(graph[module]):
            if top in (module, target) or layer_of(module) is None or layer_of(target) is None:
                continue
            (level, group), (target_level, target_group) = layer_of(module), layer_of(target)
            if target_level > level:
                problems.append(f"{module} (layer {level}) imports {target} from a higher layer ({target_level})")
            elif target_level == level and target_group != group:
                problems.append(f"{module} imports {target}, which layer {level} declares independent of it")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of two or more modules (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def repo_graph() -> dict[str, set[str]]:
    graph = import_graph(ROOT, PACKAGES)
    for importer, imported in ALLOWED:
        assert imported in graph[importer], f"ALLOWED lists {importer} -> {imported}, which is gone: remove it"
        graph[importer].discard(imported)
    return graph


def test_imports_go_down_the_layers():
    assert layer_violations(repo_graph(), LAYERS) == []


def test_no_import_cycles():
    assert cycles(repo_graph()) == []


def test_tasks_and_kernels_are_linked_into_zoo():
    """zoo/tasks and zoo/kernels are links to the folders that PACKAGES maps them to (what makes them zoo.*)."""
    for name, folder in PACKAGES.items():
        assert (ROOT / name.replace(".", "/")).resolve() == (ROOT / folder).resolve(), name


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_checks_catch_upward_imports_and_cycles(tmp_path):
    """A synthetic tree with one of each fault (lazy, relative and plain imports), and the same tree fixed."""
    write_tree(tmp_path, {
        "top/__init__.py": "from top import stray\n",  # the top package imports nothing
        "top/base.py": "def f():\n    from top.app import main\n",  # base reaches up, lazily
        "top/app.py": "from . import base\nfrom top.left import x\nfrom top.right import y\n",
        "top/left.py": "import top.right\nx = 1\n",  # left and right are declared independent
        "top/right.py": "from top.left import x\ny = x\n",
        "top/stray.py": "",
    })
    layers = ["top.base", "top.left | top.right", "top.app"]
    graph = import_graph(tmp_path, {"top": "top"})
    assert graph["top.app"] == {"top.base", "top.left", "top.right"}
    assert layer_violations(graph, layers, top="top") == [
        "top.stray has no layer: add it to LAYERS",
        "top imports top.stray: every import of a module of top would run it",
        "top.base (layer 0) imports top.app from a higher layer (2)",
        "top.left imports top.right, which layer 1 declares independent of it",
        "top.right imports top.left, which layer 1 declares independent of it",
    ]
    assert cycles(graph) == [["top.app", "top.base"], ["top.left", "top.right"]]

    write_tree(tmp_path, {"top/__init__.py": "", "top/base.py": "", "top/left.py": "x = 1\n", "top/right.py": "from top import base\ny = 1\n"})
    graph = import_graph(tmp_path, {"top": "top"})
    assert layer_violations(graph, [*layers, "top.stray"], top="top") == [] and cycles(graph) == []
