"""Secrets never print (issue 21, item 2), tested the way the leak was found.

A distinct secret is planted in every setting that can hold one: the Redis password in a URL's
userinfo and in its ``?password=``, an OpenAI-compatible gateway's ``user:pw@`` and its
``?api_key=``, and the ``api_key`` setting itself. Then a real program runs with all of them: a
dispatcher built from a configuration file, with shared accounts on a real redis-server that is
killed mid-run, OpenAI-compatible clients against the project's fake server (answering,
refusing with a 401) and against a port where nothing listens, a JSON-lines sink, a trajectory
recording, the control socket read by ``nucleo-trio top --once``, ``nucleo-trio health`` on the
same file, and every record of every logger captured at DEBUG (httpx's and httpcore's
included). Every output the run produced is collected (events' reprs and JSON, the JSONL file,
the recording's rows, the log records with their tracebacks, the reprs of the configuration,
the hubs, the clients and the accounts, every exception's whole chain, the health rows, the
commands' output) and no secret may appear in any of it. Each run also checks that it did what
it claims, so a run that leaked nothing because it did nothing fails too. The unit tests of
:func:`~nucleo_trio._redact.redact_url` and its helpers come first.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import DispatcherConfig, open_dispatcher
from nucleo_trio._redact import (
    RedactingFilter,
    is_credential_key,
    redact_repr,
    redact_text,
    redact_url,
    redacted_repr,
)
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch.config import DatabaseConfig, HeartbeatConfig, LimiterConfig
from nucleo_trio.errors import ConfigError
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import JobContext, JobHandle, JobRequirements, workflow
from nucleo_trio.llm import Conversation, LLMCall, TextAnswer, openai_compatible
from nucleo_trio.llm.clients import LLMRequest, Message, ObservableLLMClient
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.llm.clients.observable import ObservableEmbeddingsClient
from nucleo_trio.llm.clients.openai import (
    OpenAICompatibleClient,
    OpenAICompatibleEmbeddingsClient,
)
from nucleo_trio.models import Grade, ModelRuntime, Providers
from nucleo_trio.observability import TrajectoryRecorder
from nucleo_trio.observability.jsonl import JsonLinesSink, dumps_event

from .jobs_for_tests import Fn
from .model_doubles import catalog, entry
from .redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
BOUND = 60.0
"""The most a step of a run may take on a loaded machine (a hang fails, it never waits)."""


# -- redact_url and its helpers ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://alice:pw@h/0", "redis://alice:***@h/0"),
        ("https://token@api.example/v1", "https://***@api.example/v1"),
        ("redis://h/0?password=pw&db=1", "redis://h/0?password=***&db=1"),
        ("redis://u:a@h/0?PassWord=b", "redis://u:***@h/0?PassWord=***"),
        ("https://gw/v1?api_key=k&api-version=2024", "https://gw/v1?api_key=***&api-version=2024"),
        ("https://gw/v1?x-api-key=k;sig=s", "https://gw/v1?x-api-key=***;sig=***"),
        (
            "https://s3/b?X-Amz-Signature=s&X-Amz-Credential=c",
            "https://s3/b?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        ("https://h/cb#access_token=t&state=1", "https://h/cb#access_token=***&state=1"),
        ("https://h/page#section-2", "https://h/page#section-2"),
        ("http://u:p@[::1]:8080/v1", "http://u:***@[::1]:8080/v1"),
        ("redis://:p@ss@h/0", "redis://:***@h/0"),  # an unescaped @ in the password
        ("unix://:pw@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("//u:p@h/x", "//u:***@h/x"),
        ("http://u:p@h:notaport/", "http://u:***@h:notaport/"),  # no parser takes it
        ("http://u:p@[::1/", "http://u:***@[::1/"),  # nor this
        ("https://api.example/v1", "https://api.example/v1"),
        ("https://h/v1?token=", "https://h/v1?token="),  # nothing to hide
        ("https://h/v1?tokens=3&max_tokens=4", "https://h/v1?tokens=3&max_tokens=4"),
        ("https://h/v1?%61pi_key=k", "https://h/v1?%61pi_key=***"),  # an escaped name
    ],
)
def test_redact_url_masks_the_userinfo_and_credential_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "text",
    ["", "hello", "not a url?", "a@b", "host:6379", "C:\\Users\\me", "user@example.com", "?"],
)
def test_redact_url_leaves_what_is_not_a_url_alone(text: str) -> None:
    assert redact_url(text) == text
    assert redact_text(text) == text


def test_redact_text_masks_every_url_in_a_message() -> None:
    message = (
        'HTTP Request: POST http://u:pw@gw/v1/chat/completions?key=k "HTTP/1.1 200 OK" '
        "then redis://:pw2@h/0, and (https://t@h/)"
    )
    assert redact_text(message) == (
        'HTTP Request: POST http://u:***@gw/v1/chat/completions?key=*** "HTTP/1.1 200 OK" '
        "then redis://:***@h/0, and (https://***@h/)"
    )


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("password", True),
        ("Password", True),
        ("pass", True),
        ("pwd", True),
        ("client_secret", True),
        ("refresh_token", True),
        ("api_key", True),
        ("API-KEY", True),
        ("apikey", True),
        ("key", True),
        ("signing_key", True),
        ("auth", True),
        ("Authorization", True),
        ("sig", True),
        ("credentials", True),
        ("api_keys", True),
        ("url", False),
        ("capacity", False),
        ("max_tokens", False),
        ("bypass", False),
        ("signing_key_env", False),
        ("namespace", False),
        (3, False),
    ],
)
def test_credential_keys_are_known_by_name(name: object, credential: bool) -> None:
    assert is_credential_key(name) is credential


def test_a_repr_loses_its_credentials_however_deep() -> None:
    settings = {
        "url": "redis://:S1@h/0",
        "conninfo": "host=db password=S2 user=app",
        "quoted": "password='S 3' sslmode=require",
        "password": "S4",
        "api_keys": ["S5", "S6"],
        "nested": [[{"token": "S7", "n": None, "secret": ""}]],
        "max_tokens": 5,
    }
    shown = redacted_repr(settings)
    assert not any(f"S{n}" in shown for n in range(1, 8)), shown
    assert "'url': 'redis://:***@h/0'" in shown and "user=app" in shown
    assert "'n': None" in shown and "'secret': ''" in shown and "'max_tokens': 5" in shown
    deep = json.loads("[" * 500 + '{"password": "S8"}' + "]" * 500)
    assert "S8" not in redacted_repr(deep)
    assert redacted_repr("S9", key="api_key") == "'***'"
    assert redact_repr("Thing(token='S10', size=3)") == "Thing(token=***, size=3)"


def test_the_logging_filter_masks_a_record_and_its_traceback() -> None:
    try:
        raise RuntimeError("refused: http://u:pw@h/v1?api_key=k")
    except RuntimeError as exc:
        error = exc
    record = logging.LogRecord(
        "httpx", logging.INFO, __file__, 1, "HTTP Request: %s %s", ("POST", "http://u:pw@h/"), None
    )
    failed = logging.LogRecord(
        "httpx", logging.ERROR, __file__, 1, "x", (), (RuntimeError, error, error.__traceback__)
    )
    quiet = logging.LogRecord("httpx", logging.INFO, __file__, 1, "plain %d", (3,), None)
    for each in (record, failed, quiet):
        assert RedactingFilter().filter(each) is True
    assert record.getMessage() == "HTTP Request: POST http://u:***@h/"
    assert "pw" not in logging.Formatter().format(failed) and "api_key=***" in failed.exc_text
    assert quiet.args == (3,)  # a record with nothing to hide is passed as it came


def test_config_reprs_and_refusals_mask_what_their_settings_hold(tmp_path: Path) -> None:
    config = DispatcherConfig(
        limiters={
            "a": LimiterConfig(kind="redis_counting", settings={"url": "redis://:S1@h/0"}),
            "b": LimiterConfig(kind="redis_counting", settings={"url": "redis://h/0?password=S2"}),
        },
        databases={"d": DatabaseConfig(kind="postgres", settings={"conninfo": "password=S3"})},
        heartbeat=HeartbeatConfig(kind="redis", settings={"url": "redis://u:S4@h/0"}),
    )
    for shown in (repr(config), str(config)):
        assert not any(f"S{n}" in shown for n in range(1, 5)), shown
        assert "redis://:***@h/0" in shown and "password=***" in shown
    path = tmp_path / "dispatcher.toml"
    path.write_text(
        '[limiters.a]\nkind = "redis_counting"\n'
        '[limiters.a.setings]\nurl = "redis://:S5@h/0"\ntoken = "S6"\n'
    )
    with pytest.raises(ConfigError) as refused:
        DispatcherConfig.from_file(path)
    assert "setings" in str(refused.value) and "redis://:***@h/0" in str(refused.value)
    assert "S5" not in str(refused.value) and "S6" not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        LimiterConfig(kind="redis_counting", settings="redis://:S7@h/0")  # type: ignore[arg-type]
    assert "S7" not in str(refused.value)


def test_a_base_url_userinfo_beside_an_api_key_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="api_key") as refused:
        OpenAICompatibleClient("http://u:S1@gw/v1", api_key="S2")
    assert "http://u:***@gw/v1" in str(refused.value)
    assert "S1" not in str(refused.value) and "S2" not in str(refused.value)
    with pytest.raises(ConfigError, match="http"):
        OpenAICompatibleClient("ftp://u:S3@gw/v1?api_key=S4")
    with pytest.raises(ConfigError) as refused:
        OpenAICompatibleClient("ftp://u:S3@gw/v1?api_key=S4")
    assert "S3" not in str(refused.value) and "S4" not in str(refused.value)


# -- the secrets and what a run printed ----------------------------------------------------------


class Secrets:
    """One distinct secret per setting, unique to the run (no output holds one by chance)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:12]
        self.by_name = {
            "redis userinfo password": f"redis-userinfo-{tag}",
            "redis ?password=": f"redis-query-{tag}",
            "gateway userinfo password": f"gateway-password-{tag}",
            "gateway ?api_key=": f"gateway-query-{tag}",
            "api_key setting": f"api-key-setting-{tag}",
        }
        self.gateway_user = "gateway-user"
        basic = f"{self.gateway_user}:{self['gateway userinfo password']}"
        # The basic-auth header carries the pair in base64: a log of headers would show it so.
        self.by_name["gateway basic-auth header"] = base64.b64encode(basic.encode()).decode()

    def __getitem__(self, name: str) -> str:
        return self.by_name[name]

    def gateway(self, port: int) -> str:
        """A base URL with credentials in both places: userinfo and query."""
        return (
            f"http://{self.gateway_user}:{self['gateway userinfo password']}@127.0.0.1:{port}/v1"
            f"?api_key={self['gateway ?api_key=']}&api-version=1"
        )


