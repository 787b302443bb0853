"""The documentation site holds together: every page is in the nav, and every hook and every
exported name has an entry in the API reference.

The site itself is built by ``mkdocs build --strict`` (in ``.ci/run``); these checks only read
``mkdocs.yml`` and the markdown, so they run in well under a second and name what is missing
instead of failing a build with a warning.

**What counts as a reference entry.** The reference is the pages under ``docs/reference/``. A
name has an entry when one of them holds an mkdocstrings directive for it: a line
``::: dotted.path`` whose path is the name at one of the public places it is exported from (a
class re-exported by ``nucleo_trio.jobs`` and by ``nucleo_trio`` is documented once, under either
path), or a directive for its module whose ``options: members:`` list names it. A directive
whose path imports nothing is an error too: it is a reference to a name that was renamed or
removed.

**What counts as exported.** The ``__all__`` of ``nucleo_trio``, of each of its public
subpackages, of its public top-level modules (``nucleo_trio.errors``, ``nucleo_trio.http``,
``nucleo_trio.cli``), of the modules in ``EXTRA_PUBLIC_MODULES`` (public modules that their
package does not re-export), and of each plugin package under ``plugins/``. The hooks are the
stubs in ``nucleo_trio/plugins/hookspecs.py`` marked with the project's hookspec marker.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import nucleo_trio
from nucleo_trio.plugins import hookspecs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
MKDOCS_YML = ROOT / "mkdocs.yml"

# Public modules whose names their package does not re-export, and which the guide tells users to
# import from by their own path.
EXTRA_PUBLIC_MODULES = ("nucleo_trio.testing.pytest_plugin",)

# An mkdocstrings directive: `::: identifier`, then its indented YAML options, if any.
DIRECTIVE = re.compile(
    r"^::: *(?P<identifier>\S+) *\n(?P<options>(?:[ \t]+\S.*\n?|[ \t]*\n)*)", re.M
)
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)


def _load_mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert isinstance(config, dict), "mkdocs.yml is not a mapping"
    return config


def _nav_files(entry: object) -> Iterator[str]:
    """The markdown files a nav entry (a string, a list, or a one-key mapping) lists."""
    if isinstance(entry, str):
        if "://" not in entry:
            yield entry
    elif isinstance(entry, list):
        for item in entry:
            yield from _nav_files(item)
    elif isinstance(entry, dict):
        for value in entry.values():
            yield from _nav_files(value)


def _python_handler_options(config: dict[str, Any]) -> dict[str, Any]:
    for plugin in config.get("plugins", []):
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            handler: dict[str, Any] = plugin["mkdocstrings"]["handlers"]["python"]
            return handler
    raise AssertionError("mkdocs.yml configures no mkdocstrings python handler")


def _plugin_packages() -> dict[str, Path]:
    """The import packages of the plugin distributions under plugins/, each with its
    distribution's directory: plugins/<distribution>/<package>/__init__.py."""
    found = {}
    for init in sorted(ROOT.glob("plugins/*/*/__init__.py")):
        package = init.parent
        if not package.name.startswith(("_", ".")) and package.name.isidentifier():
            found[package.name] = package.parent
    return found


