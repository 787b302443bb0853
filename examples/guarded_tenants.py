"""Guardrails and scope: a tenant-bound desk acting on what a model proposed.

``Desk`` is bound to the tenant ``acme`` by the ``TenantScoped`` marker. It reads a model's
proposed fetches (JSON) and submits a ``Fetch`` for each. The dispatcher's door refuses a
proposal that names another tenant before anything is scheduled; ``Fetch``'s own guards refuse a
URL that points into the network it runs in, and withhold a page that carries personal data.

Run it from the repository root; it needs only nucleo_trio, no network, and finishes at once::

    python examples/guarded_tenants.py
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.errors import GuardrailError
from nucleo_trio.guardrails import Direction, PIIDetectionGuardrail, TenantScoped, UrlGuardrail
from nucleo_trio.jobs import Doer, Identifiable, JobContext, Tool, workflow

PAGES = {
    "/pricing": "pricing: three plans, billed monthly",
    "/team": "team: write to jane.doe@acme.example",
}

MODEL_REPLY = json.dumps(
    [
        {"tenant_id": "acme", "url": "http://93.184.216.34/pricing"},
        {"tenant_id": "globex", "url": "http://93.184.216.34/pricing"},
        {"tenant_id": "acme", "url": "http://169.254.169.254/latest/meta-data"},
        {"tenant_id": "acme", "url": "http://93.184.216.34/team"},
    ]
)


@attrs.frozen
class Proposal(TenantScoped):
    """A fetch a model proposed; its tenant is a claim the door judges."""

    tenant_id: str
    url: str


class Fetch(Tool[str]):
    """Fetch one page (here: read it from a dict). Its guards judge the URL and the page."""

    runs = 0

    def __init__(self, parent: Identifiable, proposal: Proposal) -> None:
        super().__init__(parent)
        self.input = proposal
        self.timeout = 10.0

    def guarded_input_target(self) -> Any:
        return self.input.url  # the URL guard judges the address, the door the whole proposal

    def content_guardrails(self) -> list[Any]:
        return [UrlGuardrail(self), PIIDetectionGuardrail(self, Direction.OUTPUT)]

    async def execute(self, context: JobContext) -> str:
        Fetch.runs += 1
        return PAGES[self.input.url.split("93.184.216.34", 1)[-1]]


class Desk(Doer[list[str]], TenantScoped):
    """Works for one tenant; everything it submits is judged against that binding."""

    def __init__(self, parent: Identifiable, tenant_id: str) -> None:
        super().__init__(parent)
        self.tenant_id = tenant_id

    async def execute(self, context: JobContext) -> list[str]:
        handles = [
            self.submit_in_current_step(Fetch(self, Proposal(**p))) for p in json.loads(MODEL_REPLY)
        ]
        lines = []
        for number, handle in enumerate(handles, 1):
            try:
                lines.append(f"{number} fetched: {await handle.result()}")
            except GuardrailError as refusal:
                lines.append(f"{number} refused: {refusal}")
        return lines


async def main() -> None:
    async with open_dispatcher() as dispatcher:
        desk = Desk(workflow("alice", "desk"), "acme")
        for line in await dispatcher.submit(desk).result():
            print(line)
        print(f"Fetch ran {Fetch.runs} times; the desk is sealed to {desk.scope_guard}")


if __name__ == "__main__":
    trio.run(main)
