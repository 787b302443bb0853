"""Tools written as functions: a coroutine function made into a job with ``@function_tool``.

This package sits above :mod:`nucleo_trio.jobs` and :mod:`nucleo_trio.guardrails`, since a
function tool declares both a job's knobs and its guards in one decorator.
"""

from .functions import (
    FunctionTool as FunctionTool,
    ToolDecorator as ToolDecorator,
    ToolFunction as ToolFunction,
    function_tool as function_tool,
)

__all__ = ["FunctionTool", "ToolDecorator", "ToolFunction", "function_tool"]
