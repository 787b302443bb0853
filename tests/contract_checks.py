"""What the contract-suite tests read of a contract class: each check's docstring and the first
line of its body (where the rule ids it holds are named in a comment)."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType


def checks_of(module: ModuleType, class_name: str) -> list[tuple[str, str, str]]:
    """``(name, docstring, first body line)`` of every ``test_`` method of ``class_name`` in
    ``module``, in source order."""
    source = inspect.getsource(module)
    (body,) = (
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == class_name
    )
    lines = source.splitlines()
    return [
        (node.name, ast.get_docstring(node) or "", lines[node.body[0].end_lineno or 0].strip())
        for node in body.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    ]
