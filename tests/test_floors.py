"""Imports only go down (STYLE.md, docs/design.md): core -> io -> data -> tasks -> apps. The whole of zoo/ is
parsed (deferred imports inside functions included) and every import circle or upward import fails, named
file:line, so a new one is caught the day it is written. So does a circle between packages (the floor table's
entries), and a package `__init__.py` that imports or runs anything beyond its own modules: Python runs it
whenever any module of the package is imported, so what it does would hide under every one of them."""

from __future__ import annotations

import ast
import builtins
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

ROOT = Path(__file__).resolve().parents[1]

CORE, IO, DATA, TASKS, APPS = range(5)
FLOOR_NAMES = ("core", "io", "data", "tasks", "apps")

# A module's floor is that of the longest prefix listed here; every module of zoo must be covered.
FLOORS: dict[str, int] = {
    "zoo.utils": CORE, "zoo.registry": CORE, "zoo.config": CORE, "zoo.options": CORE,
    "zoo.atomic": CORE, "zoo.outputs": CORE, "zoo.parts": CORE, "zoo.config_moved": CORE,
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


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file (relative to `root`), for every .py under root/zoo/."""
    out = {}
    for file in (root / "zoo").rglob("*.py"):
        path = file.relative_to(root)
        parts = list(path.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_files()


def _targets(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path] = MODULES) -> list[str]:
    """The zoo modules an import statement loads (the deepest existing module of each name)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if modules[module].name != "__init__.py":
                package.pop()
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith("zoo"):
            found.append(name)
    return found


def import_edges(modules: dict[str, Path] = MODULES, root: Path = ROOT) -> dict[str, list[tuple[str, int]]]:
    """module -> [(imported module, line)], deferred imports and `if TYPE_CHECKING` ones included."""
    edges: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module, file in modules.items():
        for node in ast.walk(ast.parse((root / file).read_text(), str(file))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module] += [(t, node.lineno) for t in _targets(module, node, modules) if t != module]
    return {m: sorted(set(targets), key=lambda e: (e[1], e[0])) for m, targets in edges.items()}


def package(module: str) -> str:
    """The package a module belongs to: its longest entry of the floor table (a package, or a module right
    under zoo/ such as zoo.checkpoint); the module itself outside the table (the facade)."""
    return max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len, default=module)


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


def where(module: str, line: int, modules: dict[str, Path] = MODULES) -> str:
    file = modules.get(module)
    return f"{file.as_posix() if file else module}:{line}"


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
    tree = ast.parse((ROOT / MODULES[FACADE]).read_text())
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


def package_loop_reports(edges: dict[str, list[tuple[str, int]]], modules: dict[str, Path] = MODULES
                         ) -> list[str]:
    """Packages whose modules import each other's in a circle, each with the imports that cross between them
    (file:line). No module need import itself back for that: importing zoo.training.sharding runs
    zoo/training/__init__.py, and a package is written, read and moved as one."""
    between: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for m, targets in edges.items():
        between[package(m)] += [(package(t), line) for t, line in targets
                                if FACADE not in (m, t) and package(t) != package(m)]
    reports = []
    for component in circles(between):
        members = set(component)
        links = sorted((modules[m].as_posix(), line, t) for m, targets in edges.items() for t, line in targets
                       if package(m) != package(t) and {package(m), package(t)} <= members)
        reports.append(" <-> ".join(component) + ":\n    "
                       + "\n    ".join(f"{file}:{line} imports {t}" for file, line, t in links))
    return reports


STANDARD_LIBRARY = sys.stdlib_module_names | {"__future__"}


