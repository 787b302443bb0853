"""The MCP plugin's configuration: ``[mcp.servers.NAME]`` tables, checked as they are read, and
found through the plugin's entry point like every other kind. No server is started here."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import nucleo_trio_mcp.plugin
import pytest
from nucleo_trio_mcp import McpConfig, McpServerConfig, McpServers

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import ConfigError, UsageKeyError
from nucleo_trio.plugins import make_plugin_manager


def test_a_table_is_a_stdio_server_or_an_http_server() -> None:
    stdio = McpServerConfig(command="python", args=["server.py"], env={"TOKEN": "t"}, cwd="/srv")
    http = McpServerConfig(url="http://127.0.0.1:8000/mcp", headers={"Authorization": "x"})
    assert stdio.transport == "stdio" and stdio.args == ("server.py",)
    assert http.transport == "http" and stdio.max_concurrent == http.max_concurrent == 10
    assert stdio.start == "lazy" and stdio.timeout == 300.0 and stdio.connect_timeout == 60.0
    assert stdio.tool_prefix == http.tool_prefix == ""
    assert McpConfig().stdio_pool_max == 20 and McpConfig().servers == {}


@pytest.mark.parametrize(
    ("table", "refusal"),
    [
        ({"servers": {"a": {"comand": "x"}}}, r"unknown key\(s\) comand .*did you mean 'command'"),
        ({"servers": {"a": {"command": "x", "url": "http://h"}}}, "exactly one of the two"),
        ({"servers": {"a": {}}}, "give command .* or url"),
        ({"servers": {"a": {"command": "x", "max_concurrent": 0}}}, "max_concurrent must be"),
        ({"servers": {"a": {"command": "x", "max_concurrent": "4"}}}, "positive int, got str"),
        ({"servers": {"a": {"command": "x", "args": "a b"}}}, "args must be a list of strings"),
        ({"servers": {"a": {"command": "x", "headers": {"A": "b"}}}}, "headers belong to a url"),
        ({"servers": {"a": {"url": "http://h", "cwd": "/"}}}, "cwd belongs to a command"),
        ({"servers": {"a": {"command": "x", "start": "eager"}}}, '"lazy" or "at_start"'),
        ({"servers": {"a": {"command": "x", "timeout": 0}}}, "positive, finite seconds"),
        ({"servers": {"a b": {"command": "x"}}}, "a server's name is letters"),
        ({"servers": {"a": {"command": "x", "tool_prefix": "a."}}}, "tool_prefix must be a str"),
        ({"servers": {"a": {"command": "x", "tool_prefix": 1}}}, "tool_prefix must be a str"),
        ({"stdio_pool": 3}, "did you mean 'stdio_pool_max'"),
    ],
)
def test_a_bad_table_is_refused_naming_the_key(table: dict[str, Any], refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal):
        McpConfig.from_mapping(table)


def test_a_repr_masks_credentials() -> None:
    config = McpServerConfig(
        url="http://user:secret@host/mcp", headers={"Authorization": "Bearer secret"}
    )
    assert "secret" not in repr(config)


def test_the_mcp_table_of_a_toml_file(tmp_path: Path) -> None:
    """The dispatcher reads the [mcp] table as written; the plugin's McpConfig reads it from
    the same file."""
    path = tmp_path / "nucleo.toml"
    path.write_text(
        "http_connections = 50\n"
        "[mcp]\nstdio_pool_max = 4\n"
        '[mcp.servers.files]\ncommand = "python"\nargs = ["files.py"]\nmax_concurrent = 2\n'
        '[mcp.servers.search]\nurl = "http://127.0.0.1:9/mcp"\nstart = "at_start"\n',
        encoding="utf-8",
    )
    dispatcher_config = DispatcherConfig.from_file(path)
    assert dispatcher_config.mcp["servers"]["files"]["max_concurrent"] == 2
    config = McpConfig.from_file(path)
    assert config == McpConfig.from_mapping(dispatcher_config.mcp)
    assert config.stdio_pool_max == 4 and config.servers["search"].start == "at_start"
    with pytest.raises(ConfigError, match="mcp must be a table"):
        DispatcherConfig.from_mapping({"mcp": ["files"]})


def test_the_plugin_is_found_through_its_entry_point() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="nucleo_trio") if e.name == "mcp"]
    assert entry.value == "nucleo_trio_mcp.plugin" and entry.load() is nucleo_trio_mcp.plugin


async def test_a_dispatchers_mcp_table_is_served_by_the_plugin() -> None:
    """The dispatcher hands its mcp table to the plugin when its plugins load: the servers are
    its own (McpServers.of), and nothing is started until something needs a server."""
    config = DispatcherConfig(mcp={"servers": {"kit": {"command": "python", "args": ["-V"]}}})
    plugins = make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])
    async with open_dispatcher(config, plugin_manager=plugins) as dispatcher:
        servers = McpServers.of(dispatcher)
        assert servers is dispatcher.mcp and list(servers) == ["kit"]
        assert servers["kit"].starts == 0 and servers.config.stdio_pool_max == 20
    with pytest.raises(Exception, match="closed"):
        await servers["kit"].connect()


async def test_a_bad_mcp_table_or_no_plugin_to_serve_it_stops_the_start() -> None:
    plugins = make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])
    typo = DispatcherConfig(mcp={"servers": {"kit": {"comand": "python"}}})
    with pytest.raises(ConfigError, match=r"mcp: plugin .*did you mean 'command'"):
        async with open_dispatcher(typo, plugin_manager=plugins):
            pass
    good = DispatcherConfig(mcp={"servers": {"kit": {"command": "python"}}})
    with pytest.raises(ConfigError, match=r"pip install -e plugins/nucleo-trio-mcp"):
        async with open_dispatcher(
            good, plugin_manager=make_plugin_manager(load_entrypoints=False)
        ):
            pass


async def test_a_dispatcher_with_no_mcp_table_has_no_servers() -> None:
    async with open_dispatcher(plugin_manager=make_plugin_manager(load_entrypoints=False)) as d:
        assert d.mcp is None
        with pytest.raises(UsageKeyError, match=r"\[mcp.servers.NAME\]"):
            McpServers.of(d)
