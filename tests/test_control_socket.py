"""The control socket: a running dispatcher's snapshot over a real Unix socket, its owner-only
place, its read-only protocol, and clients that cannot hurt it. Everything here runs in one trio
run on the virtual clock (the socket is real; both ends are in this process, so nothing waits on
the real world)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, DispatcherState, open_dispatcher
from nucleo_trio.errors import ConfigError
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow
from nucleo_trio.jobs.state import JobType
from nucleo_trio.observability import HealthSnapshot, LimiterRow, QueueSizes, control
from nucleo_trio.observability.control import (
    CLIENT_TIMEOUT,
    MAX_CLIENTS,
    MAX_REQUEST_BYTES,
    ControlServer,
    ControlSocketError,
    FailureRow,
    LiveSnapshot,
    ParkedRow,
    RunningRow,
    check_socket_directory,
    request_snapshot,
)

from .conftest import settle


@pytest.fixture
def place() -> Iterator[Path]:
    """A short, owner-only directory for sockets (a Unix socket's path is at most 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="nt-ctl-"))
    directory.chmod(0o700)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


slots = CountingGate("render", 2)


class Render(Tool[str]):
    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(slots)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(10)
        return "rendered"


class Publish(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        raise RuntimeError("the printer is on fire")


def _config(path: Path) -> DispatcherConfig:
    return DispatcherConfig(control_socket=str(path))


async def _exchange(path: Path, request: bytes, *, eof: bool = False) -> bytes:
    """Send ``request`` raw (then the end of the stream, with ``eof``) and read everything the
    server answers until it closes."""
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        await stream.send_all(request)
        if eof:
            await stream.send_eof()
        received = b""
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


# -- what it answers ------------------------------------------------------------------------------
async def test_the_snapshot_shows_accounts_running_parked_and_failed_jobs(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        root = workflow("alice", "posters")
        handles = [dispatcher.submit(Render(root)) for _ in range(5)]
        failed = dispatcher.submit(Publish(root))
        with pytest.raises(RuntimeError):
            await failed.result()
        await trio.sleep(1)
        snapshot = await request_snapshot(path)
        for handle in handles:
            await handle.result()

    assert snapshot.state == "RUNNING"
    assert snapshot.pid == os.getpid()
    render = snapshot.health.limiter("render")
    assert render is not None
    assert (render.used, render.capacity, render.waiters) == (2, 2, 3)
    assert snapshot.health.running == ((JobType.TOOL, 2),)
    assert snapshot.health.queues == QueueSizes(0, 0, 3)
    assert [row.name for row in snapshot.running] == ["Render", "Render"]
    assert snapshot.running_total == 2
    assert all(row.attempt == 1 and row.kind == "TOOL" for row in snapshot.running)
    assert snapshot.parked_total == 3
    assert [(row.name, row.held_on, row.seconds) for row in snapshot.parked] == [
        ("Render", ("render",), 1.0)
    ] * 3
    assert [row.workflow_id for row in snapshot.parked] == [root.workflow_id] * 3
    assert len(snapshot.failures) == 1
    failure = snapshot.failures[0]
    assert (failure.name, failure.state) == ("Publish", "FAILED")
    assert failure.message == "Job failed: the printer is on fire"
    assert failure.job_id == failed.job_id
    assert not path.exists(), "the socket file is removed when the dispatcher stops"


async def test_the_socket_is_owner_only_and_answers_until_the_run_ends(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        info = os.lstat(path)
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        first = await request_snapshot(path)
        await trio.sleep(30)
        second = await request_snapshot(path)
        assert (first.state, second.state) == ("RUNNING", "RUNNING")
        assert (first.health.at, second.health.at) == (0.0, 30.0)
    assert dispatcher.state.value is DispatcherState.STOPPED
    with pytest.raises(ControlSocketError, match="no such socket"):
        await request_snapshot(path)


async def test_the_recent_failures_are_the_latest_twenty_newest_first(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        root = workflow("bob", "publish")
        ids = []
        for _ in range(25):
            handle = dispatcher.submit(Publish(root))
            with pytest.raises(RuntimeError):
                await handle.result()
            ids.append(handle.job_id)
            await trio.sleep(1)
        snapshot = await request_snapshot(path)
    assert [row.job_id for row in snapshot.failures] == ids[::-1][:20]


class Rant(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        raise RuntimeError("no " * 1000)


async def test_a_long_failure_message_is_cut_to_keep_the_answer_small(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        with pytest.raises(RuntimeError):
            await dispatcher.submit(Rant(workflow("erin", "rant"))).result()
        snapshot = await request_snapshot(path)
    (failure,) = snapshot.failures
    assert len(failure.message) == 500
    assert failure.message.startswith("Job failed: no no no")
    assert failure.message.endswith("...")


async def test_the_dispatcher_state_is_a_value_tasks_can_wait_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[DispatcherState, float]] = []

    async with trio.open_nursery() as nursery:
        async with open_dispatcher() as dispatcher:
            assert dispatcher.state.value is DispatcherState.RUNNING

            async def stopping() -> None:
                await dispatcher.state.wait_value(DispatcherState.STOPPING)
                seen.append((DispatcherState.STOPPING, trio.current_time()))
                await dispatcher.state.wait_value(DispatcherState.STOPPED)
                seen.append((DispatcherState.STOPPED, trio.current_time()))

            nursery.start_soon(stopping)
            await trio.sleep(5)
        assert dispatcher.state.value.name == "STOPPED"
    assert [state for state, _ in seen] == [DispatcherState.STOPPING, DispatcherState.STOPPED]
    assert seen[0][1] == 5.0


# -- where it may live ----------------------------------------------------------------------------
async def test_a_missing_directory_refuses_the_start(place: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        async with open_dispatcher(_config(place / "nowhere" / "d.sock")):
            pytest.fail("the block must not run")


async def test_a_directory_others_can_write_refuses_the_start(place: Path) -> None:
    shared = place / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=r"writable by others \(mode 0777\)"):
        async with open_dispatcher(_config(shared / "d.sock")):
            pytest.fail("the block must not run")
    assert not (shared / "d.sock").exists()


def test_the_directory_check_names_a_file_that_is_not_a_directory(place: Path) -> None:
    (place / "plain").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        check_socket_directory(place / "plain" / "d.sock")
    assert check_socket_directory(place / "d.sock") == place / "d.sock"


async def test_a_file_at_the_path_is_refused_and_left_alone(place: Path) -> None:
    path = place / "d.sock"
    path.write_text("my notes")
    with pytest.raises(
        ConfigError, match="something that is not a socket is there; not replacing it"
    ):
        async with open_dispatcher(_config(path)):
            pytest.fail("the block must not run")
    assert path.read_text() == "my notes"


async def test_a_dead_dispatchers_socket_is_replaced(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    leftover = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await leftover.bind(str(path))
    leftover.close()  # the file stays, nobody listens: what a killed process leaves
    assert path.exists()
    async with open_dispatcher(_config(path)):
        snapshot = await request_snapshot(path)
    assert snapshot.state == "RUNNING"


async def test_a_socket_another_dispatcher_serves_is_refused(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)):
        with pytest.raises(ConfigError, match="another process is serving on it"):
            async with open_dispatcher(_config(path)):
                pytest.fail("the block must not run")
        assert (await request_snapshot(path)).state == "RUNNING"


def test_the_config_refuses_a_socket_path_it_could_never_bind() -> None:
    with pytest.raises(ConfigError, match="control_socket must be the path of a Unix socket"):
        DispatcherConfig(control_socket="  ")
    with pytest.raises(ConfigError, match="control_socket must be the path of a Unix socket"):
        DispatcherConfig.from_mapping({"control_socket": 5})
    with pytest.raises(ConfigError, match="over the 107 a Unix socket's path may have"):
        DispatcherConfig(control_socket="/run/" + "x" * 110)
    assert DispatcherConfig().control_socket is None
    assert DispatcherConfig.from_mapping({"control_socket": "/run/a.sock"}).control_socket == (
        "/run/a.sock"
    )


def test_the_server_refuses_bad_bounds() -> None:
    with pytest.raises(ValueError, match="max_clients must be a positive int"):
        ControlServer(None, "/run/a.sock", max_clients=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="client_timeout must be finite seconds > 0"):
        ControlServer(None, "/run/a.sock", client_timeout=float("nan"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failures must be a positive int"):
        ControlServer(None, "/run/a.sock", failures=True)  # type: ignore[arg-type]


# -- the protocol ---------------------------------------------------------------------------------
async def test_only_the_snapshot_request_is_understood(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)):
        for request in (b'{"get": "shutdown"}\n', b"not json\n", b"[1, 2]\n", b"\n"):
            answer = json.loads(await _exchange(path, request))
            assert answer["ok"] is False
            assert 'this socket answers {"get": "snapshot"}' in answer["error"]
        too_long = json.loads(await _exchange(path, b"x" * (MAX_REQUEST_BYTES + 10) + b"\n"))
        assert too_long == {"ok": False, "error": f"a request is at most {MAX_REQUEST_BYTES} bytes"}
        # A request may end with the stream instead of a newline.
        answer = json.loads(await _exchange(path, b'{"get": "snapshot"}', eof=True))
        assert answer["ok"] is True and answer["protocol"] == 1
        assert LiveSnapshot.from_json(answer["snapshot"]).state == "RUNNING"


async def test_a_silent_client_is_dropped_after_the_timeout_and_blocks_nobody_else(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        start = trio.current_time()
        silent = [await trio.open_unix_socket(str(path)) for _ in range(MAX_CLIENTS)]
        await settle()
        # Every slot is taken by a client that says nothing: the next one waits in the backlog
        # until the silent ones are dropped, then is answered.
        snapshot = await request_snapshot(path, within=CLIENT_TIMEOUT * 3)
        assert trio.current_time() - start == CLIENT_TIMEOUT
        assert snapshot.state == "RUNNING"
        for stream in silent:
            assert await stream.receive_some(10) == b"", "a dropped client sees the end"
            await stream.aclose()
        # The jobs never noticed.
        root = workflow("carol", "after")
        assert await dispatcher.submit(Render(root)).result() == "rendered"


async def test_clients_that_hang_up_at_once_leave_the_server_serving(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)):
        for _ in range(3 * MAX_CLIENTS):
            stream = await trio.open_unix_socket(str(path))
            await stream.aclose()
        half = await trio.open_unix_socket(str(path))
        await half.send_all(b'{"get": "sna')
        await half.aclose()
        await settle()
        assert (await request_snapshot(path)).state == "RUNNING"


async def test_a_broken_snapshot_ends_one_answer_and_a_broken_server_only_itself(
    autojump_clock: trio.testing.MockClock,
    place: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:

        def broken(*args: object) -> LiveSnapshot:
            raise RuntimeError("a bug while building the snapshot")

        monkeypatch.setattr(control, "live_snapshot", broken)
        with pytest.raises(ControlSocketError, match="closed the connection without answering"):
            await request_snapshot(path)
        assert "serving a client failed" in caplog.text
        monkeypatch.undo()
        assert (await request_snapshot(path)).state == "RUNNING"

        async def crash(*args: object) -> None:
            raise RuntimeError("the accept loop broke")

        # A server whose accept loop breaks stops serving; the dispatcher runs on.
        server = ControlServer(dispatcher, place / "second.sock")
        monkeypatch.setattr(server, "_accept", crash)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
        assert "stopped serving" in caplog.text
        assert not (place / "second.sock").exists()
        assert dispatcher.is_running
        assert (await request_snapshot(path)).state == "RUNNING"


# -- the client -----------------------------------------------------------------------------------
async def _fake_server(path: Path, answer: bytes, task_status: trio.TaskStatus[None]) -> None:
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(str(path))
    listener.listen(1)
    task_status.started()
    with listener:
        connection, _ = await listener.accept()
        with connection:
            await connection.recv(1024)
            await connection.send(answer)


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (b"<html>\n", "the answer is not JSON"),
        (b'{"ok": false, "error": "busy"}\n', "refused: busy"),
        (b'{"ok": true, "protocol": 2, "snapshot": {}}\n', "answers protocol 2"),
        (b'{"ok": true, "protocol": 1, "snapshot": {"state": 1}}\n', "not a control-socket"),
        (b"", "closed the connection without answering"),
    ],
)
async def test_the_client_says_what_is_wrong_with_an_answer(
    autojump_clock: trio.testing.MockClock, place: Path, answer: bytes, complaint: str
) -> None:
    path = place / "fake.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(_fake_server, path, answer)
        with pytest.raises(ControlSocketError, match=complaint):
            await request_snapshot(path)


async def test_the_client_names_a_socket_nobody_listens_on(place: Path) -> None:
    path = place / "stale.sock"
    leftover = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await leftover.bind(str(path))
    leftover.close()
    with pytest.raises(ControlSocketError, match="nobody is listening"):
        await request_snapshot(path)


async def test_the_client_gives_up_on_a_server_that_never_answers(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "mute.sock"
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(str(path))
    listener.listen(1)
    with listener, pytest.raises(ControlSocketError, match="no answer within 2 s"):
        await request_snapshot(path, within=2)
    assert trio.current_time() == 2.0


# -- the record -----------------------------------------------------------------------------------
def _sample() -> LiveSnapshot:
    return LiveSnapshot(
        state="RUNNING",
        pid=4242,
        wall=1_800_000_000.5,
        health=HealthSnapshot(
            limiters=(
                LimiterRow("render", "semaphore", 2, 2, waiters=3),
                LimiterRow("search", "token_bucket", 600.0, 12.5, status="throttle:2.0x"),
            ),
            memory="memory 41.3% (6.4/15.5 GiB)",
            running={JobType.TOOL: 2, JobType.THINKER: 1},
            workflows_active=2,
            queues=QueueSizes(1, 0, 3),
            at=12.0,
        ),
        running=(
            RunningRow(
                job_id="R-1", name="Render", kind="TOOL", workflow_id="w", attempt=2, seconds=3.5
            ),
        ),
        running_total=3,
        parked=(
            ParkedRow(
                job_id="R-2",
                name="Render",
                kind="TOOL",
                workflow_id="w",
                seconds=1.0,
                held_on=("render", "memory"),
            ),
        ),
        parked_total=3,
        failures=(
            FailureRow(
                job_id="P-1",
                name="Publish",
                state="TIMED_OUT",
                at=1_800_000_000.0,
                message="Job timed out after 2 seconds",
            ),
        ),
        status_lines=(("render", "permits 2/2 active, last activity at 11.500s"),),
    )


def test_a_snapshot_survives_json_whole() -> None:
    sample = _sample()
    assert LiveSnapshot.from_json(json.loads(json.dumps(sample.to_json()))) == sample


@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        (lambda data: data.pop("health"), "KeyError"),
        (lambda data: data.update(pid="4242"), "pid is '4242', not a number"),
        (lambda data: data["health"].update(limiters={}), "health.limiters is dict, not a list"),
        (lambda data: data["health"]["limiters"][0].update(capacity=True), "capacity is True"),
        (
            lambda data: data["health"].update(running=[["NOPE", 1]]),
            "'NOPE' is not a valid JobType",
        ),
        (lambda data: data.update(status_lines=[["render"]]), "a status line has 1 items"),
        (lambda data: data.update(status_lines=[["render", 7]]), "a status line is 7"),
    ],
)
def test_a_damaged_snapshot_is_refused_naming_the_damage(damage: object, complaint: str) -> None:
    data = _sample().to_json()
    damage(data)  # type: ignore[operator]
    with pytest.raises(ValueError, match=complaint):
        LiveSnapshot.from_json(data)


def test_a_snapshot_from_a_server_that_sends_no_status_lines_reads_as_none() -> None:
    data = _sample().to_json()
    del data["status_lines"]
    snapshot = LiveSnapshot.from_json(data)
    assert snapshot.status_lines == ()
    assert snapshot.status_line("render") is None
    assert _sample().status_line("render") == "permits 2/2 active, last activity at 11.500s"


# -- accounts at rest, and their status lines ----------------------------------------------------
db = CountingGate("db", 4)


class Query(Tool[str]):
    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(db)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(1)
        return "rows"


async def test_an_account_that_goes_idle_stays_in_the_snapshot_read_live(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    """Admission forgets "db" once its query ends, and the health report leaves it out; the
    socket, which showed it busy, keeps showing it, at rest, with its status line."""
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        handle = dispatcher.submit(Query(workflow("alice", "report")))
        await trio.sleep(0.5)
        busy = await request_snapshot(path)
        await handle.result()
        assert dispatcher.health().limiter("db") is None  # forgotten by admission
        idle = await request_snapshot(path)
        again = await request_snapshot(path)
    for snapshot, used in ((busy, 1), (idle, 0), (again, 0)):
        row = snapshot.health.limiter("db")
        assert row is not None, snapshot.health.limiters
        assert (row.used, row.capacity, row.waiters) == (used, 4, 0)
        line = snapshot.status_line("db")
        assert line is not None and line.startswith(f"permits {used}/4 active, last activity")
    assert [name for name, _ in idle.status_lines] == [row.name for row in idle.health.limiters]
    http = idle.status_line("http")
    assert http is not None and http.startswith("permits 0/"), idle.status_lines


async def test_an_account_never_seen_busy_is_not_listed(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        await dispatcher.submit(Query(workflow("alice", "report"))).result()
        snapshot = await request_snapshot(path)
    assert snapshot.health.limiter("db") is None  # busy only between two snapshots
    assert [name for name, _ in snapshot.status_lines] == ["http"]


class Broken(CountingGate):
    """Keeps the contract when admission checks it; its status fails once ``fell`` is set."""

    fell = False

    def status(self) -> control.Any:
        if self.fell:
            raise RuntimeError("the gauge fell off")
        return super().status()


async def test_a_status_that_cannot_be_read_is_a_line_saying_so(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    broken = Broken("broken", 1)

    class UsesBroken(Tool[str]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(broken)

        async def execute(self, context: JobContext) -> str:
            await trio.sleep(1)
            return "done"

    path = place / "d.sock"
    async with open_dispatcher(_config(path)) as dispatcher:
        handle = dispatcher.submit(UsesBroken(workflow("alice", "x")))
        await trio.sleep(0.5)
        broken.fell = True
        snapshot = await request_snapshot(path)
        broken.fell = False
        await handle.result()
    assert snapshot.status_line("broken") == "unavailable (RuntimeError: the gauge fell off)"


def test_a_server_remembers_at_most_its_bound_of_idle_accounts() -> None:
    remembered = control._Remembered(2)
    a, b, c = (CountingGate(name, 1) for name in "abc")
    assert remembered.note([a, b]) == (a, b)
    assert remembered.note([a]) == (b, a)  # a seen again: the most recent
    assert remembered.note([c]) == (a, c)  # b, the least recently busy, is let go
    assert control.REMEMBERED_ACCOUNTS == 64
