"""``turnstile api``: call a control operation; ``--list`` shows them all, ``OP --help`` its request fields."""

from __future__ import annotations

import re
import typing
from typing import TYPE_CHECKING, Any

import orjson
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from consumers.cli_support import EXIT_REFUSED, Cli, connected, fail, out, request, run
from schemas.wire import Page

if TYPE_CHECKING:
    from consumers.catalog import OperationSpec

# The catalog is imported only where it is read (``--list``, ``OP --help``): it imports every
# operation's implementation (the whole service, ~1 s). A call does not read it: the service
# answers an operation it does not serve with ``not_found`` (its fallback on ``<prefix>.api.>``).
OPERATION_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+")
UNKNOWN_PREFIX = "no control operation "  # consumers/api.py unknown_operation_reply


def _type_name(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return text.replace("typing.", "").replace("schemas.control.", "").replace("schemas.turns_results.", "") \
        .replace("schemas.turns_control.", "").replace("NoneType", "None")


def _field_line(name: str, field: FieldInfo) -> str:
    required = "required" if field.is_required() else f"default {orjson.dumps(field.get_default(call_default_factory=True), default=str).decode()}"
    described = f"  {field.description}" if field.description else ""
    return f"  {name}: {_type_name(field.annotation)} ({required}){described}"


def _result_name(result: Any) -> str:
    if typing.get_origin(result) is list:
        return f"list of {_result_name(typing.get_args(result)[0])}"
    if typing.get_origin(result) is Page:
        return f"list of {_result_name(typing.get_args(result)[0])}, one page (next_cursor beside result)"
    return result.__name__ if isinstance(result, type) else str(result)


def operation_help(spec: OperationSpec) -> str:
    """What ``turnstile api OP --help`` prints: summary, request fields, result model."""
    model: type[BaseModel] = spec.request
    lines = [f"turnstile api {spec.name} [BODY]", "", spec.summary, "",
             "Request fields (BODY is a JSON object; unknown fields are refused):"]
    fields = model.model_fields
    lines += [_field_line(name, field) for name, field in fields.items()] or ["  (none: send {} or nothing)"]
    lines += ["", f"Result: {_result_name(spec.result)} (schema: docs/schemas/api.{spec.name}.result.json)"]
    return "\n".join(lines)


def list_operations(cli: Cli) -> None:
    from consumers.catalog import operation_specs

    specs = operation_specs()
    if cli.json:
        cli.emit([{"operation": s.name, "summary": s.summary} for s in specs])
        return
    width = max(len(s.name) for s in specs)
    for spec in specs:
        out(f"{spec.name.ljust(width)}  {spec.summary}")


def unknown_operation(operation: str) -> typing.NoReturn:
    """The one-line refusal of a name no operation has (exit 2)."""
    fail(f"unknown operation {operation!r} (`turnstile api --list` shows them)", EXIT_REFUSED)


def api_command(
    ctx: typer.Context,
    operation: str | None = typer.Argument(None, metavar="OP", help="<resource>.<verb>, e.g. session.get"),
    body: str = typer.Argument("{}", metavar="BODY", help="the request as a JSON object"),
    list_: bool = typer.Option(False, "--list", help="every operation with its one-line summary"),
    help_: bool = typer.Option(False, "--help", "-h", help="this help, or OP's request fields"),
    timeout: float = typer.Option(10.0, help="seconds to wait for the reply"),
) -> None:
    """Call a control operation: `turnstile api session.get '{"session_id": "s1"}'`."""
    cli: Cli = ctx.obj
    if list_:
        list_operations(cli)
        return
    if operation is None:
        out(ctx.get_help())
        if not help_:
            raise typer.Exit(EXIT_REFUSED)
        return
    if help_:
        from consumers.catalog import find

        spec = find(operation)
        if spec is None:
            unknown_operation(operation)
        out(operation_help(spec))
        return
    if not OPERATION_NAME.fullmatch(operation):  # it becomes a subject token: no wildcards or spaces
        unknown_operation(operation)
    try:
        parsed = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as exc:
        fail(f"BODY is not JSON: {exc}", EXIT_REFUSED)

    async def call(cli: Cli) -> int:
        async with connected(cli) as nc:
            reply = await request(nc, cli, operation, orjson.dumps(parsed), timeout)
        if reply.get("ok") or cli.json:
            cli.emit(reply)
            return 0 if reply.get("ok") else EXIT_REFUSED
        error = reply.get("error") or {}
        if error.get("code") == "not_found" and str(error.get("message", "")).startswith(UNKNOWN_PREFIX):
            unknown_operation(operation)
        fail(f"{operation}: {error.get('code', 'error')}: {error.get('message', '')}", EXIT_REFUSED)

    raise typer.Exit(run(cli, call))
