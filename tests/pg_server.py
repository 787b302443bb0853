"""A throwaway PostgreSQL server for the tests: a fresh cluster in a temporary directory.

:func:`running_server` finds ``initdb`` and ``pg_ctl`` (on ``PATH``, else in Debian's
``/usr/lib/postgresql/<version>/bin``), creates a cluster with durability switched off (the
data is thrown away: ``fsync``, ``full_page_writes`` and ``synchronous_commit`` off), starts it
listening on a unix socket inside the same directory only (no TCP port, so nothing clashes with
another server on the machine), yields a libpq conninfo, and stops it at the end. Start-up
takes about a second.

``initdb`` refuses to run as root, and CI runs as root: the server then runs as the
``postgres`` user that Debian's package creates, else as ``nobody``. The test process, as
root, still reaches the socket in that user's directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NO_SERVER_REASON", "find_binaries", "running_server"]

NO_SERVER_REASON = (
    "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
    "install Debian's 'postgresql' package (.ci/run does) to run the PostgreSQL contract"
)

SUPERUSER = "nucleo"
"""The cluster's superuser (``initdb --username``), whatever the OS user running it."""

_SERVER_SETTINGS = {
    "listen_addresses": "''",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_connections": "60",
}


def find_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None`` when there is none."""
    initdb = shutil.which("initdb")
    if initdb is not None:
        directory = Path(initdb).resolve().parent
        if (directory / "pg_ctl").exists():
            return directory

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: ``None`` for the current user, unless that is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError(
        "running as root with neither a 'postgres' nor a 'nobody' user to run initdb"
    )


@contextmanager
def running_server(binaries: Path) -> Iterator[str]:
    """Start a fresh cluster with the server binaries in ``binaries``; yield its conninfo."""
    base = Path(tempfile.mkdtemp(prefix="nucleo-trio-pg-"))
    user = _server_user()
    if user is not None:
        os.chown(base, user.pw_uid, user.pw_gid)
    data = base / "data"
    options = " ".join(f"-c {key}={value}" for key, value in _SERVER_SETTINGS.items())

    def run(*command: str | Path) -> None:
        result = subprocess.run(
            [str(part) for part in command],
            cwd=base,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LC_ALL": "C"},
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
        if result.returncode != 0:
            log = base / "server.log"
            server_log = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}{server_log}"
            )

    try:
        run(
            binaries / "initdb",
            "--pgdata",
            data,
            "--username",
            SUPERUSER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
            "--no-instructions",
        )
        run(
            binaries / "pg_ctl",
            "--pgdata",
            data,
            "--log",
            base / "server.log",
            "--options",
            f"-p 5432 -c unix_socket_directories={base} {options}",
            "--wait",
            "--timeout",
            "60",
            "--silent",
            "start",
        )
        try:
            yield f"host={base} port=5432 user={SUPERUSER} dbname=postgres"
        finally:
            run(binaries / "pg_ctl", "--pgdata", data, "--mode", "immediate", "--wait", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)