def _import_plugin(name: str, distribution: Path) -> ModuleType:
    """Import a plugin package, from its directory when it is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
    sys.path.insert(0, str(distribution))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(distribution))


def public_modules() -> dict[str, ModuleType]:
    """Every module whose ``__all__`` the reference must cover, by name."""
    modules: dict[str, ModuleType] = {"nucleo_trio": nucleo_trio}
    for info in pkgutil.walk_packages(nucleo_trio.__path__, "nucleo_trio."):
        parts = info.name.split(".")[1:]
        if any(part.startswith("_") for part in parts):
            continue
        if info.ispkg or len(parts) == 1:
            modules[info.name] = importlib.import_module(info.name)
    for name in EXTRA_PUBLIC_MODULES:
        modules[name] = importlib.import_module(name)
    for name, distribution in _plugin_packages().items():
        modules[name] = _import_plugin(name, distribution)
    return modules


_VALUES = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset)


def _key(name: str, obj: object) -> tuple[int, str]:
    """What makes two exports the same thing: the object, and for a plain value (which Python
    may share between unrelated constants, such as two that are both 10) also the name."""
    return (id(obj), name if isinstance(obj, _VALUES) else "")


def exported_names() -> dict[str, set[str]]:
    """Each exported name, as ``module.name`` at its first public place, with every public path
    at which the same object is exported (any one of them is a valid reference entry)."""
    modules = public_modules()
    places: dict[tuple[int, str], set[str]] = {}
    first: dict[tuple[int, str], str] = {}
    keep_alive = []  # ids are only unique among live objects
    for module_name, module in modules.items():
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{module_name} has no __all__"
        for name in exported:
            obj = getattr(module, name)
            keep_alive.append(obj)
            key = _key(name, obj)
            paths = places.setdefault(key, set())
            paths.add(f"{module_name}.{name}")
            if inspect.ismodule(obj):
                paths.add(obj.__name__)
            elif inspect.isclass(obj) or inspect.isfunction(obj):
                paths.add(f"{obj.__module__}.{obj.__qualname__}")  # where it is defined
            first.setdefault(key, f"{module_name}.{name}")
    return {first[key]: paths for key, paths in places.items()}


def reference_directives() -> dict[str, list[str]]:
    """Each identifier named by a ``:::`` directive in docs/reference/, with the pages (and
    lines) that name it; a ``members:`` list under a directive adds ``identifier.member``."""
    found: dict[str, list[str]] = {}
    for page in sorted(REFERENCE.rglob("*.md")):
        text = FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), page.read_text("utf-8"))
        for match in DIRECTIVE.finditer(text):
            identifier = match.group("identifier")
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            found.setdefault(identifier, []).append(where)
            options = yaml.safe_load(match.group("options") or "") or {}
            members = (options.get("options") or {}).get("members")
            if isinstance(members, list):
                for member in members:
                    found.setdefault(f"{identifier}.{member}", []).append(where)
    return found


_NOTHING = object()


def _load(identifier: str) -> object:
    """What ``identifier`` names (a module, or an attribute of one), or ``_NOTHING``."""
    parts = identifier.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute, _NOTHING)
            if obj is _NOTHING:
                break
        return obj
    return _NOTHING


def _shadowed(identifier: str) -> bool:
    """Whether ``identifier`` is a submodule's name while its package exports something else
    under the same name (a module ``tool`` beside an exported function ``tool``)."""
    parent, _, last = identifier.rpartition(".")
    try:
        if not parent or importlib.util.find_spec(identifier) is None:
            return False
    except (ImportError, ValueError):
        return False
    exported = getattr(importlib.import_module(parent), last, None)
    return not inspect.ismodule(exported)


def hook_names() -> list[str]:
    """The hooks: the stubs in hookspecs.py that carry the project's hookspec marker."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return sorted(
        name
        for name, obj in vars(hookspecs).items()
        if inspect.isfunction(obj) and hasattr(obj, marker)
    )


def test_every_page_under_docs_is_in_the_nav_and_every_nav_entry_exists() -> None:
    """A page left out of ``nav`` is built but unreachable (and ``--strict`` refuses it); a nav
    entry without its page is a broken link in the site's menu."""
    config = _load_mkdocs_config()
    listed = list(_nav_files(config.get("nav", [])))
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    missing = [page for page in pages if page not in listed]
    assert not missing, "pages under docs/ missing from mkdocs.yml's nav: " + ", ".join(
        f"docs/{page}" for page in missing
    )
    absent = [entry for entry in listed if not (DOCS / entry).is_file()]
    assert not absent, "mkdocs.yml's nav lists pages that do not exist: " + ", ".join(absent)
    twice = sorted({entry for entry in listed if listed.count(entry) > 1})
    assert not twice, "mkdocs.yml's nav lists a page twice: " + ", ".join(twice)


def test_the_readme_and_the_docs_index_link_every_page_of_the_guide() -> None:
    """A reader starts at the README or at docs/index.md; each links every guide page and every
    top-level page of docs/ (the reference pages are reached from docs/reference/index.md)."""
    pages = sorted([*DOCS.glob("*.md"), *DOCS.glob("guide/*.md")])
    for start, base in ((ROOT / "README.md", ROOT), (DOCS / "index.md", DOCS)):
        text = FENCE.sub("", start.read_text(encoding="utf-8"))
        linked = {
            (base / target).resolve()
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text)
        }
        unlinked = [
            str(page.relative_to(ROOT))
            for page in pages
            if page.resolve() not in linked and page.resolve() != start.resolve()
        ]
        assert not unlinked, f"{start.relative_to(ROOT)} does not link: " + ", ".join(unlinked)


def test_every_exported_name_has_a_reference_entry() -> None:
    """Every name in a public ``__all__`` has a ``:::`` directive in docs/reference/ under one
    of the public paths it is exported at; the failure lists each missing one."""
    documented = reference_directives()
    missing = sorted(
        f"{name}  (exported as {', '.join(sorted(paths))})"
        for name, paths in exported_names().items()
        if not paths & documented.keys()
    )
    assert not missing, (
        f"{len(missing)} exported name(s) have no entry in docs/reference/ "
        "(add a `::: path` line to the page of its package):\n  " + "\n  ".join(missing)
    )


