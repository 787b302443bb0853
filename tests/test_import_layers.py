"""The package's import graph: no cycles at module level, and none held together inside functions.

A cycle between modules works only while every module in it happens to be imported in one
order; a function-level import that exists to dodge one hides it until a caller imports the
other side first. These tests read the source (``ast``), so they see every import whether or
not it runs, and name the modules and lines at fault.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nucleo_trio

PACKAGE = Path(nucleo_trio.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> set[str]:
    """The nucleo_trio modules one import statement loads (the submodules it names, else the
    module or package it names; ``from . import sub`` only loads ``sub``)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in MODULES}
    target = _target(module, is_package, node)
    if not target.startswith("nucleo_trio"):
        return set()
    submodules = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
    if submodules and len(submodules) == len(node.names):
        return submodules
    return submodules | ({target} if target in MODULES else set())


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.dump(node.test)


def _module_level(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.Try | ast.If):
            found.extend(n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom))
    return found


def _in_functions(tree: ast.Module) -> list[tuple[str, ast.ImportFrom | ast.Import]]:
    found: list[tuple[str, ast.ImportFrom | ast.Import]] = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.append((function.name, node))
    return found


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, (path, is_package) in MODULES.items():
        for node in _module_level(ast.parse(path.read_text())):
            edges[name] |= _imports(name, node, is_package) - {name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_level_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    """The check itself: a made-up graph with a loop through three modules is reported."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


# The cycles issue 13 broke, each once held together by a function-level import: the first
# module must not import the second at all (a TYPE_CHECKING import for annotations is fine).
BROKEN_CYCLES = [
    ("nucleo_trio.models.runtime", "nucleo_trio.llm"),
    ("nucleo_trio.guardrails.kinds", "nucleo_trio.dispatch"),
    ("nucleo_trio.admission.memory_reader", "nucleo_trio.plugins"),
    ("nucleo_trio.heartbeat.store", "nucleo_trio.plugins"),
    ("nucleo_trio.models.catalog", "nucleo_trio.plugins"),
    ("nucleo_trio.jobs.context", "nucleo_trio.heartbeat"),
    ("nucleo_trio.errors", "nucleo_trio.jobs"),
]


def test_the_broken_cycles_stay_broken() -> None:
    offending: list[str] = []
    for importer, imported in BROKEN_CYCLES:
        names = [n for n in MODULES if n == importer or n.startswith(importer + ".")]
        assert names, f"{importer} no longer exists: update BROKEN_CYCLES"
        for name in names:
            path, is_package = MODULES[name]
            tree = ast.parse(path.read_text())
            nodes = [*_module_level(tree), *(node for _, node in _in_functions(tree))]
            for node in nodes:
                hits = {
                    t
                    for t in _imports(name, node, is_package)
                    if t == imported or t.startswith(imported + ".")
                }
                if hits:
                    offending.append(f"{path.name}:{node.lineno} imports {sorted(hits)}")
    assert offending == []
