"""Custom tools from a plugin module (``TURNSTILE_TOOL_MODULES``) through NATS and the service:
schema-checked arguments, time limits, failures as tool results, per-mode authorisation (issue 16)."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.tool_helpers import CHAT, tool_results, turn_ended


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"tool_modules": ["tests.integration.plugin_tools"]})


async def _run(nc: Client, subjects: Subjects, script: str) -> tuple[Collector, Collector]:
    sid = f"custom-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: turn_ended(events), what="turn.ended")
    await wait_for(lambda: replies.messages, what="the reply")
    return replies, checkpoints


async def test_a_plugin_tool_is_called_with_arguments_its_schema_accepts(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    replies, checkpoints = await _run(nc, subjects, '/tool strict_code {"code": "ABC"}\n/say ok')
    [result] = tool_results(checkpoints)
    assert result["name"] == "strict_code" and result["ok"] is True and result["content"] == "code ABC"
    assert [r["text"] for r in replies.json()] == ["ok"]


async def test_arguments_the_schema_refuses_get_an_invalid_result_and_never_reach_the_tool(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # "pattern" is beyond the built-in schema subset: the full JSON Schema check refuses it.
    _, checkpoints = await _run(nc, subjects, '/tool strict_code {"code": "abc"}\n/tool strict_code {}\n/say ok')
    first, second = tool_results(checkpoints)
    assert first["ok"] is False and first["content"] == "error (invalid): arguments.code: 'abc' does not match '^[A-Z]{3}$'"
    assert second["ok"] is False and second["content"] == "error (invalid): arguments: 'code' is a required property"


async def test_a_tool_over_its_time_limit_and_a_raising_tool_end_as_error_results_not_as_a_failed_turn(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    replies, checkpoints = await _run(nc, subjects, "/tool sleepy\n/tool explode\n/say still answering")
    timed_out, raised = tool_results(checkpoints)
    assert timed_out["ok"] is False and timed_out["content"].startswith("error (timeout): tool 'sleepy' did not finish within 0.3 s")
    assert raised["ok"] is False and raised["content"] == "error (internal): RuntimeError: the tool broke"
    assert [r["text"] for r in replies.json()] == ["still answering"]


async def test_a_tool_outside_its_modes_is_neither_offered_nor_run(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert service.engines is not None
    offered = {spec.name for spec in service.engines.tools.specs_for("conversation", has_work=False)}
    assert {"strict_code", "hold_once"} <= offered and "free_time_only" not in offered
    assert "free_time_only" in {s.name for s in service.engines.tools.specs_for("free_time", has_work=False)}
    _, checkpoints = await _run(nc, subjects, "/tool free_time_only\n/say ok")
    [result] = tool_results(checkpoints)
    assert result["ok"] is False and result["content"] == "error (forbidden): tool 'free_time_only' is not available in conversation mode"
