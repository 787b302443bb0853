"""The shared HTTP pool: its settings, the client built from them, and that client on trio.

The client tests talk to a small HTTP/1.1 server the test starts with ``trio.serve_tcp`` on a
real loopback socket. They run on the real clock, and nothing in them waits for time to pass:
every wait is on an event the server or the client sets.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import attrs
import httpx
import pytest
import trio
import trio.testing

from nucleo_trio.admission import HttpConnectionGate, Replenishment
from nucleo_trio.errors import ConfigError
from nucleo_trio.http import HttpSettings, open_http_client

# --------------------------------------------------------------------------------------------
# A tiny keep-alive HTTP/1.1 server
# --------------------------------------------------------------------------------------------


class Server:
    """Answers every GET with ``connection <n>``, n counting connections from 1.

    With ``hold`` set, each request waits for ``release`` before it is answered, and
    ``two_parked`` is set once two requests wait.
    """

    def __init__(self, *, hold: bool = False) -> None:
        self.hold = hold
        self.release = trio.Event()
        self.two_parked = trio.Event()
        self.connections = 0
        self.requests = 0
        self.parked = 0
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return  # the client closed the connection
                buffer += chunk
            _, buffer = buffer.split(b"\r\n\r\n", 1)
            self.requests += 1
            if self.hold:
                self.parked += 1
                if self.parked == 2:
                    self.two_parked.set()
                await self.release.wait()
            body = f"connection {number}".encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


async def serving(server: Server, nursery: trio.Nursery) -> None:
    serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    listeners = await nursery.start(serve)
    server.port = listeners[0].socket.getsockname()[1]


@pytest.fixture
async def plain_server() -> AsyncIterator[Server]:
    server = Server()
    async with trio.open_nursery() as nursery:
        await serving(server, nursery)
        yield server
        nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def test_the_defaults_are_the_pools_settings() -> None:
    """GATE-06: pool of 1000, 30 s to connect, 15 min to read and write, 60 min to get a
    connection from the pool, idle connections evicted after 5 min; every idle connection may
    stay alive (keep-alive cap = pool size)."""
    settings = HttpSettings()
    assert (settings.pool_size, settings.connect_timeout) == (1000, 30.0)
    assert settings.read_timeout == settings.write_timeout == 900.0
    assert (settings.pool_timeout, settings.keepalive_expiry) == (3600.0, 300.0)
    assert settings.limits() == httpx.Limits(
        max_connections=1000, max_keepalive_connections=1000, keepalive_expiry=300.0
    )
    assert settings.timeout() == httpx.Timeout(connect=30.0, read=900.0, write=900.0, pool=3600.0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.pool_size = 2  # type: ignore[misc]


def test_the_http_gate_is_sized_by_the_pool() -> None:
    """GATE-05, GATE-06: the ``http`` gate has one permit per pooled connection, so a job the
    gate admits always finds a connection; each call builds a fresh gate (nothing shared)."""
    settings = HttpSettings(pool_size=12)
    gate = settings.gate()
    assert isinstance(gate, HttpConnectionGate)
    assert (gate.limiter_name, gate.capacity, gate.limiter_category) == ("http", 12, "semaphore")
    assert gate.replenishment() is Replenishment.RELEASE
    assert settings.gate() is not gate
    assert HttpSettings().gate().capacity == HttpSettings().limits().max_connections == 1000


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("pool_size", 0, "pool_size must be a positive int, got 0"),
        ("pool_size", True, "pool_size must be a positive int, got True"),
        ("pool_size", 2.5, "pool_size must be a positive int, got 2.5"),
        ("connect_timeout", 0, "connect_timeout must be a positive number of seconds, got 0"),
        ("read_timeout", -1.0, "read_timeout must be a positive number of seconds, got -1.0"),
        ("pool_timeout", float("inf"), "pool_timeout must be a positive number of seconds"),
        ("keepalive_expiry", "300", "keepalive_expiry must be a positive number of seconds"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_value(
    key: str, value: object, message: str
) -> None:
    """A bad size or duration is a ConfigError that names the setting and the value."""
    with pytest.raises(ConfigError, match=message):
        HttpSettings(**{key: value})  # type: ignore[arg-type]


def test_settings_from_plain_data_refuse_an_unknown_key() -> None:
    """Settings read from a config file: known keys build them, a typo is named."""
    settings = HttpSettings.from_mapping({"pool_size": 50, "read_timeout": 120})
    assert (settings.pool_size, settings.read_timeout) == (50, 120)
    with pytest.raises(ConfigError, match="pool_sise"):
        HttpSettings.from_mapping({"pool_sise": 50})
    with pytest.raises(ConfigError, match="pool_size must be a positive int, got -3"):
        HttpSettings.from_mapping({"pool_size": -3})


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


async def test_the_client_follows_the_settings_and_never_retries() -> None:
    """GATE-06: max connections = keep-alive connections = pool size (httpx has one cap for
    the whole pool, so one host may use all of it), the four timeouts, and no automatic
    retries: retries are the dispatcher's job."""
    settings = HttpSettings(pool_size=8, read_timeout=60.0)
    async with open_http_client(settings) as client:
        assert client.timeout == settings.timeout()
        # httpx offers no public reader for a transport's pool; its attributes are the truth.
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert pool._max_connections == 8
        assert pool._max_keepalive_connections == 8
        assert pool._keepalive_expiry == 300.0
        assert pool._retries == 0
    async with open_http_client() as default:
        assert default.timeout == HttpSettings().timeout()
        assert default._transport._pool._max_connections == 1000  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="needs HttpSettings or None, got dict"):
        open_http_client({"pool_size": 8})  # type: ignore[arg-type]


async def test_the_client_runs_on_trio_against_a_real_socket(plain_server: Server) -> None:
    """GATE-06: the client works under trio (httpx through anyio); two requests in a row
    reuse the one kept-alive connection."""
    with trio.fail_after(30):  # a safety net against a hang, not a timing under test
        async with open_http_client(HttpSettings(pool_size=4)) as client:
            first = await client.get(plain_server.url)
            second = await client.get(plain_server.url)
    assert (first.status_code, first.text) == (200, "connection 1")
    assert (second.status_code, second.text) == (200, "connection 1")
    assert (plain_server.connections, plain_server.requests) == (1, 2)


async def test_the_pool_never_opens_more_than_pool_size_connections() -> None:
    """GATE-06: with a pool of 2 and both connections busy, a third request waits for one of
    them instead of opening a third connection."""
    server = Server(hold=True)
    responses: list[httpx.Response] = []
    with trio.fail_after(30):  # a safety net against a hang, not a timing under test
        async with trio.open_nursery() as nursery:
            await serving(server, nursery)
            async with open_http_client(HttpSettings(pool_size=2)) as client:

                async def get() -> None:
                    responses.append(await client.get(server.url))

                async with trio.open_nursery() as requests:
                    requests.start_soon(get)
                    requests.start_soon(get)
                    await server.two_parked.wait()
                    requests.start_soon(get)
                    # The third request runs as far as it can: into the pool's queue.
                    await trio.testing.wait_all_tasks_blocked()
                    assert (server.connections, server.requests) == (2, 2)
                    server.release.set()
            nursery.cancel_scope.cancel()
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert {r.text for r in responses} == {"connection 1", "connection 2"}
    assert (server.connections, server.requests) == (2, 3)
