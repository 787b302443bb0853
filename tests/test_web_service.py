"""A web service: ``examples/web_service.py`` served by a real hypercorn process
(``hypercorn --worker-class trio``) on a loopback port, driven by real httpx requests.

What a service around one dispatcher must keep, seen from outside: concurrent requests get
their own answers; a lifespan shutdown (SIGTERM) answers the requests in flight, then exits 0;
Ctrl-C mid-load (SIGINT to the process group) exits with every job settled; a second Ctrl-C in a
single-process server stops at once, still with every job settled, and no traceback from the
runtime; a client that goes away cancels its request's job tree while the server runs on.

The server prints ``settled N of M jobs: ...`` when its lifespan ends and answers ``GET /jobs``
with what its bus has told so far (jobs submitted, and how each ended). These run on the real
clock, since they are about a real server, but assert no timing: every wait is bounded
generously so that a hang fails fast, and readiness is polled.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

MISSING = [name for name in ("hypercorn", "starlette") if importlib.util.find_spec(name) is None]
if MISSING:
    pytest.skip(
        f"the web service needs {' and '.join(MISSING)}: pip install -e '.[dev]'",
        allow_module_level=True,
    )

import httpx  # noqa: E402 - after the skip, like the server's own needs

ROOT = Path(__file__).resolve().parent.parent
APP = "examples.web_service:app"
BOUND = 60.0  # seconds any one step may take before the test fails as a hang
SETTLED = re.compile(r"^settled (\d+) of (\d+) jobs: (.*)$", re.M)


def total(items: int) -> int:
    """What a quote of ``items`` lookups answers: the sum of the squares below ``items``."""
    return sum(item * item for item in range(items))


def _default_sigint() -> None:
    """In the server, before it runs Python: Ctrl-C does what it does at a terminal, even when
    this test runs with SIGINT ignored (a shell's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Server:
    """One hypercorn process serving the example, in a process group of its own."""

    def __init__(self, directory: Path, *options: str) -> None:
        self.out, self.err = directory / "stdout", directory / "stderr"
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hypercorn", "--worker-class", "trio"]
                + ["--bind", "127.0.0.1:0", *options, APP],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=_default_sigint,  # noqa: PLW1509 - no threads to fork from here
            )
        self.url = ""

    async def ready(self) -> str:
        """The server's URL, once it has said where it listens and answers."""
        with trio.fail_after(BOUND):
            while not (found := re.search(r"Running on (http://127\.0\.0\.1:\d+)", self.stderr())):
                assert self.process.poll() is None, f"the server exited:\n{self.stderr()}"
                await trio.sleep(0.05)
            self.url = found.group(1)
            async with httpx.AsyncClient(base_url=self.url) as client:
                while True:
                    try:
                        (await client.get("/jobs")).raise_for_status()
                        return self.url
                    except httpx.TransportError:
                        await trio.sleep(0.05)

    def signal(self, signum: signal.Signals, *, group: bool = False) -> None:
        """``signum`` to the server, or to its whole process group (what Ctrl-C does)."""
        if group:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)

    async def exited(self) -> int:
        """The server's exit status, waiting for it within the bound."""
        try:
            return await trio.to_thread.run_sync(self.process.wait, BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not exit within {BOUND:.0f} s:\n{self.stderr()}")

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def settled(self) -> tuple[int, int, dict[str, int]]:
        """The lifespan's last line: jobs settled, jobs submitted, and how many ended each way."""
        found = SETTLED.findall(self.stdout())
        assert len(found) == 1, f"no single 'settled' line:\n{self.stdout()}\n{self.stderr()}"
        settled, submitted, ended = found[0]
        ways = {state: int(count) for count, state in re.findall(r"(\d+) ([A-Z_]+)", ended)}
        return int(settled), int(submitted), ways

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Starts servers (``serve(*hypercorn_options)``); kills whatever still runs at the end."""
    servers: list[Server] = []

    def start(*options: str) -> Server:
        directory = tmp_path / f"server{len(servers)}"
        directory.mkdir()
        servers.append(Server(directory, *options))
        return servers[-1]

    yield start
    for server in servers:
        server.kill()


async def jobs(client: httpx.AsyncClient) -> dict[str, int]:
    response = await client.get("/jobs")
    response.raise_for_status()
    counts: dict[str, int] = response.json()
    return counts


async def until_jobs(client: httpx.AsyncClient, state: str, count: int) -> dict[str, int]:
    """Poll ``/jobs`` until ``count`` jobs are ``state`` (or submitted), within the bound."""
    with trio.fail_after(BOUND):
        while True:
            counts = await jobs(client)
            if counts.get(state, 0) >= count:
                return counts
            await trio.sleep(0.02)


def assert_no_traceback(server: Server) -> None:
    assert "Traceback" not in server.stderr(), server.stderr()


async def test_web_service_answers_concurrent_requests_each_with_its_own_tree(serve: Any) -> None:
    server = serve()
    url = await server.ready()
    sizes = [1 + n % 8 for n in range(40)]
    answers: dict[int, httpx.Response] = {}
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:

        async def ask(index: int, items: int) -> None:
            answers[index] = await client.get(f"/quote/{items}/{10 * (index % 5)}")

        async with trio.open_nursery() as nursery:
            for index, items in enumerate(sizes):
                nursery.start_soon(ask, index, items)
        refused = await client.get("/quote/0/10")
    for index, items in enumerate(sizes):
        assert answers[index].status_code == 200, answers[index].text
        assert answers[index].json() == {"items": items, "total": total(items)}
    assert refused.status_code == 400
    assert refused.json() == {"error": "items must be 1 to 32 and ms 0 to 60000"}

    server.signal(signal.SIGTERM)
    assert await server.exited() == 0, server.stderr()
    every = sum(items + 1 for items in sizes)  # a Quote and its lookups
    assert server.settled() == (every, every, {"COMPLETED": every})
    assert_no_traceback(server)


async def test_web_service_lifespan_shutdown_answers_the_requests_in_flight(serve: Any) -> None:
    """SIGTERM while every request is in flight: hypercorn stops taking connections and lets the
    open ones finish; each gets its answer, and the lifespan's graceful stop finds nothing left
    to interrupt."""
    server = serve("--graceful-timeout", "120")
    url = await server.ready()
    requests, items = 12, 2  # 24 lookups of a second each through the 8-slot gate
    answers: list[httpx.Response] = []
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:

        async def ask() -> None:
            answers.append(await client.get(f"/quote/{items}/1000"))

        async with trio.open_nursery() as nursery:
            for _ in range(requests):
                nursery.start_soon(ask)
            counts = await until_jobs(client, "submitted", requests * (items + 1))
            assert counts.get("COMPLETED", 0) < requests, counts  # the load is in flight
            server.signal(signal.SIGTERM)
    assert [answer.status_code for answer in answers] == [200] * requests
    assert all(answer.json() == {"items": items, "total": total(items)} for answer in answers)
    assert await server.exited() == 0, server.stderr()
    every = requests * (items + 1)
    assert server.settled() == (every, every, {"COMPLETED": every})
    assert_no_traceback(server)


async def _load(client: httpx.AsyncClient, nursery: trio.Nursery, requests: int) -> list[Any]:
    """``requests`` quotes of a minute's work each, in flight; what each ended with goes in the
    list returned (a response, or the transport error of a connection the server closed)."""
    outcomes: list[Any] = []

    async def ask() -> None:
        try:
            outcomes.append(await client.get("/quote/2/60000"))
        except httpx.TransportError as exc:
            outcomes.append(exc)

    for _ in range(requests):
        nursery.start_soon(ask)
    await until_jobs(client, "submitted", requests * 3)
    return outcomes


async def test_web_service_ctrl_c_mid_load_settles_every_job_and_exits(serve: Any) -> None:
    """Ctrl-C at the terminal (SIGINT to the group) under load: hypercorn stops gracefully, its
    graceful timeout cancels the requests still open, each request's cancelled wait cancels its
    tree, and the lifespan's stop finds every job settled or settling."""
    server = serve("--graceful-timeout", "1")
    url = await server.ready()
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:
        async with trio.open_nursery() as nursery:
            outcomes = await _load(client, nursery, 12)
            server.signal(signal.SIGINT, group=True)
    assert len(outcomes) == 12
    assert not [o for o in outcomes if isinstance(o, httpx.Response) and o.status_code == 200]
    assert await server.exited() == 0, server.stderr()
    assert server.settled() == (36, 36, {"CANCELLED": 36})
    assert_no_traceback(server)


async def test_web_service_second_ctrl_c_stops_at_once_with_every_job_settled(serve: Any) -> None:
    """A single-process server (``--workers 0``) turns the first Ctrl-C into its graceful stop;
    a second one while that waits raises KeyboardInterrupt in it. The lifespan is cancelled, the
    dispatcher stops at once, every job settles cancelled, and the only traceback is hypercorn's
    own KeyboardInterrupt: none passes through the runtime or the app."""
    server = serve("--workers", "0", "--graceful-timeout", "600")
    url = await server.ready()
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:
        async with trio.open_nursery() as nursery:
            await _load(client, nursery, 12)
            server.signal(signal.SIGINT)
            with trio.fail_after(BOUND):  # the first one is taken: nothing new is accepted
                while True:
                    try:
                        async with httpx.AsyncClient(base_url=url, timeout=1) as probe:
                            await probe.get("/jobs")
                    except httpx.TransportError:
                        break
                    await trio.sleep(0.05)
            server.signal(signal.SIGINT)
    assert await server.exited() != 0  # hypercorn lets KeyboardInterrupt out: status 1
    assert server.settled() == (36, 36, {"CANCELLED": 36})
    errors = server.stderr()
    assert "KeyboardInterrupt" in errors, errors
    assert "nucleo_trio" not in errors and "web_service" not in errors, errors


async def test_web_service_client_gone_cancels_its_job_tree(serve: Any) -> None:
    """A client that closes its connection mid-request: the request's orchestrator and its four
    lookups end cancelled while the server runs on, the gate's slots are back, and the next
    request is answered."""
    server = serve()
    url = await server.ready()
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:
        async with httpx.AsyncClient(base_url=url, timeout=BOUND) as leaving:
            with trio.CancelScope() as request:

                async def give_up() -> None:
                    await until_jobs(client, "submitted", 5)
                    request.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(give_up)
                    await leaving.get("/quote/4/60000")
        assert request.cancelled_caught
        assert await until_jobs(client, "CANCELLED", 5) == {"submitted": 5, "CANCELLED": 5}
        after = await client.get("/quote/8/0")  # needs all 8 slots
        assert after.json() == {"items": 8, "total": total(8)}
    server.signal(signal.SIGTERM)
    assert await server.exited() == 0, server.stderr()
    assert server.settled() == (14, 14, {"CANCELLED": 5, "COMPLETED": 9})
    assert_no_traceback(server)
