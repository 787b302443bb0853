"""A Starlette service on hypercorn's trio worker: one dispatcher, a job tree per request.

Needs ``pip install hypercorn starlette``. Serve it with ``hypercorn --worker-class trio
examples.web_service:app`` from the repository root; run as a program, it serves itself on a
free loopback port for three requests. docs/guide/web-service.md explains each part.
"""

import math
import sys
from collections import Counter
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import trio

from nucleo_trio.admission import CountingGate
from nucleo_trio.bus.events import JobScheduled, TerminalEvent
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import JobContext, JobRequirements, Orchestrator, workflow
from nucleo_trio.tools import function_tool

try:
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse
except ModuleNotFoundError as missing:  # one line saying what to install, not a traceback
    sys.exit(f"{missing.name} is missing: pip install hypercorn starlette")

slots = CountingGate("lookups", 8)  # shared by the lookups of every request


@function_tool(timeout=90, requirements=JobRequirements().require_rate_limiter(slots))
async def lookup(context: JobContext, item: int, seconds: float) -> int:
    with trio.CancelScope() as wait:
        context.on_cancel(wait.cancel)  # a cancel of the job ends the wait at once
        await trio.sleep(seconds)  # a stand-in for a query or an HTTP call
    context.check_cancellation()
    return item * item


class Quote(Orchestrator[int]):
    def __init__(self, items: int, seconds: float) -> None:
        super().__init__(workflow("web", "quote"))
        self.items, self.seconds = items, seconds

    async def execute(self, context: JobContext) -> int:
        handles = [self.submit(lookup(self, item, self.seconds)) for item in range(self.items)]
        return sum([await handle.result() for handle in handles])


def cancel_on_disconnect(app: Any) -> Any:
    """Middleware: hypercorn tells an app that its client went away with an ``http.disconnect``
    message, and does not cancel the request; this cancels the request's handler then. Ctrl-C
    is kept out of requests: it reaches hypercorn's main task, whose stop is graceful."""

    @trio.lowlevel.enable_ki_protection
    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        to_app, inbox = trio.open_memory_channel[Any](math.inf)
        async with trio.open_nursery() as nursery:

            @trio.lowlevel.enable_ki_protection
            async def relay() -> None:
                while (message := await receive())["type"] != "http.disconnect":
                    to_app.send_nowait(message)
                nursery.cancel_scope.cancel()

            nursery.start_soon(relay)
            await app(scope, inbox.receive, send)
            nursery.cancel_scope.cancel()

    return middleware


async def quote(request: Request) -> JSONResponse:
    items, ms = request.path_params["items"], request.path_params["ms"]
    if not 1 <= items <= 32 or ms > 60_000:
        return JSONResponse({"error": "items must be 1 to 32 and ms 0 to 60000"}, 400)
    dispatcher, job = request.state.dispatcher, Quote(items, ms / 1000)
    handle = dispatcher.submit(job)
    try:
        return JSONResponse({"items": items, "total": await handle.result()})
    except UncorrectableError as exc:  # cancelled, timed out, refused by a stopping dispatcher
        return JSONResponse({"error": str(exc)}, 503)
    finally:
        if not handle.done:  # the client went away, or the server cancelled the request
            dispatcher.cancel_workflow(job.workflow_id, "the request was cancelled")


@asynccontextmanager
async def lifespan(app: Starlette) -> Any:
    jobs: Counter[str] = Counter()  # jobs submitted, and how each ended, as the bus told
    try:
        async with open_dispatcher() as dispatcher:
            on = dispatcher.bus.subscribe
            on(lambda _: jobs.update(["submitted"]), event_type=JobScheduled)
            on(lambda event: jobs.update([event.snapshot.state.name]), event_type=TerminalEvent)
            yield {"dispatcher": dispatcher, "jobs": jobs}
            await dispatcher.shutdown(timeout=10)  # the guide says why
    finally:  # however the service stops, every job has settled by now
        submitted = jobs.pop("submitted", 0)
        ended = ", ".join(f"{count} {state}" for state, count in jobs.items())
        print(f"settled {jobs.total()} of {submitted} jobs: {ended}", flush=True)


async def job_counts(request: Request) -> JSONResponse:
    return JSONResponse(request.state.jobs)


app = Starlette(lifespan=lifespan, middleware=[Middleware(cancel_on_disconnect)])
app.add_route("/quote/{items:int}/{ms:int}", quote)
app.add_route("/jobs", job_counts)


async def main() -> None:
    """Serves the app on a free loopback port for three requests, then stops it."""
    config, stop = Config(), trio.Event()
    config.bind = ["127.0.0.1:0"]
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(base_url=urls[0]) as client:
            for path in ("/quote/3/50", "/quote/99/50"):
                print(path, (await client.get(path)).text)
            with trio.move_on_after(0.5):  # a client that gives up on a minute's work
                await client.get("/quote/4/60000")
        stop.set()


if __name__ == "__main__":
    trio.run(main)