def test_the_reference_index_links_every_name_the_package_itself_exports() -> None:
    """docs/reference/index.md links every reference page, and lists what ``from nucleo_trio
    import ...`` offers, each name a link to its entry, so a name added to
    ``nucleo_trio.__all__`` is added there too."""
    index = (REFERENCE / "index.md").read_text(encoding="utf-8")
    pages = {path.name for path in REFERENCE.glob("*.md")} - {"index.md"}
    unlinked_pages = sorted(page for page in pages if f"]({page})" not in index)
    assert not unlinked_pages, "reference pages not in docs/reference/index.md's table: " + (
        ", ".join(unlinked_pages)
    )
    unlisted = [name for name in nucleo_trio.__all__ if f"[`{name}`]" not in index]
    assert not unlisted, (
        "names of nucleo_trio.__all__ not linked from docs/reference/index.md: "
        + (", ".join(unlisted))
    )


def test_every_cross_reference_names_a_reference_entry() -> None:
    """A cross-reference (``[text][nucleo_trio.jobs.Tool]``) resolves only to an identifier a
    directive renders; any other is a dead link, which ``--strict`` refuses."""
    documented = reference_directives()
    dangling = []
    for page in sorted(DOCS.rglob("*.md")):
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\[([A-Za-z_][\w.]*\.[\w.]+)\]", text):
            if target not in documented:
                dangling.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not dangling, "cross-references to names with no entry:\n  " + "\n  ".join(dangling)


def test_every_hook_has_a_reference_entry_and_a_section_in_the_plugin_guide() -> None:
    """Each hook is documented twice: its stub's docstring in the reference, and a section of
    docs/plugins.md (a heading that names it) that says when it is called and how to answer."""
    documented = reference_directives()
    hooks = hook_names()
    assert hooks, "found no hooks in nucleo_trio.plugins.hookspecs"
    no_entry = [
        hook
        for hook in hooks
        if not {f"nucleo_trio.plugins.hookspecs.{hook}", f"nucleo_trio.plugins.{hook}"}
        & documented.keys()
    ]
    assert not no_entry, "hooks with no `::: nucleo_trio.plugins.hookspecs.NAME` entry in " + (
        "docs/reference/: " + ", ".join(no_entry)
    )
    guide = (DOCS / "plugins.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#+ +(.+?) *$", FENCE.sub("", guide), re.M)
    no_section = [hook for hook in hooks if not any(hook in heading for heading in headings)]
    assert not no_section, "hooks with no heading in docs/plugins.md: " + ", ".join(no_section)


def test_every_reference_directive_names_something_that_exists_once() -> None:
    """A directive for a renamed or removed name, or the same name documented twice (two
    anchors for one object), is an error here rather than a failed build."""
    documented = reference_directives()
    unknown = sorted(
        f"{identifier} ({', '.join(places)})"
        for identifier, places in documented.items()
        if _load(identifier) is _NOTHING
    )
    assert not unknown, "reference entries that name nothing importable:\n  " + "\n  ".join(unknown)
    # griffe, like the import system, finds a submodule before an attribute of the same name:
    # a module `pkg.tool` beside an exported function `pkg.tool` would render the module.
    shadowed = sorted(
        f"{identifier} ({', '.join(places)})"
        for identifier, places in documented.items()
        if _shadowed(identifier)
    )
    assert not shadowed, (
        "entries that name a function or class by a path that is also a module (use the path "
        "where it is defined, module.name):\n  " + "\n  ".join(shadowed)
    )
    by_object: dict[tuple[int, str], list[str]] = {}
    keep_alive = []  # ids are only unique among live objects
    for identifier, places in documented.items():
        obj = _load(identifier)
        keep_alive.append(obj)
        key = _key(identifier.rpartition(".")[2], obj)
        by_object.setdefault(key, []).extend(f"{identifier} ({place})" for place in places)
    twice = sorted(", ".join(entries) for entries in by_object.values() if len(entries) > 1)
    assert not twice, "objects documented more than once:\n  " + "\n  ".join(twice)


def test_every_dotted_name_in_the_reference_prose_still_exists() -> None:
    """The prose of the reference pages names modules (``(`nucleo_trio.admission.demand`)``)
    and objects; after a move or a rename each must still import."""
    stale = []
    for page in sorted(REFERENCE.rglob("*.md")):
        text = DIRECTIVE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
        for name in re.findall(r"`((?:nucleo_trio|nucleo_trio_\w+)(?:\.\w+)*)`", text):
            if _load(name) is _NOTHING:
                stale.append(f"{page.relative_to(ROOT)}: {name}")
    assert not stale, "names in the reference's prose that no longer exist:\n  " + "\n  ".join(
        stale
    )


