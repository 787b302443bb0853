"""The summary an events file writes for a job's requirements has the keys the docs name."""

from __future__ import annotations

import json
from pathlib import Path

from nucleo_trio.admission import CountingGate
from nucleo_trio.jobs import JobRequirements
from nucleo_trio.observability.jsonl import _requirements_data

KEYS = [
    "requires_queueing",
    "requires_http",
    "requires_transaction",
    "read_only",
    "rate_limiters",
    "databases",
    "model_bindings",
    "memory_bytes",
]

GUIDE = Path(__file__).parent.parent / "docs" / "guide" / "events-json.md"


def test_the_summary_has_the_documented_keys_and_values() -> None:
    gate = CountingGate("gpu", 4)
    declared = (
        JobRequirements()
        .require_rate_limiter(gate, 2)
        .require_database("orders")
        .require_memory("1MiB")
    )
    summary = json.loads(json.dumps(_requirements_data(declared)))
    assert list(summary) == KEYS
    assert summary["rate_limiters"] == [{"limiter": "gpu", "amount": 2}]
    assert summary["databases"] == ["orders"]
    assert summary["memory_bytes"] == 1024 * 1024
    assert summary["model_bindings"] == []
    assert (summary["requires_queueing"], summary["requires_http"]) == (True, False)


def test_the_reference_and_the_guide_name_every_key() -> None:
    doc = JobRequirements.__doc__ or ""
    guide = GUIDE.read_text(encoding="utf-8")
    for key in KEYS:
        assert f"``{key}``" in doc, key
        assert f"`{key}`" in guide, key
