"""The module the ``nucleo_trio`` entry point names: the hooks this distribution answers.

Installed, the distribution serves the MCP servers of every dispatcher whose configuration
declares some::

    [mcp]
    stdio_pool_max = 20

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
    max_concurrent = 4

The servers are the dispatcher's (:meth:`McpServers.of(dispatcher)
<nucleo_trio_mcp.McpServers.of>`): started the first time their tools are listed or called (or
when the dispatcher starts, for ``start = "at_start"``), stopped when it stops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nucleo_trio.plugins import hookimpl

if TYPE_CHECKING:
    from nucleo_trio.dispatch import JobDispatcher

    from .servers import McpServers

__all__ = ["nucleo_trio_mcp_servers"]


@hookimpl
def nucleo_trio_mcp_servers(dispatcher: JobDispatcher, settings: Mapping[str, Any]) -> McpServers:
    """The :class:`~nucleo_trio_mcp.McpServers` of ``dispatcher``, built from its ``mcp``
    table (``settings``, an :class:`~nucleo_trio_mcp.McpConfig` as plain data) and run for its
    life; a bad table raises :class:`~nucleo_trio.errors.ConfigError` naming the key."""
    # Through the package, which imports the SDK now, at the first dispatcher with servers.
    import nucleo_trio_mcp

    servers = nucleo_trio_mcp.McpServers(nucleo_trio_mcp.McpConfig.from_mapping(settings))
    servers.serve_for(dispatcher)
    return servers
