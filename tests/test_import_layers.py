"""The package's import graph: no cycles at module level, and none held together inside functions.

A cycle between modules works only while every module in it happens to be imported in one
order; a function-level import that exists to dodge one hides it until a caller imports the
other side first. These tests read the source (``ast``), so they see every import whether or
not it runs, and name the modules and lines at fault.

Importing ``a.b.c`` runs ``a/b/__init__.py`` first, and the package ``__init__`` files re-export
their submodules, so two packages could need each other with no cycle between modules. LAYERS,
at the end, declares the packages' order; the tests there hold every package-level import
(``__init__`` loads included) to it, so no package cycle can form. Each module is also
imported first, in a fresh interpreter, to show no import order breaks.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
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
    """Every import statement inside a function or method, with that function's name (an
    import in a nested function is listed under each function around it)."""
    found: list[tuple[str, ast.ImportFrom | ast.Import]] = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.append((function.name, node))
    return found


def _function_level(module: str, tree: ast.Module, is_package: bool) -> dict[int, set[str]]:
    """The package's own modules imported inside functions of ``module``, by line."""
    found: dict[int, set[str]] = {}
    for _, node in _in_functions(tree):
        targets = _imports(module, node, is_package) - {module}
        if targets:
            found.setdefault(node.lineno, set()).update(targets)
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


def _with_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """``edges`` plus what importing a submodule also runs: each package around it (below the
    root package, which every import runs first anyway), unless the importer is inside it."""
    found: dict[str, set[str]] = {}
    for name, targets in edges.items():
        found[name] = set(targets)
        for target in targets:
            parts = target.split(".")
            for end in range(2, len(parts)):
                package = ".".join(parts[:end])
                if name != package and not name.startswith(package + "."):
                    found[name].add(package)
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
    # and the ones that took jobs.context's, jobs.job's, jobs.requirements' and bus.events'
    # imports out of their functions: the events take a job's snapshot and a heartbeat's mint
    # from leaf modules (_job_snapshot, _heartbeat_mint), a job its scope guard from _scope,
    # and the requirements check a model binding against the ModelClaim it extends.
    ("nucleo_trio.bus.events", "nucleo_trio.jobs"),
    ("nucleo_trio.bus.events", "nucleo_trio.heartbeat"),
    ("nucleo_trio.jobs.job", "nucleo_trio.guardrails"),
    ("nucleo_trio.jobs.requirements", "nucleo_trio.models"),
]


def test_the_broken_cycles_stay_broken() -> None:
    """No module of BROKEN_CYCLES' first names imports the second, at module level or in a
    function."""
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


# The function-level imports of the package's own modules that stay, by importing module and
# the module it may import that way (with that module's submodules), each with its reason: why
# it is not a cycle dodged inside a function, or which cycle it still dodges.
ALLOWED_IN_FUNCTIONS: dict[tuple[str, str], str] = {
    ("nucleo_trio.cli", "nucleo_trio"): (
        "a subcommand imports what it runs only when it runs (the module's docstring), so one "
        "broken subcommand cannot take the others down; only __main__ imports the CLI, so no "
        "cycle can run through it"
    ),
}


def _allowed(importer: str, target: str) -> tuple[str, str] | None:
    """The ALLOWED_IN_FUNCTIONS entry that lets ``importer`` import ``target`` in a function."""
    for module, allowed in ALLOWED_IN_FUNCTIONS:
        if importer == module and (target == allowed or target.startswith(allowed + ".")):
            return module, allowed
    return None


def _function_level_imports() -> dict[str, dict[int, set[str]]]:
    found: dict[str, dict[int, set[str]]] = {}
    for name, (path, is_package) in sorted(MODULES.items()):
        lines = _function_level(name, ast.parse(path.read_text()), is_package)
        if lines:
            found[name] = lines
    return found


def test_no_function_level_import_of_the_package() -> None:
    """A function inside nucleo_trio imports one of the package's own modules only where
    ALLOWED_IN_FUNCTIONS says why. Everything else is imported at module level (or under
    TYPE_CHECKING when only annotations need it), where the graph checks above see it."""
    offending = [
        f"{MODULES[name][0].relative_to(PACKAGE.parent)}:{line} imports {sorted(unexplained)}"
        for name, lines in _function_level_imports().items()
        for line, targets in sorted(lines.items())
        if (unexplained := {t for t in targets if _allowed(name, t) is None})
    ]
    assert offending == []


def test_every_allowed_function_level_import_is_still_there() -> None:
    """An ALLOWED_IN_FUNCTIONS entry that no import needs any more is taken out of the list, so
    the list names only what the package does."""
    used = {
        _allowed(name, target)
        for name, lines in _function_level_imports().items()
        for targets in lines.values()
        for target in targets
    }
    assert sorted(set(ALLOWED_IN_FUNCTIONS) - used) == []


def test_the_function_level_check_sees_an_import_in_any_function() -> None:
    """The check itself: it finds the package's modules imported in a function, in a method and
    in a function nested in one, relative imports resolved, and nothing imported at module
    level, under TYPE_CHECKING or from outside the package."""
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        import json
        import nucleo_trio.errors
        if TYPE_CHECKING:
            from nucleo_trio.bus import events
        def publish():
            from ..bus.events import JobProgressEvent
            import json
        class Handle:
            def result(self):
                def inner():
                    from . import state
                return inner
        """
    )
    found = _function_level("nucleo_trio.jobs.context", ast.parse(source), is_package=False)
    assert found == {8: {"nucleo_trio.bus.events"}, 13: {"nucleo_trio.jobs.state"}}


# Run in a fresh interpreter: imports each module it is given as the first of its package to
# load (none of the package's modules loaded, the package itself standing empty so its own
# __init__ decides no order), and prints the ones that failed, with their errors, as JSON.
_IMPORT_EACH_FIRST = """
import importlib, importlib.util, json, sys, types

