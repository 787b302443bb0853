"""The app :mod:`benchmarks.web_service` serves: ``examples/web_service.py``'s parts with two
routes that differ only in the dispatcher.

``GET /one/{item}`` submits one job (a function tool with no demand that squares ``item``) and
answers its result; ``GET /bare/{item}`` answers the same square itself. Both go through the
example's middleware, lifespan and request pattern (submit, await, cancel the workflow if the
wait is cancelled), so the difference between them is what a one-job request costs. Served by
``hypercorn --worker-class trio benchmarks._web_app:app`` from the repository root.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from examples.web_service import cancel_on_disconnect, job_counts, lifespan
from nucleo_trio.jobs import JobContext, workflow
from nucleo_trio.tools import function_tool


@function_tool(timeout=10)
async def square(context: JobContext, item: int) -> int:
    return item * item


async def one(request: Request) -> JSONResponse:
    item = request.path_params["item"]
    dispatcher, job = request.state.dispatcher, square(workflow("web", "one"), item)
    handle = dispatcher.submit(job)
    try:
        return JSONResponse({"item": item, "square": await handle.result()})
    finally:
        if not handle.done:
            dispatcher.cancel_workflow(job.workflow_id, "the request was cancelled")


async def bare(request: Request) -> JSONResponse:
    item = request.path_params["item"]
    return JSONResponse({"item": item, "square": item * item})


app = Starlette(lifespan=lifespan, middleware=[Middleware(cancel_on_disconnect)])
app.add_route("/one/{item:int}", one)
app.add_route("/bare/{item:int}", bare)
app.add_route("/jobs", job_counts)
