"""Checkpoint transition names: which durable step a snapshot was published after.

A step journals one or more entries atomically (a tool result together with the
knowledge write it staged, an interrupt's repaired results with its notice). The
name is chosen from the entries that are new since the previous checkpoint, by
significance; docs/protocol.md ("Checkpoint transitions") lists them.
"""

from __future__ import annotations

from core.engine.snapshot import EncodedSnapshot
from core.engine.state import EventRecord, TranscriptItem

# Event types that name their own step, most significant first.
_EVENT_STEPS = ("interrupted", "committed", "finalized", "turn_ended", "rounds_exhausted", "rounds_reset",
                "source_terminated")


def new_entries(snapshot: EncodedSnapshot, since_version: int) -> tuple[list[TranscriptItem], list[EventRecord]]:
    """Transcript items and events of ``snapshot`` with a journal seq >= ``since_version``
    (from the entries it carries as new: the snapshot itself is not parsed)."""
    return (
        [i for i in snapshot.new_items if int(i.get("seq", -1)) >= since_version],
        [e for e in snapshot.new_events if int(e.get("seq", -1)) >= since_version],
    )


def transition_of(snapshot: EncodedSnapshot, since_version: int = 0) -> str:
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
    if snapshot.state_version == 0:  # nothing was ever journaled
        return "opened"
    return "step"
