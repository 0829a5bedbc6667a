"""Custom tools from outside turnstile: ``turnstile.tools`` entry points and ``TURNSTILE_TOOL_MODULES``.

Loaded once at start-up. An entry point or a module's ``TOOLS`` attribute is a ToolDefinition,
an iterable of them, or a callable returning either. Every tool is checked (name, modes, schema)
and gets a full JSON Schema argument check and the default time limit when it sets none; a
broken plugin stops the start with an InvalidInput naming it.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from consumers.settings import Settings
from consumers.tool_arguments import schema_check
from core.engine.tools.custom import check_tool
from core.engine.tools.registry import ToolDefinition
from core.errors import InvalidInput

ENTRY_POINT_GROUP = "turnstile.tools"
MODULE_ATTRIBUTE = "TOOLS"

log = logging.getLogger(__name__)


def load_tools(settings: Settings) -> list[ToolDefinition]:
    """Every plugin tool, ready to register (entry points first, then the configured modules)."""
    found: list[tuple[str, ToolDefinition]] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        origin = f"entry point {point.name!r} ({point.value})"
        found.extend((origin, t) for t in _tools_of(_load(origin, point.load), origin))
    for name in settings.tool_modules:
        origin = f"module {name!r}"
        module = _load(origin, lambda name=name: importlib.import_module(name))
        if not hasattr(module, MODULE_ATTRIBUTE):
            raise InvalidInput(f"{origin} has no {MODULE_ATTRIBUTE} attribute (a list of ToolDefinition)")
        found.extend((origin, t) for t in _tools_of(getattr(module, MODULE_ATTRIBUTE), origin))
    tools: list[ToolDefinition] = []
    origins: dict[str, str] = {}
    for origin, tool in found:
        if tool.name in origins:
            raise InvalidInput(f"tool {tool.name!r} of {origin} is also defined by {origins[tool.name]}")
        origins[tool.name] = origin
        tools.append(prepare(tool, default_timeout_s=settings.tool_timeout_s))
        log.info("custom tool %s from %s (modes %s, idempotent %s)", tool.name, origin, sorted(tool.modes), tool.idempotent)
    return tools


def prepare(tool: ToolDefinition, *, default_timeout_s: float) -> ToolDefinition:
    """The tool checked, with a JSON Schema argument check and a time limit."""
    check_tool(tool)
    return dataclasses.replace(
        tool,
        check_arguments=tool.check_arguments or schema_check(tool.parameters, tool.name),
        timeout_s=tool.timeout_s if tool.timeout_s is not None else default_timeout_s,
    )


def _load(origin: str, load: Any) -> Any:
    try:
        return load()
    except Exception as exc:
        raise InvalidInput(f"loading tools from {origin} failed: {type(exc).__name__}: {exc}") from exc


def _tools_of(value: Any, origin: str) -> list[ToolDefinition]:
    if callable(value) and not isinstance(value, ToolDefinition):
        value = _load(origin, value)
    items: Iterable[Any] = [value] if isinstance(value, ToolDefinition) else value
    try:
        tools = list(items)
    except TypeError as exc:
        raise InvalidInput(f"{origin} gave {value!r}, not ToolDefinition(s)") from exc
    for tool in tools:
        if not isinstance(tool, ToolDefinition):
            raise InvalidInput(f"{origin} gave {tool!r}, not a ToolDefinition")
    return tools
