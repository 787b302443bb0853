"""Databases declared in the dispatcher's configuration, built by provider kind at start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from nucleo_trio.dispatch import DatabaseConfig, DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import ConfigError
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow
from nucleo_trio.resources import CountingDBResourceProvider, DBResourceProvider, SQLiteProvider


def test_databases_from_plain_data() -> None:
    """The databases table structures through the config's converter; a typo names the key."""
    config = DispatcherConfig.from_mapping(
        {
            "databases": {
                "notes": {"kind": "sqlite", "settings": {"path": "n.db", "max_connections": 2}},
                "reports": {"kind": "counting", "settings": {"max_concurrent": 3}},
            }
        }
    )
    assert config.databases == {
        "notes": DatabaseConfig(kind="sqlite", settings={"path": "n.db", "max_connections": 2}),
        "reports": DatabaseConfig(kind="counting", settings={"max_concurrent": 3}),
    }
    with pytest.raises(ConfigError, match="knd"):
        DispatcherConfig.from_mapping({"databases": {"notes": {"knd": "sqlite"}}})
    with pytest.raises(ConfigError, match="kind"):
        DispatcherConfig.from_mapping({"databases": {"notes": {"settings": {}}}})


class Write(Tool[None]):
    """Writes its id through ``provider``, holding a permit on the provider's gate."""

    def __init__(self, root: Identifiable, provider: SQLiteProvider) -> None:
        super().__init__(root)
        self.provider = provider

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.provider.admission())

    async def execute(self, context: JobContext) -> None:
        handle = await self.provider.acquire()
        try:
            await self.provider.execute(handle, "INSERT INTO notes VALUES (?)", [self.job_id])
        finally:
            await self.provider.close(handle)


async def test_configured_databases_are_built_by_kind_and_registered_by_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE notes (text TEXT)")
    config = DispatcherConfig(
        databases={
            "notes": DatabaseConfig(
                kind="sqlite", settings={"path": str(path), "max_connections": 2}
            ),
            "reports": DatabaseConfig(kind="counting", settings={"max_concurrent": 3}),
        }
    )
    async with open_dispatcher(config) as dispatcher:
        assert dispatcher.db_kinds is not None and "sqlite" in dispatcher.db_kinds
        assert dispatcher.databases.names() == ["notes", "reports"]
        notes = dispatcher.databases.get("notes", SQLiteProvider)
        reports = dispatcher.databases.get("reports", CountingDBResourceProvider)
        assert notes.admission().limiter_name == "db:notes"
        assert reports.admission().capacity == 3
        root = workflow("u", "notes")
        for handle in [dispatcher.submit(Write(root, notes)) for _ in range(3)]:
            await handle.result()
    with sqlite3.connect(path) as reader:
        assert reader.execute("SELECT count(*) FROM notes").fetchone() == (3,)


@pytest.mark.parametrize(
    ("database", "fragments"),
    [
        (DatabaseConfig(kind="nope"), ["database 'x'", "kind 'nope'", "'counting'", "'sqlite'"]),
        (
            DatabaseConfig(kind="sqlite", settings={"path": "x.db"}),
            ["database 'x'", "kind 'sqlite'", "max_connections"],
        ),
        (
            DatabaseConfig(kind="counting", settings={"max_concurrent": 0}),
            ["database 'x'", "kind 'counting'"],
        ),
    ],
    ids=["unknown kind", "missing setting", "bad setting"],
)
async def test_a_bad_database_refuses_the_start_naming_datasource_and_kind(
    database: DatabaseConfig, fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        async with open_dispatcher(DispatcherConfig(databases={"x": database})):
            pass  # pragma: no cover - never entered
    for fragment in fragments:
        assert fragment in str(caught.value)


async def test_a_configured_name_already_taken_refuses_the_start(nursery: trio.Nursery) -> None:
    dispatcher = JobDispatcher(
        DispatcherConfig(
            databases={"x": DatabaseConfig(kind="counting", settings={"max_concurrent": 1})}
        )
    )
    dispatcher.databases.register(CountingDBResourceProvider("x", 2))
    with pytest.raises(ConfigError, match="database 'x'.*already registered"):
        await nursery.start(dispatcher.run)


async def test_a_postgres_database_from_configuration(postgres_conninfo: str) -> None:
    """The plugin's kind, named in plain data, builds a PostgresProvider that jobs declare by
    name and write through in a transaction; the dispatcher that built it closes its
    connections at shutdown."""
    import psycopg
    from nucleo_trio_postgres import PostgresProvider

    def setup() -> None:
        with psycopg.connect(postgres_conninfo, autocommit=True) as connection:
            connection.execute("DROP TABLE IF EXISTS configured")
            connection.execute("CREATE TABLE configured (note TEXT)")

    def notes() -> list[tuple[str]]:
        with psycopg.connect(postgres_conninfo) as connection:
            return connection.execute("SELECT note FROM configured ORDER BY note").fetchall()

    await trio.to_thread.run_sync(setup)
    config = DispatcherConfig.from_mapping(
        {
            "databases": {
                "orders": {
                    "kind": "postgres",
                    "settings": {"conninfo": postgres_conninfo, "max_connections": 2},
                }
            }
        }
    )

    class Order(Tool[None]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_database("orders").require_transaction()

        async def execute(self, context: JobContext) -> None:
            assert context.resources is not None
            handle = context.resources.handle("orders")
            await orders.execute(handle, "INSERT INTO configured VALUES (%s)", [self.job_id])

    async with open_dispatcher(config) as dispatcher:
        orders = dispatcher.databases.get("orders", PostgresProvider)
        assert isinstance(orders, DBResourceProvider)
        assert (orders.admission().limiter_name, orders.admission().capacity) == ("db:orders", 2)
        jobs = [Order(workflow("u", "orders")) for _ in range(4)]
        for handle in [dispatcher.submit(job) for job in jobs]:
            await handle.result()
        assert orders.active_connections == 0 and orders.idle_connections <= 2
    assert orders.idle_connections == 0  # the dispatcher built it, so its shutdown closed it
    assert await trio.to_thread.run_sync(notes) == sorted((job.job_id,) for job in jobs)
