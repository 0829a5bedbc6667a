"""Helpers shared by the KS integration tests: event/checkpoint views and a test-only stalling tool."""

from __future__ import annotations

import asyncio
from typing import Any

from core.engine import ToolDefinition
from core.engine.tools import ToolOutcome
from core.engine.tools.registry import obj
from tests.integration.harness import Collector


async def _wait_until_cancelled(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


WAIT_FOREVER = ToolDefinition(
    name="wait_forever",
    description="Test-only: a tool call that never finishes until it is cancelled.",
    parameters=obj({}, []),
    handler=_wait_until_cancelled,
)


def event_types(events: Collector) -> list[str]:
    return [e["type"] for e in events.json()]


def events_of(events: Collector, kind: str) -> list[dict[str, Any]]:
    return [e for e in events.json() if e["type"] == kind]


def transitions(checkpoints: Collector) -> list[str]:
    return [cp["transition"] for cp in checkpoints.json()]


def last_snapshot(checkpoints: Collector) -> dict[str, Any]:
    snapshot: dict[str, Any] = checkpoints.json()[-1]["snapshot"]
    return snapshot


def results_by_call(transcript: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every tool call id the model issued → the tool results journaled for it."""
    calls: dict[str, list[dict[str, Any]]] = {}
    for item in transcript:
        if item["kind"] == "agent_message":
            for call in item["payload"].get("tool_calls") or []:
                calls.setdefault(call["id"], [])
    for item in transcript:
        if item["kind"] == "tool_result":
            calls.setdefault(item["payload"]["id"], []).append(item["payload"])
    return calls
