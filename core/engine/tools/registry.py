"""Tool registry: JSON-schema parameters, per-mode authorisation, argument validation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import Forbidden, InvalidInput, NotFound
from core.providers.base import ToolSpec, Usage

if TYPE_CHECKING:
    from core.engine.tools.context import ToolContext

ALL_MODES = frozenset({"conversation", "free_time", "wakeup", "ingress"})


@dataclass
class StagedEntry:
    """An entry a tool asks to journal together with its result (same atomic append)."""

    kind: str
    payload: dict[str, Any]


@dataclass
class ToolOutcome:
    """What a tool produced: model-visible ``content`` and entries to journal with it."""

    ok: bool
    content: str
    entries: list[StagedEntry] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


Handler = Callable[["ToolContext", dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool: schema, the modes allowed to use it, and whether re-running it is safe.

    ``idempotent`` tools are re-dispatched when a crash left their call issued but
    without a result; others get a durable failed result instead (never re-run).
    ``timeout_s``: the handler's time limit (None: none); running over it is a failed result.
    ``check_arguments``: validates the arguments instead of ``validate_arguments``' schema
    subset (plugins and MCP tools bring full JSON Schemas); raises InvalidInput.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    modes: frozenset[str] = ALL_MODES
    idempotent: bool = True
    requires_work: bool = False
    timeout_s: float | None = None
    check_arguments: Callable[[dict[str, Any]], None] | None = None

    def spec(self) -> ToolSpec:
        """The provider-facing description."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


class ToolRegistry:
    """Named tools; lookup, per-mode listing and authorisation."""

    def __init__(self, tools: list[ToolDefinition] | None = None) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self._specs: dict[tuple[str, bool], list[ToolSpec]] = {}  # specs_for, built once per (mode, work)
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: ToolDefinition) -> None:
        """Add a tool; a second tool of the same name is an error."""
        if tool.name in self._tools:
            raise InvalidInput(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._specs.clear()

    def get(self, name: str) -> ToolDefinition | None:
        """The tool, or None."""
        return self._tools.get(name)

    def specs_for(self, mode: str, *, has_work: bool) -> list[ToolSpec]:
        """Tools offered to the model in ``mode`` (file tools only with a work binding), by name.

        Asked at every model request, so the specs are built once per (mode, work) and shared:
        callers get a fresh list of the same frozen specs.
        """
        key = (mode, has_work)
        specs = self._specs.get(key)
        if specs is None:
            specs = self._specs[key] = [
                t.spec()
                for t in sorted(self._tools.values(), key=lambda t: t.name)
                if mode in t.modes and (has_work or not t.requires_work)
            ]
        return list(specs)

    def authorise(self, name: str, mode: str) -> ToolDefinition:
        """The tool if ``mode`` may call it; NotFound / Forbidden otherwise."""
        tool = self._tools.get(name)
        if tool is None:
            raise NotFound(f"unknown tool {name!r}")
        if mode not in tool.modes:
            raise Forbidden(f"tool {name!r} is not available in {mode} mode")
        return tool


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}


def validate_arguments(schema: dict[str, Any], value: Any, where: str = "arguments") -> None:
    """Check ``value`` against the JSON-schema subset tools use; InvalidInput on mismatch.

    Supported: type, properties, required, additionalProperties (false), enum,
    minLength, minimum, maximum, items.
    """
    expected = schema.get("type")
    if expected:
        types = _TYPES[expected]
        if not isinstance(value, types) or (expected in ("integer", "number") and isinstance(value, bool)):
            raise InvalidInput(f"{where} must be of type {expected}")
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidInput(f"{where} must be one of {schema['enum']}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        raise InvalidInput(f"{where} must have at least {schema['minLength']} characters")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidInput(f"{where} must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidInput(f"{where} must be <= {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise InvalidInput(f"{where}.{key} is required")
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                raise InvalidInput(f"{where} has unknown field(s): {', '.join(extra)}")
        for key, sub in props.items():
            if key in value:
                validate_arguments(sub, value[key], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            validate_arguments(schema["items"], item, f"{where}[{index}]")


def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """Shorthand for a closed object schema."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
