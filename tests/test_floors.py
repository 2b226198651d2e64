"""Imports only go down (STYLE.md, docs/design.md): core -> io -> data -> tasks -> apps. The whole of zoo/ is
parsed (deferred imports inside functions included) and every import circle or upward import fails, named
file:line, so a new one is caught the day it is written."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "zoo"

CORE, IO, DATA, TASKS, APPS = range(5)
FLOOR_NAMES = ("core", "io", "data", "tasks", "apps")

# A module's floor is that of the longest prefix listed here; every module of zoo must be covered.
FLOORS: dict[str, int] = {
    "zoo.utils": CORE, "zoo.registry": CORE, "zoo.config": CORE, "zoo.options": CORE, "zoo.owned_keys": CORE,
    "zoo.atomic": CORE, "zoo.outputs": CORE,
    "zoo.presets": CORE, "zoo.quantization": CORE, "zoo.modules": CORE, "zoo.models": CORE,
    "zoo.generation": CORE,  # decoding is model.generate; its command line is zoo.generate_cli (apps)
    "zoo.checkpoint": IO, "zoo.loader": IO, "zoo.pretrained": IO, "zoo.tokenizers": IO, "zoo.finetune": IO,
    "zoo.data": DATA,
    "zoo.tasks": TASKS,
    "zoo.training": APPS, "zoo.evaluation": APPS, "zoo.generate_cli": APPS, "zoo.inspection": APPS,
    "zoo.embedding": APPS, "zoo.export": APPS, "zoo.apps": APPS, "zoo.hydra_schema": APPS,
    "zoo.serving": APPS, "zoo.lm_eval": APPS,
}
FACADE = "zoo"  # zoo/__init__.py: the public names, each imported only when first used (PEP 562)


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py under zoo/."""
    out = {}
    for file in PACKAGE.rglob("*.py"):
        parts = list(file.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = file
    return out


MODULES = module_files()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The zoo modules an import statement loads (the deepest existing module of each name)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if MODULES[module].name != "__init__.py":
                package.pop()
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("zoo"):
            found.append(name)
    return found


def import_edges() -> dict[str, list[tuple[str, int]]]:
    """module -> [(imported module, line)], deferred imports and `if TYPE_CHECKING` ones included."""
    edges: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module, file in MODULES.items():
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module] += [(t, node.lineno) for t in _targets(module, node) if t != module]
    return {m: sorted(set(targets), key=lambda e: (e[1], e[0])) for m, targets in edges.items()}


def floor(module: str) -> int | None:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else FLOORS[best]


def circles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(set(MODULES) | set(edges)):
        if start in index:
            continue
        work = [(start, iter(edges.get(start, [])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child, _ in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


EDGES = import_edges()


def test_every_module_has_a_floor():
    assert [m for m in MODULES if m != FACADE and floor(m) is None] == []


def upward_imports(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    return [f"{where(m, line)}: {m} ({FLOOR_NAMES[floor(m)]}) imports {t} ({FLOOR_NAMES[floor(t)]})"
            for m, targets in edges.items() if m != FACADE
            for t, line in targets if t != FACADE and floor(t) > floor(m)]


def circle_reports(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    reports = []
    for component in circles(edges):
        members = set(component)
        links = [f"{where(m, line)} imports {t}" for m in component for t, line in edges[m] if t in members]
        reports.append(" <-> ".join(component) + ":\n    " + "\n    ".join(links))
    return reports


def where(module: str, line: int) -> str:
    file = MODULES.get(module)
    return f"{file.relative_to(ROOT) if file else module}:{line}"


def test_no_import_circle():
    problems = circle_reports(EDGES)
    assert not problems, "import circles:\n" + "\n".join(problems)


def test_imports_only_go_down():
    problems = upward_imports(EDGES)
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_nothing_imports_the_facade():
    """`import zoo` is for users; inside zoo a module names what it needs (no climb to the top floor)."""
    problems = [f"{where(m, line)}: {m} imports zoo" for m, targets in EDGES.items() if m != FACADE
                for t, line in targets if t == FACADE]
    assert not problems, "\n".join(problems)


def test_the_facade_imports_nothing_at_import_time():
    """Python runs zoo/__init__.py before any zoo submodule, so a name it imports eagerly would sit under
    every floor. Its imports live inside the lazy `__getattr__`."""
    tree = ast.parse(MODULES[FACADE].read_text())
    eager = [f"zoo/__init__.py:{n.lineno}" for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
             and any(t.startswith("zoo") for t in _targets(FACADE, n))]
    assert eager == []


def test_the_checks_find_a_planted_upward_import_and_circle():
    """The walker on planted edges: a core module importing training, and two data modules importing each
    other, are both reported with file:line."""
    planted = {"zoo.modules.attention": [("zoo.training.run", 3)],
               "zoo.data.cache": [("zoo.data.batching", 7)], "zoo.data.batching": [("zoo.data.cache", 9)]}
    assert upward_imports(planted) == [
        "zoo/modules/attention.py:3: zoo.modules.attention (core) imports zoo.training.run (apps)"]
    assert circle_reports(planted) == [
        "zoo.data.batching <-> zoo.data.cache:\n    zoo/data/batching.py:9 imports zoo.data.cache"
        "\n    zoo/data/cache.py:7 imports zoo.data.batching"]