def test_the_reference_builds_from_every_plugin_package() -> None:
    """mkdocstrings finds a plugin package only through the python handler's ``paths``: each
    plugin distribution under plugins/ must be listed there."""
    paths = _python_handler_options(_load_mkdocs_config()).get("paths", [])
    resolved = {(ROOT / path).resolve() for path in paths}
    unlisted = [
        f"{name} ({distribution.relative_to(ROOT)})"
        for name, distribution in _plugin_packages().items()
        if distribution.resolve() not in resolved
    ]
    assert not unlisted, (
        "plugin packages the reference cannot load (add their directory to the mkdocstrings "
        "python handler's `paths` in mkdocs.yml): " + ", ".join(unlisted)
    )


def test_every_example_is_shown_on_the_examples_page() -> None:
    """docs/examples.md includes each program of examples/ in full (pymdownx.snippets), so the
    site shows the examples the guide refers to."""
    page = (DOCS / "examples.md").read_text(encoding="utf-8")
    included = set(re.findall(r'^--8<-- "(examples/[^"]+)"$', page, re.M))
    programs = {f"examples/{path.name}" for path in (ROOT / "examples").glob("*.py")}
    assert programs <= included, "examples not shown on docs/examples.md: " + ", ".join(
        sorted(programs - included)
    )
    assert included <= programs, "docs/examples.md includes what does not exist: " + ", ".join(
        sorted(included - programs)
    )


def test_no_link_in_the_docs_leaves_the_site() -> None:
    """A relative link out of docs/ (into ../examples, say) works on GitHub but not on the
    site; link to the page that shows the file, or name its path as code."""
    leaving = []
    for page in sorted(DOCS.rglob("*.md")):
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.is_relative_to(DOCS.resolve()):
                leaving.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not leaving, "links that leave docs/:\n  " + "\n  ".join(leaving)


@pytest.mark.parametrize(
    ("markdown", "identifiers"),
    [
        ("::: a.b.C\n", {"a.b.C"}),
        (
            "::: a.b\n    options:\n      members:\n        - C\n        - D\n",
            {"a.b", "a.b.C", "a.b.D"},
        ),
        ("```text\n::: a.b.C\n```\n", set()),
        ("text ::: a.b.C\n", set()),
    ],
)
def test_what_counts_as_a_directive(
    markdown: str, identifiers: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directive is a line that starts with ``:::``; its ``members`` list counts; a fenced
    block showing one does not."""
    (tmp_path / "page.md").write_text(markdown, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REFERENCE", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert set(reference_directives()) == identifiers


def _rst_docstrings() -> ModuleType:
    """docs_tools/rst_docstrings.py, the griffe extension mkdocs.yml loads by path."""
    path = ROOT / "docs_tools" / "rst_docstrings.py"
    spec = importlib.util.spec_from_file_location("rst_docstrings", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("rst", "markdown"),
    [
        ("See :class:`Tool`.", "See `Tool`."),
        ("See :class:`~nucleo_trio.jobs.Tool`.", "See `Tool`."),
        ("See :py:meth:`the handle <JobHandle.result>`.", "See `the handle`."),
        ("``literal`` stays", "``literal`` stays"),
        (
            "Read `pluggy <https://pluggy.readthedocs.io>`_ first",
            "Read [pluggy](https://pluggy.readthedocs.io) first",
        ),
        ("Like this::\n\n    code", "Like this:\n\n    code"),
        ("Like this:\n\n::\n\n    code", "Like this:\n\n\n    code"),
        (
            "Build one:\n>>> x = 1\n>>> x\n1\n\nDone.",
            "Build one:\n\n```pycon\n>>> x = 1\n>>> x\n1\n```\n\nDone.",
        ),
    ],
)
def test_the_docstring_extension_turns_sphinx_habits_into_markdown(rst: str, markdown: str) -> None:
    """What the reference shows for each reStructuredText habit of the docstrings."""
    assert _rst_docstrings().markdown_from_rst(rst) == markdown


def test_the_docstring_extension_links_a_role_whose_target_it_resolves() -> None:
    """A resolved role is an optional cross-reference (a link when the site documents the
    target, plain code when not); an unresolved one is code."""
    known = {"nucleo_trio.jobs.Tool": "nucleo_trio.jobs.job.Tool"}
    text = _rst_docstrings().markdown_from_rst(
        "A :class:`~nucleo_trio.jobs.Tool` or a :class:`Missing`.", known.get
    )
    assert text == (
        'A <autoref identifier="nucleo_trio.jobs.job.Tool" optional><code>Tool</code></autoref>'
        " or a `Missing`."
    )
