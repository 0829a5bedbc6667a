"""Loading custom tools (entry points, TURNSTILE_TOOL_MODULES) and MCP server settings: a broken
plugin or setting stops the start with an error naming it (issue 16)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from consumers import tool_plugins
from consumers.mcp_tools import parse_mcp_servers
from consumers.settings import Settings
from consumers.tool_plugins import load_tools
from core.engine.tools import ToolOutcome
from core.engine.tools.registry import ToolDefinition
from core.errors import InvalidInput


async def _ok(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(ok=True, content="ok")


def _tool(name: str = "plug", **changes: Any) -> ToolDefinition:
    fields: dict[str, Any] = {"name": name, "description": "d", "parameters": {"type": "object"}, "handler": _ok}
    fields.update(changes)
    return ToolDefinition(**fields)


class FakeEntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value, self._loaded = name, f"fake:{name}", value

    def load(self) -> Any:
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


@pytest.fixture
def plugin_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("fake_plugin_tools")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(tool_plugins, "entry_points", lambda group: [])
    return module


def _entry_points(monkeypatch: pytest.MonkeyPatch, *points: FakeEntryPoint) -> None:
    monkeypatch.setattr(tool_plugins, "entry_points", lambda group: list(points) if group == "turnstile.tools" else [])


def test_module_tools_get_a_json_schema_check_and_the_default_time_limit(plugin_module: types.ModuleType) -> None:
    plugin_module.TOOLS = [_tool(parameters={"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}), _tool("own", timeout_s=2)]
    plug, own = load_tools(Settings(tool_modules=["fake_plugin_tools"], tool_timeout_s=7))
    assert plug.timeout_s == 7 and own.timeout_s == 2
    assert plug.check_arguments is not None
    plug.check_arguments({"n": 4})
    with pytest.raises(InvalidInput, match=r"arguments.n: 3 is not a multiple of 2"):
        plug.check_arguments({"n": 3})


def test_entry_points_may_give_one_tool_a_list_or_a_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    _entry_points(monkeypatch, FakeEntryPoint("b", lambda: [_tool("two"), _tool("three")]), FakeEntryPoint("a", _tool("one")))
    assert [t.name for t in load_tools(Settings())] == ["one", "two", "three"]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([_tool("plug"), _tool("plug")], "tool 'plug' of module 'fake_plugin_tools' is also defined by module 'fake_plugin_tools'"),
        (["not a tool"], "gave 'not a tool', not a ToolDefinition"),
        (42, "gave 42, not ToolDefinition"),
        ([_tool(parameters={"type": "object", "properties": {"n": {"type": "no-such-type"}}})], "parameters are not a valid JSON Schema"),
        ([_tool("bad name")], "tool name 'bad name' must be"),
    ],
)
def test_a_broken_plugin_module_stops_the_start_naming_what_is_wrong(
    plugin_module: types.ModuleType, tools: Any, message: str
) -> None:
    plugin_module.TOOLS = tools
    with pytest.raises(InvalidInput, match=message):
        load_tools(Settings(tool_modules=["fake_plugin_tools"]))


def test_a_missing_module_attribute_or_a_failing_entry_point_is_named(plugin_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInput, match="module 'fake_plugin_tools' has no TOOLS attribute"):
        load_tools(Settings(tool_modules=["fake_plugin_tools"]))
    with pytest.raises(InvalidInput, match="loading tools from module 'no_such_plugin_module' failed: ModuleNotFoundError"):
        load_tools(Settings(tool_modules=["no_such_plugin_module"]))
    _entry_points(monkeypatch, FakeEntryPoint("boom", ImportError("missing dependency")))
    with pytest.raises(InvalidInput, match=r"entry point 'boom' \(fake:boom\) failed: ImportError: missing dependency"):
        load_tools(Settings())


def test_tool_modules_are_read_from_the_environment_as_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNSTILE_TOOL_MODULES", '["a.tools", "b"]')
    assert Settings().tool_modules == ["a.tools", "b"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "TURNSTILE_MCP_SERVERS_JSON"),
        ('{"name": "x"}', "must be a JSON list"),
        ('[{"name": "x"}]', "exactly one of command"),
        ('[{"name": "x", "command": "c", "url": "http://h"}]', "exactly one of command"),
        ('[{"name": "a__b", "command": "c"}]', "String should match pattern"),
        ('[{"name": "x", "command": "c", "modes": ["party"]}]', "unknown modes"),
        ('[{"name": "x", "command": "c", "timeout_s": 0}]', "greater than 0"),
        ('[{"name": "x", "command": "c", "typo": 1}]', "Extra inputs are not permitted"),
        ('[{"name": "x", "command": "c"}, {"name": "x", "url": "http://h"}]', "names must be unique"),
    ],
)
def test_bad_mcp_server_settings_are_refused_with_the_reason(raw: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_mcp_servers(raw)


def test_mcp_server_settings_default_to_every_mode() -> None:
    assert parse_mcp_servers("") == []
    [stdio, http] = parse_mcp_servers('[{"name": "fs", "command": "srv", "args": ["-v"]}, {"name": "web", "url": "http://127.0.0.1:9/mcp", "modes": ["conversation"]}]')
    assert stdio.args == ["-v"] and set(stdio.modes) == {"conversation", "free_time", "wakeup", "ingress"} and stdio.idempotent is None
    assert http.url == "http://127.0.0.1:9/mcp" and http.modes == ["conversation"]
