"""A server's tools as job classes, and what one call returns.

Listing a server makes one :class:`McpTool` subclass per tool, named ``<server>.<tool>``; its
class attributes carry what the server said about the tool (``listed_name``, its name there;
``tool_name``, the name a model calls it by; the description; ``parameters``, the input
schema). An instance is one call: build it with the parent identity
and the arguments, submit it, and await a :class:`McpToolResult`::

    add = servers["calc"].tool("add")
    result = await dispatcher.submit(add(root, {"a": 2, "b": 3})).result()

The same classes are what a :class:`~nucleo_trio.llm.Thinker` takes as ``tools``: the model sees
each one's name, description and schema, and each call it makes is one such job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import jsonschema  # type: ignore[import-untyped]
import jsonschema.exceptions  # type: ignore[import-untyped]
import jsonschema.validators  # type: ignore[import-untyped]
import mcp_types

from nucleo_trio.jobs import JobRequirements, Tool
from nucleo_trio.jobs.snapshot import forget_class_facts

from .errors import McpArgumentsError

Validator = Any  # a compiled jsonschema validator (jsonschema ships no types)

if TYPE_CHECKING:
    from nucleo_trio.jobs import Identifiable, JobContext

__all__ = ["McpTool", "McpToolResult"]

_MAX_PROBLEMS = 10  # the model reads this many schema problems of one call; the rest are counted
_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


class McpToolResult(str):
    """What a tool call returned: its text, with the rest of the result alongside.

    The value itself is the text the model reads: each text block of the result, one a line
    (an image, audio or a binary resource appears as a short placeholder naming its type), or
    the structured content as JSON when the result has no content blocks. A thinker passes it to
    the model as it is, and ``print(result)`` shows it.
    """

    server: str
    """The name of the server that answered."""
    tool: str
    """The name of the tool that was called, on its server (without the server's
    ``tool_prefix``)."""
    structured: Any
    """The result's structured content (a JSON object the tool's output schema describes), or
    ``None`` when it returned none."""
    content: tuple[Mapping[str, Any], ...]
    """Every content block of the result, as the protocol's JSON objects, in order."""

    def __new__(
        cls,
        text: str = "",
        *,
        server: str = "",
        tool: str = "",
        structured: Any = None,
        content: Sequence[Mapping[str, Any]] = (),
    ) -> McpToolResult:
        made = super().__new__(cls, text)
        made.server = server
        made.tool = tool
        made.structured = structured
        made.content = tuple(content)
        return made

    @property
    def text(self) -> str:
        """The result's text, as a plain ``str``."""
        return str.__str__(self)

    @classmethod
    def of(cls, server: str, tool: str, result: mcp_types.CallToolResult) -> McpToolResult:
        """The result of one call, read from what the server answered."""
        blocks = [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ]
        lines = [_block_text(block) for block in result.content]
        if not lines and result.structured_content is not None:
            import json

            lines = [json.dumps(result.structured_content, ensure_ascii=False)]
        return cls(
            "\n".join(lines),
            server=server,
            tool=tool,
            structured=result.structured_content,
            content=blocks,
        )

    def __repr__(self) -> str:
        extra = "" if self.structured is None else f", structured={self.structured!r}"
        return f"McpToolResult({self.text!r}, server={self.server!r}, tool={self.tool!r}{extra})"


