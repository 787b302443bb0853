"""Files from outside never crash a reader (issue 21, item 3; and item 1's import by path).

Every reader of a file the runtime did not just write itself, the events reader, the
``nucleo-trio events`` and ``trajectory`` commands, a configuration file, ``top``'s client,
is handed the hostile file it must survive: bytes that are not UTF-8, lines nested past any
parser's recursion, NaN and Infinity and years past 9999, a line far longer than memory should
hold, type names by the hundred thousand, rows of the wrong type, rows that are their own
parent, a real recording of orchestrators nested deeper than Python recurses. Each one is
refused with the project's own error (or rendered), naming the file, the line or row, and what
is wrong; the commands run in a subprocess and say it in one line on stderr, exit 1, and print
no traceback. Each test builds its hostile file itself.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import ConfigError, JobTimeoutError, NucleoSystemError
from nucleo_trio.jobs import (
    Identifiable,
    JobContext,
    JobSnapshot,
    JobState,
    JobType,
    Orchestrator,
    workflow,
)
from nucleo_trio.observability import (
    INDENTED_LEVELS,
    RECORDER_SCHEMA,
    RecordingError,
    TrajectoryRecorder,
    render_trajectory,
    trajectory,
)
from nucleo_trio.observability.control import ControlServer
from nucleo_trio.observability.jsonl import (
    MAX_NESTING,
    RECORDED_TYPES_KEPT,
    EventFileError,
    ForeignError,
    RecordedError,
    dumps_event,
    read_event_records,
    read_events,
)

from .test_top import _sample

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``nucleo-trio ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nucleo_trio", *map(str, args)],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=120,
        cwd=cwd or ROOT,
    )


def _refused(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command failed with one line on stderr holding every ``expected`` piece."""
    assert done.returncode == 1, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for piece in expected:
        assert piece in lines[0], (piece, lines[0])
    return lines[0]


def _started(timestamp: float = 1_700_000_000.0, **extra: Any) -> dict[str, Any]:
    snapshot = JobSnapshot(
        job_id="Fetch-1a2b3c4d5e6f",
        workflow_id="crawl-0a0b0c0d0e0f",
        parent_job_id=None,
        user_id="alice",
        job_class="Fetch",
        job_class_qualname="app.tools.Fetch",
        kind=JobType.TOOL,
        name="Fetch",
        state=JobState.RUNNING,
        attempt_number=1,
        created_at=1_700_000_000.0,
    )
    data: dict[str, Any] = json.loads(
        dumps_event(ev.JobStartedEvent(snapshot=snapshot, timestamp=1_700_000_000.0, attempt=1))
    )
    data["timestamp"] = timestamp
    data.update(extra)
    return data


def _failed(error_type: str, message: str = "boom") -> dict[str, Any]:
    return {
        "kind": "JobFailedEvent",
        "snapshot": _started()["snapshot"],
        "timestamp": 1_700_000_000.0,
        "error": {"type": error_type, "message": message},
    }


def _write_lines(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


# -- the JSONL reader -----------------------------------------------------------------------------


def test_bytes_that_are_not_utf8_are_refused_naming_the_line_and_the_byte(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "events.jsonl",
        _line(_started()),
        b'{"kind": "CancelHeartbeat", "heartbeat_id": "caf\xe9"}',
    )
    with pytest.raises(EventFileError, match=rf"^{path}:2: not UTF-8 text \(byte 0xe9 at column"):
        list(read_events(path))
    with pytest.raises(EventFileError, match=rf"^{path}:2: not UTF-8"):
        list(read_event_records(path))


@pytest.mark.parametrize("opening", ["[", '{"a": '])
def test_a_line_nested_past_the_parser_is_refused_not_a_recursion_error(
    tmp_path: Path, opening: str
) -> None:
    closing = "]" if opening == "[" else "}"
    deep = opening * 100_000 + "1" + closing * 100_000
    path = tmp_path / "events.jsonl"
    path.write_text(
        f'{json.dumps(_started())}\n{{"kind": "JobProgressEvent", "payload": {deep}}}\n'
    )
    with pytest.raises(EventFileError, match=rf"^{path}:2: nested more than {MAX_NESTING}"):
        list(read_events(path))
    # Just under the limit reads back; brackets inside a string do not count.
    fine = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)
    path.write_text(
        json.dumps({"kind": "CancelHeartbeat", "heartbeat_id": "[" * 5000, "timestamp": 1.0})
        + f'\n{{"kind": "JobProgressEvent", "payload": {fine}}}\n'
    )
    (beat,) = read_events(_first_line(path, tmp_path))
    assert isinstance(beat, ev.CancelHeartbeat) and beat.heartbeat_id == "[" * 5000
    records = [data for _, data in read_event_records(path)]
    assert records[1]["payload"] == json.loads(fine)


