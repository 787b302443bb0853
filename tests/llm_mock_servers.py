"""LLM mock servers that are not ours, each run as a process on a free loopback port.

* :func:`running_llmock`: LLMock (``llmock`` on PyPI), a FastAPI server that plays the OpenAI
  API, and Anthropic's Messages API under ``/anthropic`` (:attr:`MockServer.anthropic_base_url`),
  and breaks them on demand: HTTP errors, streams cut short without a finish reason, dropped
  connections. Behaviours are queued over its control API (:meth:`Llmock.script`) and every
  request it served can be read back (:meth:`Llmock.requests`), with its own verdict on how the
  client coped (:meth:`Llmock.verdict`).
* :func:`running_stubllm`: stubllm (``stubllm`` on PyPI), which answers from fixtures; a fixture
  may leave ``usage`` empty, and its streams never carry usage at all, as some servers' do.

Both come with the ``dev`` extra (.ci/run installs it). The processes are started, waited for
(their ``/health`` answers) and stopped within bounded real-time limits: these are waits for a
process, never a measure of a timing rule.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

__all__ = ["Llmock", "MockServer", "running_llmock", "running_stubllm"]

STARTUP_SECONDS = 60.0
"""The longest a server may take to answer its health check (a loaded machine imports FastAPI
slowly)."""
STOP_SECONDS = 10.0
"""How long a server has to exit after SIGTERM before it is killed."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _script(name: str) -> str:
    """The console script ``name`` of the running interpreter's environment."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"the {name!r} mock server is not installed; install the dev extra "
            "(pip install -e '.[dev]'), which .ci/run does"
        )
    return found


class MockServer:
    """One mock server process on ``127.0.0.1:port``; :meth:`start` waits for its health."""

    def __init__(self, name: str, arguments: Sequence[str], port: int, workdir: Path) -> None:
        self.name = name
        self.port = port
        self.workdir = workdir
        self._arguments = list(arguments)
        self._log = workdir / f"{name}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API's base URL on this server."""
        return f"{self.root}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The base URL of LLMock's Anthropic Messages API, as the ``anthropic`` SDK takes it."""
        return f"{self.root}/anthropic"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self) -> None:
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                self._arguments,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NO_COLOR": "1"},
            )
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self._process.returncode} before answering its "
                    f"health check:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.root}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.name} did not answer its health check within {STARTUP_SECONDS:g} s:"
                    f"\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_SECONDS)


class Llmock(MockServer):
    """LLMock, driven over its control API (``/_llmock``)."""

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, f"{self.root}/_llmock/{path}", json=body, timeout=30.0)
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        """Forget every request served and every behaviour still queued."""
        self._admin("POST", "reset")

    def script(self, *behaviors: Mapping[str, Any]) -> None:
        """Queue behaviours, e.g. ``{"type": "fail", "status": 500}``; each fires once unless it
        says ``"times"``."""
        self._admin("POST", "scenario", {"behaviors": [dict(b) for b in behaviors]})

    def requests(self) -> list[dict[str, Any]]:
        """Every model request served since the last reset, oldest first."""
        found: list[dict[str, Any]] = self._admin("GET", "requests")["requests"]
        return found

    def verdict(self) -> dict[str, Any]:
        """LLMock's own judgement of how the client coped with what it was given."""
        found: dict[str, Any] = self._admin("GET", "verdict")
        return found


@contextmanager
def running_llmock() -> Iterator[Llmock]:
    """An LLMock server answering in text (no tool calls), with fixed replies."""
    with tempfile.TemporaryDirectory(prefix="nucleo-trio-llmock-") as workdir:
        port = _free_port()
        arguments = [
            _script("llmock"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--tool-mode",
            "off",
            "--response-style",
            "static",
        ]
        server = Llmock("llmock", arguments, port, Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def running_stubllm(fixtures: Sequence[Mapping[str, Any]]) -> Iterator[MockServer]:
    """A stubllm server answering from ``fixtures`` (its fixture format: ``match`` and
    ``response``)."""
    with tempfile.TemporaryDirectory(prefix="nucleo-trio-stubllm-") as workdir:
        path = Path(workdir) / "fixtures.json"
        path.write_text(json.dumps({"fixtures": [dict(f) for f in fixtures]}))
        port = _free_port()
        arguments = [
            _script("stubllm"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--fixture-file",
            str(path),
            "--log-level",
            "warning",
        ]
        server = MockServer("stubllm", arguments, port, Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop()
