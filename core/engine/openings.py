"""Mode openings (KS-7, KS-16): the first turn of a free-time, wakeup or ingress session."""

from __future__ import annotations

import orjson

from core.engine.drafts import Checkpoint, Draft
from core.engine.journal import EntryKind
from core.engine.session_port import SessionPort
from core.engine.timestamps import is_rfc3339
from core.errors import Conflict, InvalidInput, NotFound

INGRESS_HISTORY_CHARS = 200_000


def _opening_drafts(session: SessionPort, mode: str, text: str) -> list[Draft]:
    turn_id = session.new_id("turn")
    return [
        Draft(EntryKind.EVENT, {"type": "opening", "mode": mode}, turn_id),
        Draft(EntryKind.EVENT, {"type": "turn_started", "principal": None}, turn_id),
        Draft(EntryKind.USER_MESSAGE, {"text": text, "attachments": [], "agent_owned": False, "opening": mode}, turn_id),
    ]


def _instructions(session: SessionPort) -> str:
    value = session.state.channel.get("instructions")
    return f"\n{value}" if isinstance(value, str) and value else ""


async def stage_free_time_opening(session: SessionPort, checkpoint: Checkpoint | None) -> bool:
    """KS-7: once per session, free-time mode only, never over a pending turn."""
    state = session.state
    if state.mode.kind != "free_time" or state.openings.get("free_time") or state.turn.pending or state.completed:
        return False
    data = orjson.dumps(state.free_time, option=orjson.OPT_SORT_KEYS).decode()
    text = f"[free time opening]\n{data}{_instructions(session)}"
    await session.commit(_opening_drafts(session, "free_time", text), checkpoint)
    return True


async def stage_wakeup_opening(session: SessionPort, checkpoint: Checkpoint | None) -> bool:
    """KS-7: once per session; the channel must carry an RFC 3339 ``wakeup_marker``."""
    state = session.state
    if state.mode.kind != "wakeup":
        raise InvalidInput(f"stage_wakeup_opening needs wakeup mode, not {state.mode.kind}")
    if state.openings.get("wakeup"):
        return False
    marker = state.channel.get("wakeup_marker")
    if not is_rfc3339(marker):
        raise InvalidInput(f"channel.wakeup_marker must be an RFC 3339 date-time, got {marker!r}")
    if state.turn.pending or state.completed:
        raise Conflict("a turn is pending or the session is completed")
    text = f"[wakeup opening]\nwakeup_marker: {marker}{_instructions(session)}"
    await session.commit(_opening_drafts(session, "wakeup", text), checkpoint)
    return True


async def stage_ingress_opening(session: SessionPort) -> None:
    """KS-16: stage the source conversation's history (quoted) as the ingress turn."""
    record_id = session.state.mode.record_id
    if not record_id:
        raise InvalidInput("ingress mode needs a record_id")
    if session.history_reader is None:
        raise InvalidInput("ingress mode needs a history reader")
    history = await session.history_reader.read_history(record_id, INGRESS_HISTORY_CHARS)
    if history is None:
        raise NotFound(f"no history for ingress record {record_id!r}")
    quoted = "\n".join(f"> {line}" for line in history.splitlines())
    text = f"[history ingress of {record_id}]\n{quoted}{_instructions(session)}"
    await session.commit(_opening_drafts(session, "ingress", text))
