"""Names a package re-exports from modules it imports only when one of them is first used.

A plugin's entry point is loaded in every process that opens a dispatcher; a package whose
``__init__`` imports a vendor SDK at the top makes each of them pay seconds for an SDK it may
never call. Such a package lists the SDK-backed names here instead, and declares them under
``TYPE_CHECKING`` for the type checker::

    __getattr__ = lazy_exports(__name__, {"Client": ".client"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], *, public_module: bool = False
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``where[name]`` (a module path,
    relative to the package when it starts with a dot) the first time ``name`` is asked for,
    and keeps the value in the package's namespace so the next lookup is a plain one.

    With ``public_module``, the first lookup imports every module in ``where`` at once and
    names each class among the values as the package's (its ``__module__``), so classes print
    and serialize under the name users import them by, whichever is reached first.
    """
    namespace = sys.modules[package].__dict__

    def load(name: str) -> Any:
        return getattr(importlib.import_module(where[name], package), name)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for wanted in where if public_module else (name,):
            value = load(wanted)
            if public_module and isinstance(value, type):
                value.__module__ = package
            namespace[wanted] = value
        return namespace[name]

    return __getattr__
