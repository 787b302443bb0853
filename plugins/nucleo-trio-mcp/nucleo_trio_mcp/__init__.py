"""MCP servers' tools as nucleo_trio jobs, on the official ``mcp`` SDK.

Declare the servers (``[mcp.servers.NAME]`` in the dispatcher's configuration, or an
:class:`McpConfig` in code); list a server's tools and each is a job class: submit a call
directly, or hand the classes to a :class:`~nucleo_trio.llm.Thinker`. Every call is admitted on
its server's ``mcp:<name>`` gate, and a stdio server's also on the ``mcp:stdio`` pool, whole with
the rest of its demand; its arguments are judged by the tool's input schema before it asks for
anything. :class:`McpServers` holds the servers and runs their connections.
"""

import logging as _logging

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

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = __name__
del _name, _value

# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_mcp").addHandler(_logging.NullHandler())