def _first_line(path: Path, folder: Path) -> Path:
    first = folder / "first.jsonl"
    first.write_text(path.read_text().splitlines()[0] + "\n")
    return first


@pytest.mark.parametrize(
    ("written", "shown"),
    [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("1e300", "1e+300")],
)
def test_a_timestamp_no_date_can_hold_is_refused_by_the_rebuild(
    tmp_path: Path, written: str, shown: str
) -> None:
    path = tmp_path / "events.jsonl"
    line = json.dumps(_started()).replace('"timestamp": 1700000000.0', f'"timestamp": {written}')
    path.write_text(line + "\n")
    with pytest.raises(
        EventFileError,
        match=rf"^{path}:1: JobStartedEvent.timestamp: {re.escape(shown)} is not a moment",
    ):
        list(read_events(path))
    # The raw records are the file as written: NaN stays NaN.
    ((number, record),) = read_event_records(path)
    assert number == 1
    stamp = record["timestamp"]
    assert math.isnan(stamp) if shown == "nan" else stamp == float(written)


def test_a_number_longer_than_python_reads_is_refused_as_not_json(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(_started())[:-1] + ', "attempt": ' + "9" * 5000 + "}\n")
    with pytest.raises(EventFileError, match=rf"^{path}:1: not JSON \(Exceeds the limit"):
        list(read_events(path))


def test_a_line_over_the_limit_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    limit = 256 * 1024
    path = tmp_path / "events.jsonl"
    huge = json.dumps({"kind": "CancelHeartbeat", "heartbeat_id": "x" * (4 * 1024 * 1024)})
    path.write_text(f"{json.dumps(_started())}\n{huge}\n{json.dumps(_started())}\n")
    tracemalloc.start()
    try:
        seen: list[int] = []
        with pytest.raises(EventFileError, match=rf"^{path}:2: the line is over {limit} bytes"):
            for number, _ in read_event_records(path, max_line_bytes=limit):
                seen.append(number)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == [1]
    # The 4 MiB line was never held: what was read at once is bounded by the limit.
    assert peak < 4 * limit, peak
    # A line exactly at the limit (its newline not counted) is read.
    exact = json.dumps({"kind": "CancelHeartbeat", "heartbeat_id": ""})
    padded = exact[:-1] + " " * (limit - len(exact)) + "}"
    assert len(padded) == limit
    path.write_text(padded + "\n")
    assert [n for n, _ in read_event_records(path, max_line_bytes=limit)] == [1]
    with pytest.raises(ValueError, match="max_line_bytes must be at least 1"):
        list(read_event_records(path, max_line_bytes=0))


def test_the_default_limit_refuses_a_line_of_many_megabytes(tmp_path: Path) -> None:
    from nucleo_trio.observability.jsonl import DEFAULT_MAX_LINE_BYTES

    path = tmp_path / "events.jsonl"
    with path.open("w") as out:
        out.write('{"kind": "CancelHeartbeat", "heartbeat_id": "')
        out.write("y" * (DEFAULT_MAX_LINE_BYTES + 10))
        out.write('"}\n')
    with pytest.raises(
        EventFileError, match=rf"{path}:1: the line is over {DEFAULT_MAX_LINE_BYTES}"
    ):
        list(read_events(path))


# -- error types: resolved without importing, bounded ---------------------------------------------