def _run_on_import(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node` that run when its module is imported: all but the bodies of functions and lambdas
    (their decorators and default values do run)."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        parts = [*getattr(node, "decorator_list", []), *node.args.defaults,
                 *(d for d in node.args.kw_defaults if d is not None)]
    else:
        parts = list(ast.iter_child_nodes(node))
    for part in parts:
        yield from _run_on_import(part)


def _imports_beyond(init: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    """What an import statement of package `init`'s __init__.py loads that is neither the standard library
    nor a module of the package itself (under it, and of its floor-table entry)."""
    if isinstance(node, ast.Import):
        outside = [a.name for a in node.names if a.name.split(".")[0] != "zoo"]
    else:
        outside = [node.module] if node.level == 0 and node.module.split(".")[0] != "zoo" else []
    found = [name for name in outside if name.split(".")[0] not in STANDARD_LIBRARY]
    found += [t for t in _targets(init, node, modules)
              if not (t.startswith(init + ".") and package(t) == package(init))]
    return list(dict.fromkeys(found))


def init_side_effects(modules: dict[str, Path] = MODULES, root: Path = ROOT) -> list[str]:
    """The rule for a package's `__init__.py`, which Python runs before any module of the package: when it
    is imported it may import only the standard library and the package's own modules (re-exports, registry
    entries; names from elsewhere are re-exported lazily, in a PEP 562 `__getattr__`), and call nothing but
    builtins (no registration, no setup: the app that needs one calls it). Each breach, file:line."""
    problems = []
    for init, file in sorted(modules.items()):
        if file.name != "__init__.py":
            continue
        for node in _run_on_import(ast.parse((root / file).read_text(), str(file))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                problems += [f"{where(init, node.lineno, modules)}: {init} imports {name} when imported"
                             for name in _imports_beyond(init, node, modules)]
            decorators = getattr(node, "decorator_list", [])
            called = [node.func] if isinstance(node, ast.Call) else decorators
            problems += [f"{where(init, c.lineno, modules)}: {init} calls {ast.unparse(c)} when imported"
                         for c in called if not (isinstance(c, ast.Name) and hasattr(builtins, c.id))]
    return problems


def test_no_package_loop():
    problems = package_loop_reports(EDGES)
    assert not problems, "package loops:\n" + "\n".join(problems)


def test_package_inits_import_their_own_modules_only_and_call_nothing():
    problems = init_side_effects()
    assert not problems, "package __init__ side effects:\n" + "\n".join(problems)


PLANTED = {  # a package loop without a module circle, and an __init__ that registers configs when imported
    "zoo/__init__.py": '"""The facade."""\n',
    "zoo/hydra_schema.py": "",
    "zoo/evaluation/__init__.py": dedent('''\
        """Allowed: the standard library, its own modules, builtins, a lazy re-export."""
        from typing import Any

        from zoo.evaluation.callback import on_fit_end

        __all__ = sorted(["on_fit_end"])


        def __getattr__(name: str) -> Any:
            import zoo.hydra_schema
            return getattr(zoo.hydra_schema, name)
        '''),
    "zoo/evaluation/callback.py": "def on_fit_end():\n    from zoo.training.sharding import whole_model\n",
    "zoo/training/__init__.py": dedent('''\
        """Registers on import."""

        import lightning
        import zoo.hydra_schema
        from zoo.training.options import register

        register()


        @register
        def hook():
            register()
        '''),
    "zoo/training/options.py": "def register(f=None):\n    return f\n",
    "zoo/training/sharding.py": "import torch\n",
    "zoo/training/callbacks.py": "from zoo.evaluation.callback import on_fit_end\n",
}


def test_the_checks_find_a_planted_package_loop_and_init_side_effects(tmp_path):
    """A planted tree: zoo.evaluation.callback imports zoo.training.sharding (deferred) while
    zoo.training.callbacks imports the callback: no module imports itself back, the packages do. And
    zoo/training/__init__.py imports Lightning and zoo.hydra_schema and registers, on import."""
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = module_files(tmp_path)
    edges = import_edges(modules, tmp_path)
    assert circle_reports(edges) == []  # what the module-level check sees
    assert package_loop_reports(edges, modules) == [
        "zoo.evaluation <-> zoo.training:\n    zoo/evaluation/callback.py:2 imports zoo.training.sharding"
        "\n    zoo/training/callbacks.py:1 imports zoo.evaluation.callback"]
    assert init_side_effects(modules, tmp_path) == [
        "zoo/training/__init__.py:3: zoo.training imports lightning when imported",
        "zoo/training/__init__.py:4: zoo.training imports zoo.hydra_schema when imported",
        "zoo/training/__init__.py:7: zoo.training calls register when imported",
        "zoo/training/__init__.py:10: zoo.training calls register when imported"]
