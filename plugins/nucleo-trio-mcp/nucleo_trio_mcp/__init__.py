"""MCP servers' tools as nucleo_trio jobs, on the official ``mcp`` SDK.

Declare the servers (``[mcp.servers.NAME]`` in the dispatcher's configuration, or an
:class:`McpConfig` in code); list a server's tools and each is a job class: submit a call
directly, or hand the classes to a :class:`~nucleo_trio.llm.Thinker`. Every call is admitted on
its server's ``mcp:<name>`` gate, and a stdio server's also on the ``mcp:stdio`` pool, whole with
the rest of its demand; its arguments are judged by the tool's input schema before it asks for
anything. :class:`McpServers` holds the servers and runs their connections.
"""

import logging as _logging
from typing import TYPE_CHECKING

from nucleo_trio._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import (
        DEFAULT_CALL_TIMEOUT as DEFAULT_CALL_TIMEOUT,
        DEFAULT_CONNECT_TIMEOUT as DEFAULT_CONNECT_TIMEOUT,
        McpConfig as McpConfig,
        McpServerConfig as McpServerConfig,
    )
    from .errors import (
        McpArgumentsError as McpArgumentsError,
        McpProtocolError as McpProtocolError,
        McpServerError as McpServerError,
        McpToolError as McpToolError,
    )
    from .server import HttpEndpointGate as HttpEndpointGate, McpServer as McpServer
    from .servers import CLOSE_WINDOW as CLOSE_WINDOW, McpServers as McpServers
    from .tools import McpTool as McpTool, McpToolResult as McpToolResult

__all__ = [
    "CLOSE_WINDOW",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "HttpEndpointGate",
    "McpArgumentsError",
    "McpConfig",
    "McpProtocolError",
    "McpServer",
    "McpServerConfig",
    "McpServerError",
    "McpServers",
    "McpTool",
    "McpToolError",
    "McpToolResult",
]

# Imported at the first use of any of them, not when the entry point loads: the SDK takes a
# second or more to import, in every process that opens a dispatcher.
__getattr__ = lazy_exports(
    __name__,
    {
        "CLOSE_WINDOW": ".servers",
        "DEFAULT_CALL_TIMEOUT": ".config",
        "DEFAULT_CONNECT_TIMEOUT": ".config",
        "HttpEndpointGate": ".server",
        "McpArgumentsError": ".errors",
        "McpConfig": ".config",
        "McpProtocolError": ".errors",
        "McpServer": ".server",
        "McpServerConfig": ".config",
        "McpServerError": ".errors",
        "McpServers": ".servers",
        "McpTool": ".tools",
        "McpToolError": ".errors",
        "McpToolResult": ".tools",
    },
    public_module=True,
)

# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_mcp").addHandler(_logging.NullHandler())
