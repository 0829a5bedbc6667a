"""Helpers for the custom-tool and MCP integration tests."""

from __future__ import annotations

from typing import Any

from tests.integration.harness import Collector
from tests.integration.ks_helpers import last_snapshot

CHAT = {"type": "private", "target_id": "u1", "multi_party": False}


def tool_results(checkpoints: Collector) -> list[dict[str, Any]]:
    """The tool results of the last checkpoint's transcript, in order."""
    return [i["payload"] for i in last_snapshot(checkpoints)["transcript"] if i["kind"] == "tool_result"]


def turn_ended(events: Collector) -> bool:
    return any(e["type"] == "turn.ended" for e in events.json())