class Outputs:
    """Every text a run produced, each with where it came from."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, text: object) -> None:
        self.texts.append((where, text if isinstance(text, str) else repr(text)))

    def add_error(self, where: str, error: BaseException) -> None:
        """The error as a traceback shows it: its whole chain, groups' members included."""
        self.add(where, "".join(traceback.format_exception(error)))
        self.add(f"{where} (str)", str(error))
        self.add(f"{where} (repr)", repr(error))

    def holding(self, needle: str) -> list[str]:
        return [where for where, text in self.texts if needle in text]

    def assert_no_secret(self, secrets: Secrets) -> None:
        leaks = []
        for name, secret in secrets.by_name.items():
            for where, text in self.texts:
                at = text.find(secret)
                if at != -1:
                    leaks.append(f"the {name} in {where}: ...{text[max(0, at - 120) : at + 40]}...")
        assert not leaks, "\n".join(leaks)


class EveryRecord(logging.Handler):
    """Every log record, formatted with its traceback, as a handler writes it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def every_log_record() -> Iterator[EveryRecord]:
    """Capture every record of every logger at DEBUG (a logger that does not propagate is
    handled directly), and put each logger back as it was."""
    handler = EveryRecord()
    root = logging.getLogger()
    saved = {
        name: (logger.level, logger.propagate)
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    saved_root = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    for name in saved:
        logger = logging.getLogger(name)
        logger.setLevel(logging.NOTSET)
        if not logger.propagate:
            logger.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_root)
        for name, (level, _) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.removeHandler(handler)


def _collect_files(outputs: Outputs, jsonl: Path, database: Path) -> None:
    outputs.add("the JSONL file", jsonl.read_text())
    with sqlite3.connect(database) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            rows = db.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - names from the file
            outputs.add(f"the recording's {table} rows", "\n".join(map(repr, rows)))


def _command(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``nucleo-trio ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nucleo_trio", *map(str, args)],
        cwd=ROOT,
        env=dict(os.environ, NO_COLOR="1", COLUMNS="160"),
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=BOUND * 2,
    )


async def _run_command(outputs: Outputs, *args: str | Path) -> subprocess.CompletedProcess[str]:
    done = await trio.to_thread.run_sync(partial(_command, *args))
    outputs.add(f"nucleo-trio {args[0]} (stdout)", done.stdout)
    outputs.add(f"nucleo-trio {args[0]} (stderr)", done.stderr)
    return done


async def _outcome(
    outputs: Outputs, where: str, handle: JobHandle[Any], *, bound: float = BOUND
) -> Any:
    """The job's result, or the error it failed with (collected in full); ``bound`` is
    virtual seconds in a run on the virtual clock, where re-runs wait minutes."""
    with trio.fail_after(bound):
        try:
            return await handle.result()
        except Exception as error:  # noqa: BLE001 - every failure is an output to search
            outputs.add_error(where, error)
            return error


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _ask(text: str) -> LLMRequest:
    return LLMRequest(messages=[Message.user(text)], max_tokens=20)


def _completes(
    client: OpenAICompatibleClient, *, streamed: bool
) -> Callable[[JobContext], Awaitable[str]]:
    """A job body making one recorded call on ``client``."""

    async def call(context: JobContext) -> str:
        observed = ObservableLLMClient(client, context)
        if streamed:
            reply = await observed.stream(_ask("streamed"), lambda piece: None)
        else:
            reply = await observed.complete(_ask("whole"))
        return reply.content

    return call


def _embeds(client: OpenAICompatibleEmbeddingsClient) -> Callable[[JobContext], Awaitable[int]]:
    async def call(context: JobContext) -> int:
        reply = await ObservableEmbeddingsClient(client, context).embed(["a", "b"])
        return len(reply.vectors)

    return call


async def _until(check: Callable[[], object]) -> None:
    """Wait until ``check()`` is true, at most :data:`BOUND` (what it watches, a hub noticing
    Redis gone, has no wake-up of its own to wait on: a short, bounded poll)."""
    with trio.fail_after(BOUND):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.02)


@pytest.fixture
def place() -> Iterator[Path]:
    """A short, owner-only directory (a Unix socket's path is at most 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="nt-sec-"))
    directory.chmod(0o700)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _configuration(place: Path, secrets: Secrets, port: int) -> Path:
    """The dispatcher's settings file: two shared accounts on the password-protected Redis, one
    with the password in the userinfo, one in the query (as the ACL user ``nucleo``)."""
    namespace = f"s{uuid.uuid4().hex[:10]}"
    hub = f'namespace = "{namespace}"\nlease_ttl = 1.5\ntimeout = 0.5\n'
    path = place / "dispatcher.toml"
    path.write_text(
        f'control_socket = "{place / "d.sock"}"\n'
        "log_events = true\n"
        "health_every = 3\n"
        '[limiters.slots]\nkind = "redis_counting"\n'
        "[limiters.slots.settings]\n"
        f'url = "redis://:{secrets["redis userinfo password"]}@127.0.0.1:{port}/0"\n'
        f"capacity = 4\n{hub}"
        '[limiters.quota]\nkind = "redis_token_bucket"\n'
        "[limiters.quota.settings]\n"
        f'url = "redis://127.0.0.1:{port}/0?username=nucleo&password={secrets["redis ?password="]}"\n'
        f"rpm = 6000\ntpm = 600000\nburst = 40\n{hub}"
    )
    return path


# -- a run on Redis and a gateway, every output searched ----------------------------------------


async def test_a_run_with_a_secret_in_every_setting_prints_none(
    redis_binary: str, place: Path, tmp_path: Path
) -> None:
    secrets = Secrets()
    outputs = Outputs()
    redis = RedisServer(
        redis_binary,
        password=secrets["redis userinfo password"],
        users={"nucleo": secrets["redis ?password="]},
    )
    await trio.to_thread.run_sync(redis.start)
    try:
        with every_log_record() as logs:
            await _the_redis_and_gateway_run(secrets, outputs, redis, place, tmp_path)
        outputs.add("the log records", "\n".join(logs.lines))
    finally:
        await trio.to_thread.run_sync(redis.close)
    # It did what it claims: the masked forms are there, in the places the leaks were.
    assert outputs.holding("HTTP Request: POST http://127.0.0.1:"), "no httpx INFO line"
    assert any("api_key=***" in text for where, text in outputs.texts if where == "the log records")
    assert outputs.holding("redis://:***@127.0.0.1"), "no Redis URL shown"
    assert outputs.holding("password=***"), "no ?password= shown"
    assert outputs.holding("gateway-user:***@127.0.0.1"), "no gateway URL shown"
    assert outputs.holding("RedisUnavailableError"), "Redis was never lost"
    assert outputs.holding("HTTP 401") or outputs.holding("401"), "no 401"
    outputs.assert_no_secret(secrets)


async def _the_redis_and_gateway_run(
    secrets: Secrets, outputs: Outputs, redis: RedisServer, place: Path, tmp_path: Path
) -> None:
    path = _configuration(place, secrets, redis.port)
    done = await _run_command(outputs, "health", "--config", path)
    assert done.returncode == 0, done.stderr
    assert "slots" in done.stdout and "quota" in done.stdout
    config = DispatcherConfig.from_file(path)
    outputs.add("repr(config)", repr(config))
    outputs.add("str(config)", str(config))
    jsonl, database = tmp_path / "events.jsonl", tmp_path / "runs.db"
    events: list[ev.JobEvent] = []
    async with (
        serve_fake_openai() as open_server,
        serve_fake_openai(api_key="the-key-it-wants") as locked_server,
    ):
        nowhere = _closed_port()
        gateway = OpenAICompatibleClient(secrets.gateway(open_server.port), model="fake-model")
        clients = {
            "gateway": gateway,
            "keyed": OpenAICompatibleClient(
                open_server.base_url, api_key=secrets["api_key setting"], model="fake-model"
            ),
            "gateway 401": OpenAICompatibleClient(
                secrets.gateway(locked_server.port), model="fake-model"
            ),
            "keyed 401": OpenAICompatibleClient(
                locked_server.base_url, api_key=secrets["api_key setting"], model="fake-model"
            ),
            "gateway unreachable": OpenAICompatibleClient(
                secrets.gateway(nowhere), model="fake-model"
            ),
        }
        embeddings = gateway.embeddings("fake-embedder")
        sink = JsonLinesSink(jsonl)
        recorder = TrajectoryRecorder(database)
        async with open_dispatcher(config) as dispatcher:
            sink.attach(dispatcher.bus)
            recorder.attach(dispatcher)
            dispatcher.bus.subscribe(events.append)
            slots, quota = dispatcher.limiters["slots"], dispatcher.limiters["quota"]
            root = workflow("alice", "secrets")

            def needs(permits: int = 1, tokens: int = 1) -> Callable[[], JobRequirements]:
                return lambda: (
                    JobRequirements()
                    .require_rate_limiter(slots, permits)
                    .require_rate_limiter(quota, tokens)
                )

            def submit(
                body: Callable[[JobContext], Awaitable[Any]], **kwargs: Any
            ) -> JobHandle[Any]:
                job = Fn(root, body, requirements=kwargs.pop("requirements", needs()), **kwargs)
                job.upstream_retries = 0  # a transient failure fails the job at once, no pacing
                return dispatcher.submit(job)

            # A job that holds a slot the whole run, so the accounts renew their lease (and
            # notice Redis gone) and top has a running job to show.
            release = trio.Event()

            async def hold(context: JobContext) -> str:
                await release.wait()
                return "held"

            holder = submit(hold, timeout=BOUND * 5)
            calls = {
                f"{name} {'stream' if streamed else 'complete'}": submit(
                    _completes(client, streamed=streamed)
                )
                for name, client in clients.items()
                for streamed in (False, True)
            }
            calls["gateway embeddings"] = submit(_embeds(embeddings))
            answers = {
                name: await _outcome(outputs, name, handle) for name, handle in calls.items()
            }
            assert answers["gateway complete"] == "echo: whole"
            assert answers["gateway stream"] == "echo: streamed"
            assert answers["keyed complete"] == "echo: whole"
            assert answers["gateway embeddings"] == 2
            for name in ("gateway 401", "keyed 401", "gateway unreachable"):
                assert isinstance(answers[f"{name} complete"], Exception), name
                assert isinstance(answers[f"{name} stream"], Exception), name
            # The userinfo went as basic auth, not in the URL; the query key went as written.
            sent = [request.headers.get("authorization") for request in open_server.requests]
            assert f"Basic {secrets['gateway basic-auth header']}" in sent
            assert f"Bearer {secrets['api_key setting']}" in sent

            done = await _run_command(outputs, "top", "--socket", place / "d.sock", "--once")
            assert done.returncode == 0, done.stderr
            assert "slots" in done.stdout and "quota" in done.stdout

            # Redis goes away mid-run: the accounts notice, and a job asking more than the
            # lease holds is refused with RedisUnavailableError.
            await trio.to_thread.run_sync(redis.kill)
            refused = submit(_completes(gateway, streamed=False), requirements=needs(4, 40))
            lost = await _outcome(outputs, "the job refused while Redis is lost", refused)
            assert type(lost).__name__ == "RedisUnavailableError", lost
            await _until(lambda: slots.lost is not None and quota.lost is not None)
            for account in (slots, quota):
                with pytest.raises(Exception) as asked:
                    account.fits([10**6], [])
                outputs.add_error(f"{account.limiter_name}.fits while lost", asked.value)
                outputs.add(f"{account.limiter_name}.status()", repr(account.status()))
                outputs.add(f"{account.limiter_name}.status_indicator", account.status_indicator)
                outputs.add(f"repr({account.limiter_name})", repr(account))
                outputs.add(f"repr({account.limiter_name}.hub)", repr(account.hub))
                outputs.add(f"{account.limiter_name}.hub.safe_url", account.hub.safe_url)
            health = dispatcher.health()
            outputs.add("dispatcher.health().render()", health.render())
            outputs.add("repr(dispatcher.health())", repr(health))
            done = await _run_command(outputs, "top", "--socket", place / "d.sock", "--once")
            assert done.returncode == 0, done.stderr
            assert "redis-lost" in done.stdout or "lost" in done.stdout, done.stdout
            for name, client in clients.items():
                outputs.add(f"repr(client {name})", repr(client))
                outputs.add(f"client {name}.base_url", client.base_url)
            outputs.add("repr(embeddings client)", repr(embeddings))
            release.set()
            assert await _outcome(outputs, "the holder", holder) == "held"
        done = await _run_command(outputs, "health", "--config", path)
        outputs.add("health with Redis gone (exit status)", str(done.returncode))
        sink.close()
        await recorder.aclose()
        for client in clients.values():
            await client.aclose()
    for event in events:
        outputs.add(f"repr({type(event).__name__})", repr(event))
        outputs.add(f"json({type(event).__name__})", dumps_event(event))
    _collect_files(outputs, jsonl, database)
    await _run_command(outputs, "events", jsonl)
    await _run_command(outputs, "trajectory", database, root_workflow(events))


def root_workflow(events: list[ev.JobEvent]) -> str:
    """The workflow id the run's jobs shared."""
    for event in events:
        snapshot = getattr(event, "snapshot", None)
        if snapshot is not None and snapshot.workflow_id:
            return str(snapshot.workflow_id)
    raise AssertionError("no event named a workflow")


# -- the same through the models layer, re-runs included, in virtual time ------------------------


async def test_calls_through_the_models_layer_and_their_re_runs_print_no_secret(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """Model calls on providers whose base URL and key hold the secrets: a 500 re-run then an
    answer through the gateway, a 401 with the key, an unreachable gateway re-run until its
    budget is spent; their retry events, failures, records and logs hold no secret."""
    secrets = Secrets()
    outputs = Outputs()
    jsonl, database = tmp_path / "events.jsonl", tmp_path / "runs.db"
    events: list[ev.JobEvent] = []
    with every_log_record() as logs:
        async with (
            serve_fake_openai(FakeReply.server_error()) as open_server,
            serve_fake_openai(api_key="the-key-it-wants") as locked_server,
        ):
            pool = HttpSettings(pool_size=8)
            keys = Providers({})
            keys.register(
                openai_compatible("gateway", secrets.gateway(open_server.port), http_settings=pool)
            )
            keys.register(
                openai_compatible(
                    "keyed",
                    locked_server.base_url,
                    api_key=secrets["api_key setting"],
                    http_settings=pool,
                )
            )
            keys.register(
                openai_compatible("gone", secrets.gateway(_closed_port()), http_settings=pool)
            )
            models = ModelRuntime(
                catalog(
                    *(
                        entry(name, grade=grade, provider_key=name, wire_model_id="fake-model")
                        for name, grade in (
                            ("gateway", "SMALL"),
                            ("keyed", "MEDIUM"),
                            ("gone", "LARGE"),
                        )
                    )
                ),
                providers=keys,
            )
            sink = JsonLinesSink(jsonl)
            recorder = TrajectoryRecorder(database)
            async with open_dispatcher(
                DispatcherConfig(seed=7, log_events=True), models=models
            ) as dispatcher:
                sink.attach(dispatcher.bus)
                recorder.attach(dispatcher)
                dispatcher.bus.subscribe(events.append)
                answers = {}
                for grade in (Grade.SMALL, Grade.MEDIUM, Grade.LARGE):
                    conversation = Conversation(output=50, grade=grade)
                    conversation.put_objective(f"say {grade.value}")
                    call = LLMCall(workflow("bob", "models"), conversation, answer=TextAnswer())
                    answers[grade] = await _outcome(
                        outputs, f"the {grade.value} call", dispatcher.submit(call), bound=3600
                    )
                outputs.add("repr(models)", repr(models))
            sink.close()
            await recorder.aclose()
    outputs.add("the log records", "\n".join(logs.lines))
    for event in events:
        outputs.add(f"repr({type(event).__name__})", repr(event))
        outputs.add(f"json({type(event).__name__})", dumps_event(event))
    _collect_files(outputs, jsonl, database)
    assert answers[Grade.SMALL] == "echo: say SMALL"
    assert isinstance(answers[Grade.MEDIUM], Exception) and isinstance(
        answers[Grade.LARGE], Exception
    )
    retries = [event for event in events if isinstance(event, ev.TransientErrorRetryEvent)]
    assert retries and all("gateway-user:***@127.0.0.1" in event.reason for event in retries)
    assert any("api_key=***" in text for where, text in outputs.texts if where == "the log records")
    outputs.assert_no_secret(secrets)
