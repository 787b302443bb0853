"""Throwaway Redis servers for the tests: Debian's ``redis-server`` on a free loopback port.

:class:`RedisServer` starts ``redis-server`` with its working directory in a temporary
directory, no persistence (no RDB snapshots, no AOF) unless asked, keyspace notifications on,
and a free TCP port on 127.0.0.1. It can be stopped and started again on the same port (to
test a Redis restart mid-run), or killed. ``.ci/run`` installs the package; without it the
fixtures skip with :data:`NO_SERVER_REASON` so a developer's machine says what is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NO_SERVER_REASON", "RedisServer", "find_binary", "running_redis"]

NO_SERVER_REASON = (
    "no redis-server on PATH; install Debian's 'redis-server' package (.ci/run does) "
    "to run the shared-account and Redis heartbeat tests"
)


def find_binary() -> str | None:
    """The path of ``redis-server``, or ``None`` when it is not installed."""
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process; :meth:`start`, :meth:`stop`, :meth:`kill`, :meth:`restart`."""

    def __init__(
        self,
        binary: str,
        *,
        persistent: bool = False,
        password: str | None = None,
        users: Mapping[str, str] | None = None,
    ) -> None:
        """``password`` is the default user's (``requirepass``); ``users`` adds ACL users by
        name and password, each allowed every key, channel and command."""
        self.binary = binary
        self.persistent = persistent
        self.password = password
        self.users = dict(users or {})
        self.directory = Path(tempfile.mkdtemp(prefix="nucleo-trio-redis-"))
        self.port = _free_port()
        self.host = "127.0.0.1"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _arguments(self) -> list[str]:
        arguments = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            str(self.directory),
            "--notify-keyspace-events",
            "KEA",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        if self.password is not None:
            arguments += ["--requirepass", self.password]
        for name, password in self.users.items():
            arguments += ["--user", name, "on", f">{password}", "~*", "&*", "+@all"]
        if self.persistent:
            arguments += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        else:
            arguments += ["--appendonly", "no", "--save", ""]
        return arguments

    def start(self, *, timeout: float = 20.0) -> None:
        """Start the server and wait until it answers ``PING``."""
        if self.running:
            return
        self._process = subprocess.Popen(
            self._arguments(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                log = self.directory / "redis.log"
                text = log.read_text(errors="replace") if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self._process.returncode}:\n{text}")
            if self._answers_ping():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"redis-server did not answer on port {self.port} in {timeout} s"
                )
            time.sleep(0.02)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as connection:
                if self.password is not None:
                    connection.sendall(f"AUTH {self.password}\r\n".encode())
                    if not connection.recv(16).startswith(b"+OK"):
                        return False
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def kill(self) -> None:
        """Kill the server at once, as a crash would."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def restart(self) -> None:
        """Stop and start again on the same port (data survives only when ``persistent``)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def running_redis(binary: str, *, persistent: bool = False) -> Iterator[RedisServer]:
    """A started :class:`RedisServer`, killed and removed at the end."""
    server = RedisServer(binary, persistent=persistent)
    try:
        server.start()
        yield server
    finally:
        server.close()