def test_an_error_type_the_file_names_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "hostile_errors_mod.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write_lines(tmp_path / "events.jsonl", _line(_failed("hostile_errors_mod.Boom")))
    (event,) = read_events(path)
    assert isinstance(event, ev.JobFailedEvent)
    error = event.error
    assert isinstance(error, ForeignError) and isinstance(error, RecordedError)
    assert type(error).__name__ == "Boom"
    assert error.type_name == "hostile_errors_mod.Boom"
    assert str(error) == "boom"
    assert "hostile_errors_mod" not in sys.modules
    assert not marker.exists()


class ShopError(Exception):
    """An application's own error, which the program names to the reader."""


def test_known_types_are_stood_in_for_so_except_clauses_match(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "events.jsonl",
        _line(_failed("LookupError", "no such page")),
        _line(_failed("nucleo_trio.errors.JobTimeoutError", "Job timed out after 2 seconds")),
        _line(_failed("nucleo_trio.errors.NucleoSystemError", "db: gone")),
        _line(_failed(f"{__name__}.ShopError", "out of stock")),
        _line(_failed("OSError", "disk full")),
        _line(_failed("KeyboardInterrupt", "")),
        _line(_failed("ExceptionGroup", "two")),
    )
    without, with_shop = list(read_events(path)), list(read_events(path, known_errors=[ShopError]))
    errors = [event.error for event in with_shop]
    lookup, timeout, system, shop, os_error, interrupt, group = errors
    assert isinstance(lookup, LookupError) and repr(lookup) == "LookupError('no such page')"
    try:
        raise lookup
    except LookupError as caught:
        assert caught is lookup
    assert isinstance(timeout, JobTimeoutError) and str(timeout) == "Job timed out after 2 seconds"
    assert isinstance(system, NucleoSystemError)
    assert isinstance(shop, ShopError) and not isinstance(shop, ForeignError)
    assert isinstance(os_error, OSError) and str(os_error) == "disk full"
    # Not a plain Exception: named, but not stood in for.
    assert isinstance(interrupt, ForeignError) and not isinstance(interrupt, KeyboardInterrupt)
    assert isinstance(group, ForeignError) and type(group).__name__ == "ExceptionGroup"
    assert all(isinstance(error, RecordedError) for error in errors)
    # Without known_errors, the application's type is foreign, named as it was.
    assert isinstance(without[3].error, ForeignError)
    assert type(without[3].error).__name__ == "ShopError"
    with pytest.raises(TypeError, match="known_errors takes exception classes"):
        list(read_events(path, known_errors=[int]))  # type: ignore[list-item]


def test_endless_distinct_type_names_cost_a_bounded_memory(tmp_path: Path) -> None:
    names = 3 * RECORDED_TYPES_KEPT
    path = tmp_path / "events.jsonl"
    with path.open("w") as out:
        for number in range(names):
            out.write(json.dumps(_failed(f"mod{number}.Error{number}")) + "\n")
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        read = 0
        for event in read_events(path):
            assert isinstance(event.error, ForeignError)
            read += 1
        del event
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == names
    # What stays is the classes the reader keeps for reuse (a class is about 2 KB), not one
    # per name: 3,072 classes would hold over 5 MB.
    assert after - before < names * 1000, after - before


def test_an_overlong_type_name_is_refused(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "events.jsonl", _line(_failed("a" * 100_000)))
    with pytest.raises(EventFileError, match=rf"^{path}:1: JobFailedEvent.error: an error's type"):
        list(read_events(path))


def test_a_heartbeat_naming_a_module_not_imported_is_refused_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "hostile_jobs_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    heartbeat = {
        "id": "nightly",
        "run_at": 1_800_000_000.0,
        "job_class": "hostile_jobs_mod:Nightly",
        "user_id": "alice",
        "conversation_id": None,
        "scope_guard": [],
        "input": None,
        "recurrence": None,
    }
    line = {"kind": "HeartbeatScheduled", "timestamp": 1_700_000_000.0, "heartbeat": heartbeat}
    path = _write_lines(tmp_path / "events.jsonl", _line(line))
    with pytest.raises(
        EventFileError,
        match=rf"^{path}:1: HeartbeatScheduled.heartbeat: the heartbeat names "
        r"hostile_jobs_mod:Nightly, whose module hostile_jobs_mod this program has not imported",
    ):
        list(read_events(path))
    # A scope's type is looked up the same way.
    heartbeat["job_class"] = f"{__name__}:ShopError"
    heartbeat["scope_guard"] = [{"composite": [{"type": "hostile_jobs_mod:Scope", "value": {}}]}]
    path = _write_lines(tmp_path / "events.jsonl", _line(line))
    with pytest.raises(EventFileError, match="hostile_jobs_mod:Scope, whose module"):
        list(read_events(path))
    assert "hostile_jobs_mod" not in sys.modules
    assert not marker.exists()