def _block_text(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return f"[{block.type}: {block.mime_type}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        return f"[resource: {resource.uri}]"
    return f"[resource link: {block.uri}]"


class ToolServer(Protocol):
    """What a tool class asks of the server it was listed from."""

    name: str

    def requirements(self) -> JobRequirements:
        """A fresh demand for one call: the server's slots."""
        ...

    async def call(
        self, context: JobContext, tool: str, arguments: Mapping[str, Any]
    ) -> McpToolResult:
        """Call ``tool`` with ``arguments``, holding the slots the demand granted."""
        ...


class McpTool(Tool[McpToolResult]):
    """One call of one server's tool: a job whose demand holds the server's ``mcp:<name>``
    slot, and for a stdio server the ``mcp:stdio`` pool's, for as long as the call runs.

    The classes are made by listing a server, never by hand. ``arguments`` (``input`` once
    built, which is also what a thinker sets) must match the tool's input schema: a call whose
    arguments do not is refused with :class:`~nucleo_trio_mcp.McpArgumentsError` when it is
    submitted, before it asks admission for anything, and so is a call of a tool the server no
    longer offers. Its deadline is the server's ``timeout`` (a call may set another before it is
    submitted, as on any job).
    """

    tool_name: ClassVar[str] = ""
    """The name a model calls the tool by: its name on the server, after the server's
    ``tool_prefix`` (none by default)."""
    listed_name: ClassVar[str] = ""
    """The tool's name on its server, as the server listed it."""
    server_name: ClassVar[str] = ""
    """The name of the server the tool was listed from."""
    parameters: ClassVar[Mapping[str, Any]] = _EMPTY_SCHEMA
    """The tool's input schema (a JSON schema of an object), as the server last listed it."""
    offered: ClassVar[bool] = True
    """Whether the server's last listing still offered the tool; a call of a tool that is no
    longer offered is refused."""
    _mcp_server: ClassVar[ToolServer | None] = None
    _mcp_validator: ClassVar[Validator | None] = None

    def __init__(self, parent: Identifiable, arguments: Mapping[str, Any] | None = None) -> None:
        if type(self)._mcp_server is None:
            raise TypeError(
                "McpTool classes are made by listing a server; take one with "
                "servers['name'].tool('tool') or from servers.tools()"
            )
        super().__init__(parent)
        self.input: Any = dict(arguments) if arguments is not None else {}
        """The call's arguments, a mapping the tool's input schema judges."""
        self._refusal: McpArgumentsError | None = None
        self._judged: tuple[object, Validator | None, bool] | None = None

    def requirements(self) -> JobRequirements:
        """The server's slots, or nothing at all for a call refused on its arguments."""
        cls = type(self)
        judged = (self.input, cls._mcp_validator, cls.offered)
        last = self._judged
        # Asked at submit and again at each attempt: the same arguments under the same listing
        # are judged once.
        if last is None or last[0] is not judged[0] or last[1:] != judged[1:]:
            self._refusal = self.refusal()
            self._judged = judged
        if self._refusal is not None:
            return JobRequirements().without_queueing()
        server = cls._mcp_server
        assert server is not None
        return server.requirements()

    def refusal(self) -> McpArgumentsError | None:
        """What is wrong with this call's arguments, judged by the tool's input schema, or
        ``None`` when nothing is."""
        cls = type(self)
        if not cls.offered:
            return McpArgumentsError(
                cls.server_name,
                cls.listed_name,
                [f"the server no longer offers {cls.listed_name}"],
            )
        if not isinstance(self.input, Mapping):
            shown = type(self.input).__name__
            return McpArgumentsError(
                cls.server_name, cls.listed_name, [f"the arguments must be an object, got {shown}"]
            )
        validator = cls._mcp_validator
        if validator is None:
            return None
        errors = sorted(
            validator.iter_errors(dict(self.input)), key=lambda e: [str(p) for p in e.path]
        )
        if not errors:
            return None
        problems = [_problem(error) for error in errors[:_MAX_PROBLEMS]]
        if len(errors) > _MAX_PROBLEMS:
            problems.append(f"and {len(errors) - _MAX_PROBLEMS} more")
        return McpArgumentsError(cls.server_name, cls.listed_name, problems)

    async def execute(self, context: JobContext) -> McpToolResult:
        """Call the tool on its server with :attr:`input`."""
        if self._refusal is not None:
            raise self._refusal
        cls = type(self)
        server = cls._mcp_server
        assert server is not None
        return await server.call(context, cls.listed_name, self.input)

    def __repr__(self) -> str:
        return f"<{self.name} {type(self).__qualname__}({self.input!r})>"


def _problem(error: Any) -> str:
    where = ".".join(str(part) for part in error.absolute_path) or "(the arguments)"
    return f"{where}: {error.message}"


def _validator(server: str, tool: str, schema: Mapping[str, Any]) -> Validator | None:
    """A compiled validator of the tool's input schema, or ``None`` for a schema that is not a
    valid JSON schema (the server then judges the arguments alone)."""
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        import logging

        logging.getLogger("nucleo_trio_mcp").warning(
            "mcp:%s: the input schema of %r is not a valid JSON schema; the server alone "
            "judges its arguments",
            server,
            tool,
        )
        return None
    return cls(schema)


def tool_class(
    server: ToolServer, listed: mcp_types.Tool, timeout: float, prefix: str = ""
) -> type[McpTool]:
    """A new job class for the tool the server listed as ``listed``, offered to models under
    ``prefix`` and its name."""
    qualified = f"{server.name}.{listed.name}"
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": qualified,
        "timeout": timeout,
        "tool_name": prefix + listed.name,
        "listed_name": listed.name,
        "server_name": server.name,
        "_mcp_server": server,
    }
    made: type[McpTool] = type(qualified, (McpTool,), namespace)
    update_tool_class(made, listed)
    return made


def update_tool_class(cls: type[McpTool], listed: mcp_types.Tool | None) -> None:
    """Bring ``cls`` in line with a new listing of its tool (``None``: the tool is gone)."""
    if listed is None:
        cls.offered = False
        return
    schema = dict(listed.input_schema) if listed.input_schema else dict(_EMPTY_SCHEMA)
    description = listed.description or listed.title or ""
    cls.offered = True
    cls.parameters = schema
    cls._mcp_validator = _validator(cls.server_name, cls.listed_name, schema)
    cls.__doc__ = description or None
    setattr(cls, "__nucleo_description__", description or None)  # noqa: B010
    forget_class_facts()