search, package, *names = sys.argv[1:]
sys.path.insert(0, search)
spec = importlib.util.find_spec(package)
failures = {}
for name in names:
    for loaded in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[loaded]
    root = types.ModuleType(package)
    root.__path__ = list(spec.submodule_search_locations)
    sys.modules[package] = root
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
"""


def _failures_importing_each_first(search: Path, package: str, names: list[str]) -> object:
    """What :data:`_IMPORT_EACH_FIRST` reports for ``names``, ``package`` found on ``search``."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FIRST, str(search), package, *names],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_each_module_of_a_cycle_through_package_inits_imports_first() -> None:
    """Every module on a cycle that runs through package ``__init__`` files imports when it is
    the first of the package to load, so no order of the ``__init__`` imports breaks it.

    nucleo_trio's own ``__init__`` loads its subpackages in one fixed order; the check leaves it
    out and enters each cycle at each of its members, as a reordered ``__init__`` could. A
    module on no such cycle cannot be part-way loaded when one of the cycle's is imported, so
    these are all the entries there are.
    """
    members = sorted({name for cycle in _cycles(_with_packages(_graph())) for name in cycle})
    assert _failures_importing_each_first(PACKAGE.parent, "nucleo_trio", members) == {}


def test_the_first_import_check_sees_a_name_read_from_a_module_still_loading(
    tmp_path: Path,
) -> None:
    """The check itself: in a made-up package whose ``a`` defines ``A`` and then imports
    ``b``, which reads ``A``, importing ``a`` first works and importing ``b`` first fails."""
    package = tmp_path / "made_up"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("A = 1\nfrom .b import B\n")
    (package / "b.py").write_text("from .a import A\nB = 2\n")
    failures = _failures_importing_each_first(tmp_path, "made_up", ["made_up.a", "made_up.b"])
    assert isinstance(failures, dict)
    assert list(failures) == ["made_up.b"]
    assert "partially initialized module 'made_up.b'" in failures["made_up.b"]


def test_the_package_edges_follow_a_submodule_import_to_its_packages() -> None:
    """The graph that finds the cycles through ``__init__`` files: importing ``p.q.r`` also runs
    ``p.q``, except from inside ``p.q`` itself; the root package adds no edge."""
    edges = {"root.p.q": {"root.p.q.r"}, "root.p.q.s": {"root.p.q.r"}, "root.x": {"root.p.q.r"}}
    assert _with_packages(edges) == {
        "root.p.q": {"root.p.q.r"},
        "root.p.q.s": {"root.p.q.r"},
        "root.x": {"root.p.q.r", "root.p", "root.p.q"},
    }


# The package's layers, bottom up: a package imports (at module level, __init__ loads included)
# only from its own layer or the ones below. Within a layer packages may use one another as
# long as the package graph stays free of cycles (checked below too). The private top-level
# modules are helpers for everything above the errors.
LAYERS: list[set[str]] = [
    {"errors"},
    {
        "_amounts",
        "_bounded_json",
        "_clock",
        "_heartbeat_mint",
        "_job_snapshot",
        "_lazy",
        "_plugin_errors",
        "_progress",
        "_redact",
        "_scope",
        "_serialization",
        "_sqlite_writer",
        "_watch",
    },
    {"admission"},
    {"bus"},
    {"jobs"},
    {"guardrails", "resources", "http"},
    {"heartbeat", "models"},
    {"observability"},
    {"tools"},
    {"llm"},
    {"plugins"},
    {"dispatch"},
    {"testing", "_demo", ""},
    {"cli", "__main__"},
]


def _package(module: str) -> str:
    """The top-level part of nucleo_trio a module belongs to (``""`` for the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _package_edges() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for importer, targets in _with_packages(_graph()).items():
        for target in targets:
            edge = (_package(importer), _package(target))
            if edge[0] != edge[1]:
                found.setdefault(edge, []).append(f"{importer} -> {target}")
    return found


def test_every_package_has_a_layer() -> None:
    """Each part of nucleo_trio is in exactly one of LAYERS, and every name there exists."""
    parts = {_package(name) for name in MODULES}
    listed = [name for layer in LAYERS for name in layer]
    assert sorted(parts - set(listed)) == [], "a package with no layer: add it to LAYERS"
    assert sorted(set(listed) - parts) == [], "a layer names what no longer exists"
    assert len(listed) == len(set(listed)), "a package listed in two layers"


def test_no_package_imports_from_a_layer_above_it() -> None:
    """A module imports no module of a package in a higher layer (what a submodule import runs
    of the packages around it counts): the layers are the package's real order."""
    layer = {name: height for height, names in enumerate(LAYERS) for name in names}
    upward = [
        f"{importer} ({layer[importer]}) -> {imported} ({layer[imported]}): {why[0]}"
        for (importer, imported), why in sorted(_package_edges().items())
        if layer.get(importer, 0) < layer.get(imported, 0)
    ]
    assert upward == []


def test_no_cycle_between_packages() -> None:
    """Packages of one layer may use each other, but never both ways round."""
    edges: dict[str, set[str]] = {}
    for importer, imported in _package_edges():
        edges.setdefault(importer, set()).add(imported)
        edges.setdefault(imported, set())
    assert _cycles(edges) == []