# -- nucleo-trio events ---------------------------------------------------------------------------


def test_the_events_command_refuses_each_hostile_line_in_one_line(tmp_path: Path) -> None:
    good = _line(_started())
    cases = {
        "latin1.jsonl": (b'{"kind": "CancelHeartbeat", "heartbeat_id": "caf\xe9"}', "not UTF-8"),
        "deep.jsonl": (b'{"kind": "x", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
        "digits.jsonl": (b'{"kind": "x", "a": ' + b"9" * 5000 + b"}", "not JSON"),
        "long.jsonl": (b'{"kind": "x", "a": "' + b"z" * 3000 + b'"}', "is over 2048 bytes"),
    }
    for name, (hostile, what) in cases.items():
        path = _write_lines(tmp_path / name, good, hostile)
        done = _cli("events", path, "--max-line-bytes", "2K" if name == "long.jsonl" else "4M")
        _refused(done, f"nucleo-trio events: {path}:2: ", what)
        assert done.stdout.count("JobStartedEvent") == 1  # the event before it was printed


def test_the_events_command_prints_an_impossible_timestamp_as_written(tmp_path: Path) -> None:
    lines = [
        json.dumps({"kind": "CancelHeartbeat", "heartbeat_id": "a", "timestamp": stamp})
        for stamp in (math.nan, math.inf, 1e300, 10**40, 1_700_000_000.5)
    ]
    hostile = '{"kind": "CancelHeartbeat", "message": "\\u001b[2J\\ud800 gone", "timestamp": 1}'
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([*lines, hostile]) + "\n")
    done = _cli("events", path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    rows = done.stdout.splitlines()
    assert [row.split()[0] for row in rows] == [
        "NaN",
        "Infinity",
        "1e+300",
        "100000000000000000000...",
        "2023-11-14T22:13:20.500Z",
        "1970-01-01T00:00:01.000Z",
    ]
    assert all(row.split()[1] == "CancelHeartbeat" for row in rows)
    # An escape sequence is shown, not obeyed; a lone surrogate is shown, not a crash.
    assert rows[-1].endswith("\\x1b[2J\\ud800 gone")
    assert "\x1b" not in done.stdout
    as_json = _cli("events", path, "--json")
    assert as_json.returncode == 0, as_json.stderr
    back = [json.loads(row) for row in as_json.stdout.splitlines()]
    assert back[-1]["message"] == "\x1b[2J\ud800 gone"
    assert math.isnan(back[0]["timestamp"]) and back[1]["timestamp"] == math.inf


# -- configuration files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        (
            "latin1.toml",
            b"http_connections = 4\nname = 'caf\xe9'\n",
            "not UTF-8 text (byte 0xe9 at line 2",
        ),
        ("deep.toml", b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests arrays or tables"),
        ("tables.toml", b"x = " + b"{a=" * 50_000 + b"1" + b"}" * 50_000 + b"\n", "nests arrays"),
        ("deep.json", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests arrays or tables"),
        ("latin1.json", b'{"seed": 1, "name": "\xff"}', "not UTF-8 text (byte 0xff at line 1"),
        ("digits.json", b'{"seed": ' + b"7" * 5000 + b"}", "Exceeds the limit"),
        ("digits.toml", b"seed = " + b"7" * 5000 + b"\n", "not valid TOML"),
    ],
)
def test_a_hostile_configuration_file_is_a_config_error_naming_it(
    tmp_path: Path, name: str, content: bytes, what: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        DispatcherConfig.from_file(path)
    assert str(path) in str(refused.value)
    assert what in str(refused.value)


def test_a_nested_unknown_key_is_named_without_writing_it_all_out(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"bogus": ' + "[" * 500 + "]" * 500 + "}")
    with pytest.raises(
        ConfigError, match=rf"in {path}: unknown key\(s\) bogus = \[\[\["
    ) as refused:
        DispatcherConfig.from_file(path)
    assert len(str(refused.value)) < 1000


@pytest.mark.parametrize("command", ["health", "top"])
def test_the_commands_that_read_a_config_refuse_a_hostile_one_in_one_line(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "dispatcher.toml"
    path.write_bytes(b"seed = 1\ncontrol_socket = '\xff'\n")
    _refused(_cli(command, "--config", path), f"nucleo-trio {command}: ", str(path), "not UTF-8")
    path.write_bytes(b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    _refused(_cli(command, "--config", path), str(path), "nests arrays or tables")


# -- nucleo-trio trajectory -----------------------------------------------------------------------


class Nest(Orchestrator[int]):
    """An orchestrator that submits one more of itself, ``below`` levels deep, and waits."""

    def __init__(self, parent: Identifiable, below: int) -> None:
        super().__init__(parent, prefix="nest")
        self.below = below

    @property
    def display_name(self) -> str:
        return f"nest{self.below}"

    async def execute(self, context: JobContext) -> int:
        if self.below == 0:
            return 0
        return 1 + await self.submit(Nest(self, self.below - 1)).result()


async def test_a_genuine_recording_of_1500_nested_orchestrators_reads_and_prints(
    autojump_clock: Any, tmp_path: Path
) -> None:
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        root = Nest(workflow("alice", "nest"), 1499)
        assert await dispatcher.submit(root).result() == 1499
    await recorder.aclose()

    recorded = trajectory(path, root.workflow_id)
    steps = list(recorded)
    assert len(steps) == len(recorded) == 1500
    assert [step.depth for step in steps] == list(range(1500))
    assert [step.name for step in steps[:2]] == ["nest1499", "nest1498"]
    assert recorded == trajectory(path, root.workflow_id)  # compared without recursion
    assert "<1 step(s)>" in repr(recorded.roots[0])

    done = await trio.to_thread.run_sync(lambda: _cli("trajectory", path, root.workflow_id))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Workflow {root.workflow_id} for alice: 1500 jobs (1500 completed)")
    assert len(lines) == 1501
    assert lines[-1].lstrip(" |`-").startswith("[depth 1499] nest0  nest-")
    # Past INDENTED_LEVELS the indentation stops growing: every line is short.
    assert max(len(line) for line in lines) < 4 * INDENTED_LEVELS + 120


def _recording(path: Path, *, constraints: bool = True) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    if constraints:
        db.executescript(RECORDER_SCHEMA)
    else:  # a hand-made file: the columns, none of the recorder's constraints or types
        db.executescript(
            "CREATE TABLE jobs (seq, job_id, parent_job_id, workflow_id, user_id, job_class, "
            "name, kind, iteration_number, attempts, state, created_at, started_at, ended_at, "
            "failure, metadata, clock_started, clock_ended);"
            "CREATE TABLE llm_responses (job_id, position, response);"
        )
    return db


def _insert(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Rows of (seq, job_id, parent_job_id) in the workflow 'wf', every other column valid."""
    db.executemany(
        "INSERT INTO jobs (seq, job_id, parent_job_id, workflow_id, user_id, job_class, name, "
        "kind, attempts, state, metadata) "
        "VALUES (?, ?, ?, 'wf', 'u', 'app.Job', ?, 'DOER', 1, 'COMPLETED', '{}')",
        [(seq, job, parent, job) for seq, job, parent in rows],
    )
    db.commit()


def test_a_hundred_thousand_nested_jobs_read_back_and_render(tmp_path: Path) -> None:
    path = tmp_path / "deep.db"
    depth = 100_000
    with contextlib.closing(_recording(path)) as db:
        _insert(db, [(n + 1, f"j{n}", None if n == 0 else f"j{n - 1}") for n in range(depth)])
    recorded = trajectory(path, "wf")
    assert len(recorded) == depth
    *_, last = recorded
    assert (last.job_id, last.depth) == (f"j{depth - 1}", depth - 1)
    assert recorded.states() == {"COMPLETED": depth}
    text = render_trajectory(recorded, ids=False, durations=False)
    lines = text.splitlines()
    assert len(lines) == depth + 1
    assert (
        lines[-1]
        == " " * (4 * INDENTED_LEVELS) + f"`-- [depth {depth - 1}] j{depth - 1}  COMPLETED"
    )
    assert lines[2] == "`-- j1  COMPLETED"


@pytest.mark.parametrize(
    ("column", "value", "what"),
    [
        ("attempts", "'many'", "attempts is 'many', not a whole number"),
        ("iteration_number", "'2nd'", "iteration_number is '2nd', not a whole number"),
        ("created_at", "'yesterday'", "created_at is 'yesterday', not a number of seconds"),
        ("name", "CAST(X'6361ff' AS TEXT)", "name is not UTF-8 text (byte 0xff at 3"),
        ("state", "42", "state is 42, not text"),
        ("metadata", "'[1, 2]'", "metadata is [1, 2], not a JSON object"),
        ("metadata", "'{not json'", "metadata is not JSON"),
        ("metadata", "'" + "[" * 5000 + "]" * 5000 + "'", "metadata is nested more than 200"),
    ],
)
def test_a_row_of_the_wrong_type_is_named_with_its_column(
    tmp_path: Path, column: str, value: str, what: str
) -> None:
    path = tmp_path / "typed.db"
    with contextlib.closing(_recording(path, constraints=False)) as db:
        _insert(db, [(1, "root", None), (2, "child", "root")])
        db.execute(f"UPDATE jobs SET {column} = {value} WHERE seq = 2")  # noqa: S608
        db.commit()
    with pytest.raises(RecordingError) as refused:
        trajectory(path, "wf")
    assert str(refused.value).startswith(f"{path}: row 2 (job 'child'): ")
    assert what in str(refused.value)


def test_an_llm_response_nested_too_deep_is_named(tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    with contextlib.closing(_recording(path)) as db:
        _insert(db, [(1, "root", None)])
        db.execute("INSERT INTO llm_responses VALUES ('root', 0, ?)", ("[" * 5000 + "]" * 5000,))
        db.execute("INSERT INTO llm_responses VALUES ('root', 1, 'plain words')")
        db.commit()
    with pytest.raises(RecordingError, match=rf"^{path}: an LLM response of the job 'root'"):
        trajectory(path, "wf")
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM llm_responses WHERE position = 0")
        db.commit()
    (root,) = trajectory(path, "wf").roots
    assert root.llm_responses == ("plain words",)


def test_a_job_that_is_its_own_parent_or_ancestor_is_reported_not_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cycles.db"
    with contextlib.closing(_recording(path)) as db:
        _insert(db, [(1, "root", None), (2, "me", "me")])
    with pytest.raises(RecordingError, match=rf"^{path}: row 2 \(job 'me'\) names itself"):
        trajectory(path, "wf")
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM jobs")
        db.commit()
        _insert(db, [(1, "a", "c"), (2, "b", "a"), (3, "c", "b"), (4, "leaf", "b")])
    with pytest.raises(RecordingError) as refused:
        trajectory(path, "wf")
    message = str(refused.value)
    assert message.startswith(f"{path}: the jobs ")
    for job, seq in (("a", 1), ("b", 2), ("c", 3)):
        assert f"'{job}' (row {seq})" in message
    assert "a cycle no root leads to (4 job(s) of the workflow hang from it)" in message


def test_a_job_recorded_twice_and_a_foreign_table_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.db"
    with contextlib.closing(_recording(path, constraints=False)) as db:
        _insert(db, [(1, "root", None), (2, "kid", "root"), (3, "kid", "root")])
    with pytest.raises(RecordingError, match=r"the job 'kid' is recorded twice, in rows 2 and 3"):
        trajectory(path, "wf")
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE jobs (job_id, workflow_id)")
    with pytest.raises(
        RecordingError, match=rf"^{other}: the jobs table has no column\(s\) attempts"
    ):
        trajectory(other, "wf")


def test_the_trajectory_command_names_a_bad_row_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    with contextlib.closing(_recording(path, constraints=False)) as db:
        _insert(db, [(1, "root", None), (2, "me", "me"), (3, "kid", "root")])
        db.execute("UPDATE jobs SET attempts = 'three' WHERE seq = 3")
        db.commit()
    _refused(
        _cli("trajectory", path, "wf"),
        f"nucleo-trio trajectory: {path}: row 3 (job 'kid'): attempts is 'three'",
    )
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE jobs SET attempts = 3 WHERE seq = 3")
        db.commit()
    _refused(_cli("trajectory", path, "wf"), f"{path}: row 2 (job 'me') names itself as its parent")
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE jobs SET workflow_id = CAST(X'ff' AS TEXT) WHERE seq = 2")
        db.commit()
    _refused(_cli("trajectory", path), f"{path}: the workflow ", "workflow_id is not UTF-8 text")


# -- top's client ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _answering(path: Path, answer: bytes) -> Iterator[None]:
    """A control socket at ``path`` that gives every client ``answer``, from a thread."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            with connection:
                connection.recv(1024)
                connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=10)


def _answer(snapshot: dict[str, Any]) -> bytes:
    return json.dumps({"ok": True, "protocol": 1, "snapshot": snapshot}).encode() + b"\n"


@pytest.fixture
def socket_place() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="nt-hostile-"))
    directory.chmod(0o700)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    ("name", "change", "what"),
    [
        ("deep", None, "the answer is nested more than 200 arrays or objects deep"),
        ("latin1", None, "the answer is not UTF-8 text"),
        ("nan-wall", {"wall": math.nan}, "wall is nan, not a moment"),
        ("inf-pid", {"pid": math.inf}, "pid is inf, not a whole number from 0"),
        ("past-time-t", {"wall": 1e20}, "wall is 1e+20, not a moment"),
        ("digits", {"running_total": 10**400}, "running_total is 1000"),
    ],
)
def test_top_names_a_hostile_answer_in_one_line(
    socket_place: Path, name: str, change: dict[str, Any] | None, what: str
) -> None:
    path = socket_place / f"{name}.sock"
    snapshot = _sample().to_json()
    if name == "deep":
        answer = b'{"ok": true, "protocol": 1, "snapshot": ' + b"[" * 100_000 + b"]" * 100_000
        answer += b"}\n"
    elif name == "latin1":
        answer = _answer(snapshot).replace(b'"RUNNING"', b'"RUNN\xefNG"')
    else:
        assert change is not None
        answer = _answer(snapshot | change)
    with _answering(path, answer):
        done = _cli("top", "--socket", path, "--once")
    _refused(done, f"nucleo-trio top: control socket '{path}': ", what)
    assert len(done.stderr) < 1000


def test_top_renders_hostile_text_and_infinite_use_without_crashing(socket_place: Path) -> None:
    snapshot = _sample().to_json()
    snapshot["health"]["limiters"][0] |= {"used": math.inf, "name": "re\x1b[2Jnder\ud800"}
    snapshot["health"]["limiters"][1] |= {"capacity": math.nan}
    snapshot["failures"][0]["message"] = "gone\x1b]0;owned\x07 \udfff"
    path = socket_place / "odd.sock"
    with _answering(path, _answer(snapshot)):
        once = _cli("top", "--socket", path, "--once")
        live = _cli("top", "--socket", path, "--count", "1", "--color", "never")
    for done in (once, live):
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "\x1b[2J" not in done.stdout and "\x1b]0;" not in done.stdout
    assert "re\\x1b[2Jnder\ufffd" in once.stdout
    assert "gone\\x1b]0;owned\\x07 \ufffd" in once.stdout
    assert "inf%" in once.stdout  # a use reported as infinite fills its bar


def test_the_server_takes_a_deep_request_as_an_unknown_one() -> None:
    server = ControlServer.__new__(ControlServer)  # only its answer is exercised
    answer = json.loads(server._answer(b"[" * 1000))
    assert answer["ok"] is False and "unknown request" in answer["error"]
    answer = json.loads(server._answer(b'{"get": "\xff"}'))
    assert answer["ok"] is False
