"""Checkpoint transition names: which durable step a snapshot was published after.

A step journals one or more entries atomically (a tool result together with the
knowledge write it staged, an interrupt's repaired results with its notice). The
name is chosen from the entries that are new since the previous checkpoint, by
significance; see docs/control-turns.md for the list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.engine.snapshot import EncodedSnapshot

# Event types that name their own step, most significant first.
_EVENT_STEPS = ("interrupted", "committed", "finalized", "turn_ended", "rounds_exhausted", "rounds_reset",
                "source_terminated")


def new_entries(snapshot: Mapping[str, Any], since_version: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Transcript items and events of ``snapshot`` with a journal seq >= ``since_version``."""
    if isinstance(snapshot, EncodedSnapshot):  # it carries its new entries: no need to parse it
        items, events = snapshot.new_items, snapshot.new_events
    else:
        items, events = snapshot.get("transcript") or [], snapshot.get("events") or []
    return (
        [i for i in items if int(i.get("seq", -1)) >= since_version],
        [e for e in events if int(e.get("seq", -1)) >= since_version],
    )


def transition_of(snapshot: Mapping[str, Any], since_version: int = 0) -> str:
    """Name the step that produced ``snapshot`` (entries since ``since_version``)."""
    items, events = new_entries(snapshot, since_version)
    event_types = [str(e.get("type")) for e in events]
    for step in _EVENT_STEPS:
        if step in event_types:
            return step
    kinds = [str(i.get("kind")) for i in items]
    if "tool_result" in kinds:
        return "tool_result"
    if "tool_call" in kinds:
        return "tool_call"
    if "agent_message" in kinds:
        message = next(i for i in reversed(items) if i.get("kind") == "agent_message")
        return "model_response" if (message.get("payload") or {}).get("tool_calls") else "answer"
    if "summary" in kinds:
        return "context_compacted"
    if "box" in kinds:
        return "group_context"
    if "user_message" in kinds:
        return "message_staged"
    if "notice" in kinds:
        return "notice"
    if _empty(snapshot):
        return "opened"
    return "step"


def _empty(snapshot: Mapping[str, Any]) -> bool:
    """Nothing was ever journaled (an encoded snapshot says so by its version, without parsing)."""
    if isinstance(snapshot, EncodedSnapshot):
        return snapshot.state_version == 0
    return not snapshot.get("transcript") and not snapshot.get("events")
