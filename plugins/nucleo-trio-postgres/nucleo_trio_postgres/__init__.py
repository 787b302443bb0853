"""PostgreSQL for nucleo_trio jobs: :class:`PostgresProvider` and the ``postgres`` provider kind.

Installed, this distribution is found through its entry point in the ``nucleo_trio`` group,
and a dispatcher configuration can name the kind::

    [databases.orders]
    kind = "postgres"
    settings = { conninfo = "host=/run/postgresql dbname=orders", max_connections = 4 }

The provider can also be built and registered by hand:
``PostgresProvider("orders", "host=/run/postgresql dbname=orders", max_connections=4)``.
"""

from __future__ import annotations

import logging as _logging
from collections.abc import Mapping

from nucleo_trio.plugins import DBProviderFactory, hookimpl
from nucleo_trio_postgres.provider import PostgresProvider as PostgresProvider

__all__ = ["PostgresProvider", "nucleo_trio_db_provider_kinds", "postgres"]


def postgres(name: str, *, conninfo: str, max_connections: int) -> PostgresProvider:
    """A :class:`PostgresProvider` named ``name`` from configuration: ``conninfo`` (a libpq
    connection string or URI) and ``max_connections`` (the size of ``db:<name>``)."""
    return PostgresProvider(name, conninfo, max_connections)


@hookimpl
def nucleo_trio_db_provider_kinds() -> Mapping[str, DBProviderFactory]:
    """Provide the ``"postgres"`` kind (see :func:`postgres`)."""
    return {"postgres": postgres}


# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_postgres").addHandler(_logging.NullHandler())
