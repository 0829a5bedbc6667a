"""The interface for tools that agent teams add without editing turnstile (docs/agent-developers.md).

A plugin module or ``turnstile.tools`` entry point exports ``ToolDefinition`` objects; the
``custom_tool`` decorator builds one from an async handler and makes the author state what
turnstile cannot guess: the modes the tool is allowed in and whether re-running it is safe.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from core.engine.tools.context import ToolContext
from core.engine.tools.registry import ALL_MODES, ToolDefinition, ToolOutcome
from core.errors import InvalidInput

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible APIs accept as a function name

PluginHandler = Callable[[ToolContext, dict[str, Any]], Awaitable["ToolOutcome | str"]]


def custom_tool(
    *,
    name: str,
    description: str,
    parameters: dict[str, Any],
    modes: Iterable[str],
    idempotent: bool,
    timeout_s: float | None = None,
) -> Callable[[PluginHandler], ToolDefinition]:
    """Decorate ``async def handler(ctx, args) -> ToolOutcome | str`` into a ToolDefinition.

    A returned string is a successful result with that content; raise (any exception) or
    return ``ToolOutcome(ok=False, ...)`` for a failed one. ``timeout_s`` None takes the
    service's ``TURNSTILE_TOOL_TIMEOUT_S``.
    """

    def wrap(handler: PluginHandler) -> ToolDefinition:
        async def run(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
            result = await handler(ctx, args)
            return result if isinstance(result, ToolOutcome) else ToolOutcome(ok=True, content=str(result))

        tool = ToolDefinition(
            name=name, description=description, parameters=parameters, handler=run,
            modes=frozenset(modes), idempotent=idempotent, timeout_s=timeout_s,
        )
        check_tool(tool)
        return tool

    return wrap


def check_tool(tool: ToolDefinition) -> None:
    """Refuse a tool turnstile could not offer or authorise (InvalidInput saying why)."""
    if not isinstance(tool, ToolDefinition):
        raise InvalidInput(f"{tool!r} is not a ToolDefinition")
    if not TOOL_NAME.match(tool.name):
        raise InvalidInput(f"tool name {tool.name!r} must be 1-64 letters, digits, '_' or '-'")
    unknown = sorted(set(tool.modes) - ALL_MODES)
    if unknown or not tool.modes:
        raise InvalidInput(f"tool {tool.name!r}: modes must be a non-empty subset of {sorted(ALL_MODES)}, got {sorted(tool.modes)}")
    if not isinstance(tool.parameters, dict) or tool.parameters.get("type") != "object":
        raise InvalidInput(f"tool {tool.name!r}: parameters must be a JSON Schema of type object")
    if tool.timeout_s is not None and not tool.timeout_s > 0:
        raise InvalidInput(f"tool {tool.name!r}: timeout_s must be > 0")
