"""Quickstart: a workflow root, two tools, one dependency.

``Fetch`` pretends to download a page; ``CountWords`` depends on it, so the dispatcher starts it
only once the page is there and hands it the page as its dependency result. Everything the
runtime did is told on the event bus; the program prints that trail at the end.

It needs nothing but nucleo_trio (``pip install -e .``). Run it from the repository root; it
finishes in well under a second on the real clock::

    python examples/quickstart.py
"""

from __future__ import annotations

import trio

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, Tool, workflow

PAGES = {"https://example.org/trio": "Trio makes structured concurrency pleasant to write"}


class Fetch(Tool[str]):
    """Download one page (here: read it from a dict after a short pause)."""

    def __init__(self, parent: Identifiable, url: str) -> None:
        super().__init__(parent)
        self.url = url
        self.timeout = 10.0  # seconds; a tool's default is 30 minutes

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(0.1)  # a stand-in for the network
        return PAGES[self.url]


class CountWords(Tool[int]):
    """Count the words of the page its one dependency fetched."""

    async def execute(self, context: JobContext) -> int:
        page: str = context.single_dependency_result()
        return len(page.split())


async def main() -> None:
    trail: list[ev.JobEvent] = []
    async with open_dispatcher() as dispatcher:
        dispatcher.bus.subscribe(trail.append, event_type=ev.LifecycleEvent)

        root = workflow("alice", "quickstart")  # the parent of every root job
        fetch = dispatcher.submit(Fetch(root, "https://example.org/trio"))
        count = dispatcher.submit(CountWords(root), dependencies=[fetch])

        print(f"page: {await fetch.result()!r}")
        print(f"words: {await count.result()}")

    # Leaving the block shut the dispatcher down, and the bus delivered everything published
    # before that, so the trail is complete here.
    print("events:")
    for event in trail:
        assert event.snapshot is not None  # lifecycle events always name their job
        print(f"  {event.snapshot.name:<10} {type(event).__name__:<17} {event.message or ''}")


if __name__ == "__main__":
    trio.run(main)
