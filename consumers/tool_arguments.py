"""Full JSON Schema argument checks for tools that bring their own schema (plugins, MCP servers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.errors import InvalidInput

ArgumentCheck = Callable[[dict[str, Any]], None]


def schema_check(schema: dict[str, Any], tool_name: str) -> ArgumentCheck:
    """A check raising InvalidInput for arguments ``schema`` refuses; InvalidInput now if the schema is broken.

    The validator class follows the schema's ``$schema`` (Draft 2020-12 when absent).
    """
    # Imported here: a service without custom tools does not pay for jsonschema at start-up.
    from jsonschema import exceptions as schema_errors  # type: ignore[import-untyped]
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        raise InvalidInput(f"tool {tool_name!r}: parameters are not a valid JSON Schema: {exc.message}") from exc
    validator = cls(schema)

    def check(arguments: dict[str, Any]) -> None:
        error = schema_errors.best_match(validator.iter_errors(arguments))
        if error is not None:
            where = "arguments" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise InvalidInput(f"{where}: {error.message}")

    return check
