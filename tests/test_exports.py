"""The public API: every exported name resolves, and the top level carries what a user imports."""

from __future__ import annotations

import importlib

import pytest

import nucleo_trio

PACKAGES = [
    "nucleo_trio",
    "nucleo_trio.admission",
    "nucleo_trio.bus",
    "nucleo_trio.dispatch",
    "nucleo_trio.jobs",
    "nucleo_trio.plugins",
    "nucleo_trio.resources",
    "nucleo_trio.errors",
    "nucleo_trio.guardrails",
    "nucleo_trio.heartbeat",
    "nucleo_trio.llm",
    "nucleo_trio.llm.clients",
    "nucleo_trio.models",
    "nucleo_trio.http",
    "nucleo_trio.observability",
    "nucleo_trio.testing",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(set(exported), key=exported.index), f"{name}.__all__ repeats a name"
    missing = [attr for attr in exported if not hasattr(module, attr)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_the_top_level_carries_a_first_program() -> None:
    for name in (
        "open_dispatcher",
        "workflow",
        "Tool",
        "Orchestrator",
        "JobRequirements",
        "CountingGate",
        "errors",
        "JobState",
    ):
        assert name in nucleo_trio.__all__
    assert (
        nucleo_trio.open_dispatcher
        is importlib.import_module("nucleo_trio.dispatch").open_dispatcher
    )


def test_the_package_ships_its_type_marker() -> None:
    from importlib.resources import files

    assert files("nucleo_trio").joinpath("py.typed").is_file()
