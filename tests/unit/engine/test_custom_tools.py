"""Custom tools in the provider loop: a time limit per tool, failures as tool results,
argument checks before the handler, and the plugin-author decorator (issue 16)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.engine import builtin_registry
from core.engine.tools import ToolOutcome, custom_tool
from core.engine.tools.custom import check_tool
from core.engine.tools.registry import ToolDefinition
from core.errors import InvalidInput

from .conftest import Recorder, SessionFactory

OPEN = {"type": "object", "properties": {}, "additionalProperties": True}


def _results(session: Any) -> list[dict[str, Any]]:
    return [i["payload"] for i in session.transcript if i["kind"] == "tool_result"]


async def _hang(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def _own_timeout(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    raise TimeoutError("upstream took too long")


async def _explode(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    raise RuntimeError("kaput")


async def test_a_tool_over_its_time_limit_gets_a_timeout_result_and_the_turn_answers(make_session: SessionFactory) -> None:
    hang = ToolDefinition(name="hang", description="never ends", parameters=OPEN, handler=_hang, timeout_s=0.05)
    session = await make_session(tools=builtin_registry([hang]))
    await session.begin_user_turn("/tool hang\n/say after")
    assert await session.run_pending_turn("op", Recorder()) == "after"
    [result] = _results(session)
    assert result["ok"] is False and result["content"].startswith("error (timeout): tool 'hang' did not finish within 0.05 s")


async def test_a_tools_own_timeout_error_is_a_failure_not_a_limit(make_session: SessionFactory) -> None:
    tool = ToolDefinition(name="slowapi", description="x", parameters=OPEN, handler=_own_timeout, timeout_s=30)
    session = await make_session(tools=builtin_registry([tool]))
    await session.begin_user_turn("/tool slowapi\n/say after")
    assert await session.run_pending_turn("op", Recorder()) == "after"
    [result] = _results(session)
    assert result["ok"] is False and result["content"] == "error (internal): TimeoutError: upstream took too long"


async def test_a_raising_tool_becomes_an_error_result_not_a_crashed_turn(make_session: SessionFactory) -> None:
    tool = ToolDefinition(name="explode", description="x", parameters=OPEN, handler=_explode)
    session = await make_session(tools=builtin_registry([tool]))
    await session.begin_user_turn("/tool explode\n/say still here")
    assert await session.run_pending_turn("op", Recorder()) == "still here"
    [result] = _results(session)
    assert result["ok"] is False and result["content"] == "error (internal): RuntimeError: kaput"


async def test_check_arguments_runs_before_the_handler_and_refuses_with_invalid(make_session: SessionFactory) -> None:
    ran: list[dict[str, Any]] = []

    async def handler(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
        ran.append(args)
        return ToolOutcome(ok=True, content="ran")

    def check(args: dict[str, Any]) -> None:
        if args.get("n") != 1:
            raise InvalidInput("arguments.n must be 1")

    tool = ToolDefinition(name="picky", description="x", parameters=OPEN, handler=handler, check_arguments=check)
    session = await make_session(tools=builtin_registry([tool]))
    await session.begin_user_turn('/tool picky {"n": 2}\n/tool picky {"n": 1}\n/say ok')
    assert await session.run_pending_turn("op", Recorder()) == "ok"
    first, second = _results(session)
    assert first["ok"] is False and first["content"] == "error (invalid): arguments.n must be 1"
    assert second["ok"] is True and ran == [{"n": 1}]


async def test_custom_tool_turns_a_returned_string_into_a_successful_result(make_session: SessionFactory) -> None:
    @custom_tool(name="shout", description="upper", parameters={"type": "object"}, modes=["conversation"], idempotent=True)
    async def shout(ctx: Any, args: dict[str, Any]) -> str:
        return str(args.get("text", "")).upper()

    assert shout.modes == frozenset({"conversation"}) and shout.idempotent and shout.timeout_s is None
    session = await make_session(tools=builtin_registry([shout]))
    await session.begin_user_turn('/tool shout {"text": "hi"}\n/say ok')
    assert await session.run_pending_turn("op", Recorder()) == "ok"
    assert _results(session)[0]["content"] == "HI"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "has space"}, "tool name 'has space' must be"),
        ({"name": "x" * 65}, "must be 1-64"),
        ({"modes": frozenset({"conversation", "party"})}, "modes must be a non-empty subset"),
        ({"modes": frozenset()}, "modes must be a non-empty subset"),
        ({"parameters": {"type": "string"}}, "parameters must be a JSON Schema of type object"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
    ],
)
def test_check_tool_refuses_what_could_not_be_offered(changes: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"name": "ok", "description": "x", "parameters": OPEN, "handler": _explode}
    fields.update(changes)
    with pytest.raises(InvalidInput, match=message):
        check_tool(ToolDefinition(**fields))
