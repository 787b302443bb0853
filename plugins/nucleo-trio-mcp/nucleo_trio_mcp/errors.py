"""What a failed tool call raises, sorted into the runtime's two branches.

A thinker reads each failure and acts on its branch: a correctable one (the tool said its call
failed, the arguments did not match its schema) is fixed by calling again differently; an
uncorrectable one (the server broke the protocol, could not be started, or is closed) asks for
another approach. A server that dies is neither: the call raises the runtime's
:class:`~nucleo_trio.errors.TransientErrorRetry`, and the dispatcher runs it again once the
server is started anew.
"""

from __future__ import annotations

from collections.abc import Sequence

from nucleo_trio.errors import CorrectableError, ExternalServiceError, InvalidInputError

__all__ = ["McpArgumentsError", "McpProtocolError", "McpServerError", "McpToolError"]


class McpArgumentsError(InvalidInputError):
    """Raised, before the call takes any slot, when its arguments do not match the tool's input
    schema, or the tool is no longer offered; also when the server itself refuses the arguments
    (JSON-RPC error -32602). The model reads every problem, one a line, and calls again."""

    def __init__(self, server: str, tool: str, problems: Sequence[str]) -> None:
        """``problems`` says what is wrong, one entry each (``"a: 'x' is not of type
        'integer'"``)."""
        self.server = server
        """The server's name."""
        self.tool = tool
        """The tool's name."""
        self.problems = tuple(problems)
        """What is wrong with the arguments, one entry each."""
        lines = "\n".join(f"- {problem}" for problem in self.problems)
        super().__init__(
            f"mcp:{server}: the arguments of {tool!r} were refused:\n{lines}",
            llm_message=f"The arguments of {tool} were refused:\n{lines}",
        )


class McpToolError(CorrectableError):
    """Raised when a tool answers that its call failed (a result with ``isError`` set): the
    model reads what the tool said, and may call it again with other arguments."""

    def __init__(self, server: str, tool: str, text: str) -> None:
        """``text`` is what the tool said, the text of its result."""
        self.server = server
        """The server's name."""
        self.tool = tool
        """The tool's name."""
        self.text = text
        """What the tool said about its failure."""
        said = text.strip() or "(no message)"
        super().__init__(
            f"mcp:{server}: tool {tool!r} failed: {said}",
            llm_message=f"The tool {tool} failed: {said}",
        )


class McpProtocolError(ExternalServiceError):
    """Raised when a server answers a call with a protocol error other than refused arguments
    (an unknown method, an internal error), or with a result the protocol does not allow.

    ``code`` is the JSON-RPC error code, or ``None`` when the answer itself was malformed.
    """

    def __init__(self, server: str, message: str, *, code: int | None = None) -> None:
        """``message`` says what the server answered."""
        self.code = code
        """The JSON-RPC error code the server answered with; ``None`` for a malformed answer."""
        shown = message if code is None else f"{message} (JSON-RPC error {code})"
        super().__init__(f"mcp:{server}: {shown}", service=f"mcp:{server}")


class McpServerError(ExternalServiceError):
    """Raised when a server cannot be used at all: its command cannot be started, the
    dispatcher that owns it has stopped, or its servers were closed."""

    def __init__(self, server: str, message: str) -> None:
        """``message`` says why the server cannot be used."""
        super().__init__(f"mcp:{server}: {message}", service=f"mcp:{server}")
