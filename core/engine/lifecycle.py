"""Mode openings, completion and group context: the parts of ``Session`` beyond the turn loop."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from core.engine.attachments import inline_attachment_bytes
from core.engine.delivery import validate_delivery_file_name
from core.engine.journal import EntryKind
from core.engine.objects import transport_kind_for
from core.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from core.engine.session import Checkpoint, Draft, Session

FREE_TIME_REASONS = ("tool", "deadline", "hard-stop", "user-stop")
WRITE_MODES = ("free_time", "wakeup", "ingress")
INGRESS_HISTORY_CHARS = 200_000

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def is_rfc3339(value: object) -> bool:
    """True for a complete RFC 3339 date-time with an offset."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return False
    return True


def interrupted_result(call_id: str, name: str, why: str) -> dict[str, Any]:
    """Payload of a durable interrupted tool result."""
    return {"id": call_id, "name": name, "ok": False, "interrupted": True, "content": f"interrupted: {why}"}


def attachment_drafts(session: Session, attachments: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Object payloads for attachments carrying bytes, and the attachment list for the message."""
    objects: list[dict[str, Any]] = []
    listed: list[dict[str, Any]] = []
    for raw in attachments:
        if not isinstance(raw, dict):
            raise InvalidInput("each attachment must be an object")
        file_name = validate_delivery_file_name(raw.get("file_name"))
        media_type = str(raw.get("media_type") or "application/octet-stream")
        object_id = str(raw.get("id") or session.new_id("att"))
        listed.append({"id": object_id, "file_name": file_name, "media_type": media_type})
        if raw.get("data_base64") is not None:
            data = inline_attachment_bytes(file_name, str(raw["data_base64"]))
            objects.append({
                "object_id": object_id, "file_name": file_name, "media_type": media_type,
                "transport_kind": transport_kind_for(media_type), "size": len(data), "delivery": False,
                "data_b64": base64.b64encode(data).decode("ascii"),
            })
    return objects, listed


def _opening_drafts(session: Session, mode: str, text: str) -> list[Draft]:
    from core.engine.session import Draft

    turn_id = session.new_id("turn")
    return [
        Draft(EntryKind.EVENT, {"type": "opening", "mode": mode}, turn_id),
        Draft(EntryKind.EVENT, {"type": "turn_started", "principal": None}, turn_id),
        Draft(EntryKind.USER_MESSAGE, {"text": text, "attachments": [], "agent_owned": False, "opening": mode}, turn_id),
    ]


def _instructions(session: Session) -> str:
    value = session.state.channel.get("instructions")
    return f"\n{value}" if isinstance(value, str) and value else ""


async def stage_free_time_opening(session: Session, checkpoint: Checkpoint | None) -> bool:
    """KS-7: once per session, free-time mode only, never over a pending turn."""
    state = session.state
    if state.mode.kind != "free_time" or state.openings.get("free_time") or state.turn.pending or state.completed:
        return False
    data = orjson.dumps(state.free_time, option=orjson.OPT_SORT_KEYS).decode()
    text = f"[free time opening]\n{data}{_instructions(session)}"
    await session.commit(_opening_drafts(session, "free_time", text), checkpoint)
    return True


async def stage_wakeup_opening(session: Session, checkpoint: Checkpoint | None) -> bool:
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


async def stage_ingress_opening(session: Session) -> None:
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


async def finalize_free_time(session: Session, reason: str, result: str, checkpoint: Checkpoint | None) -> None:
    """KS-17: exactly tool | deadline | hard-stop | user-stop; records the result, clears the turn."""
    if reason not in FREE_TIME_REASONS:
        raise InvalidInput(f"free-time finalize reason must be one of {', '.join(FREE_TIME_REASONS)}, not {reason!r}")
    state = session.state
    if state.mode.kind != "free_time":
        raise InvalidInput(f"finalize_free_time needs free_time mode, not {state.mode.kind}")
    if session.running:
        raise Conflict("a run is in progress: cancel it first")
    if state.free_time_result is not None:
        raise Conflict("this free-time slice is already finalized")
    drafts = [
        session.draft(EntryKind.TOOL_RESULT, interrupted_result(c.id, c.name, f"free time ended ({reason})"))
        for c in state.turn.open_calls
    ]
    drafts.append(session.draft(EntryKind.EVENT, {"type": "finalized", "reason": reason, "result": result}))
    await session.commit(drafts, checkpoint)


async def commit_write_session(session: Session, checkpoint: Checkpoint | None) -> None:
    """KS-18: only free_time / wakeup / ingress; atomic, revalidated knowledge commit, then completed."""
    state = session.state
    if state.mode.kind not in WRITE_MODES:
        raise InvalidInput(f"commit_current_write_session is not valid in {state.mode.kind} mode")
    if state.commit is not None:
        return
    if state.turn.pending:
        raise Conflict("a turn is still pending; finalize or interrupt it before committing")
    plan = state.knowledge_plan
    await session.knowledge.commit(plan.write_session_id, list(plan.ops))
    payload = {"type": "committed", "write_session_id": plan.write_session_id, "op_count": len(plan.ops)}
    await session.commit([session.draft(EntryKind.EVENT, payload)], checkpoint)


def is_group(channel: dict[str, Any]) -> bool:
    """A group session: the channel's chat is declared multi-party."""
    chat = channel.get("chat")
    return isinstance(chat, dict) and chat.get("multi_party") is True


async def refresh_group_context(
    session: Session, context: dict[str, Any], current_message_id: str | None, checkpoint: Checkpoint | None
) -> bool:
    """KS-15: no-op outside groups; else one controller update box, then context recovery."""
    from core.engine.recovery import recover_context

    if not is_group(session.state.channel):
        return False
    if not isinstance(context, dict):
        raise InvalidInput("group context must be an object")
    payload = {"box_id": session.new_id("box"), "context": context, "current_message_id": current_message_id}
    await session.commit([session.draft(EntryKind.BOX, payload)], checkpoint)
    await recover_context(session, checkpoint)
    return True


async def object_bytes_from_journal(session: Session, object_id: str, seq: int) -> bytes:
    """Load a pending object's bytes from its journal entry."""
    for entry in await session.journal.load(session.session_id):
        if entry.seq == seq and entry.payload.get("object_id") == object_id:
            return base64.b64decode(entry.payload.get("data_b64", ""))
    raise NotFound(f"object {object_id!r} is missing from the journal")
