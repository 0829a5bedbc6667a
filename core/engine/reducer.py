"""Pure fold of journal entries into ``SessionState``; used live and on replay.

Payload shapes by kind:

- user_message  ``{text, attachments: [{id, file_name, media_type}], agent_owned, inbound_id,
                final, opening}``
- agent_message ``{text, tool_calls: [{id, name, arguments}], usage, round}`` (a model response)
- tool_call     ``{id, name, arguments}`` (dispatch started)
- tool_result   ``{id, name, ok, content, interrupted, usage}``
- notice        ``{code, text}``
- object        ``{object_id, file_name, media_type, transport_kind, size, delivery, data_b64}``
- reply         ``{text}`` (delivered by the reply tool)
- summary       ``{text, covers_through_seq, usage}`` (context recovery)
- box           ``{box_id, context, current_message_id}`` (controller update)
- event         ``{type, ...}`` with type one of turn_started, turn_ended, interrupted,
                created, rounds_exhausted, rounds_reset, opening, source_terminated, finalized,
                knowledge_staged, committed
"""

from __future__ import annotations

from typing import cast

from core.engine.journal import EntryKind, JournalEntry
from core.engine.state import (
    MAX_BOXES,
    MAX_EVENTS,
    MAX_EXTERNAL_EVENTS,
    MAX_INBOUND_IDS,
    BoxRecord,
    CommitFacts,
    EventRecord,
    ExternalResponse,
    FreeTimeResult,
    KnowledgeOp,
    LastTurn,
    ObjectMeta,
    OpenCall,
    SessionState,
    TranscriptItem,
    TurnOutput,
    TurnState,
)
from core.providers.base import Usage


def transcript_item(entry: JournalEntry) -> TranscriptItem:
    """The transcript form of an entry: object bytes stay in the journal only.

    The fields of ``entry.model_dump(mode="json")`` in its order, the payload shared rather than
    copied: a payload is JSON-ready (the journal stores it with orjson) and is not changed
    after it was journaled.
    """
    payload = entry.payload
    if entry.kind is EntryKind.OBJECT:
        payload = {k: v for k, v in payload.items() if k != "data_b64"}
    return {
        "seq": entry.seq, "kind": entry.kind.value, "turn_id": entry.turn_id,
        "external_event_id": entry.external_event_id, "at": entry.at, "payload": payload,
    }


def apply(state: SessionState, entry: JournalEntry) -> None:
    """Fold one entry into ``state`` (in place)."""
    state.next_seq = entry.seq + 1
    handler = _HANDLERS[entry.kind]
    handler(state, entry)


def _append(state: SessionState, entry: JournalEntry) -> None:
    state.transcript.append(transcript_item(entry))


def _respond(
    state: SessionState, entry: JournalEntry, *, terminal: bool, text: str | None = None, object_id: str | None = None
) -> None:
    event_id = entry.external_event_id
    if not event_id:
        return
    record: dict[str, object] = {"seq": entry.seq, "kind": entry.kind.value, "turn_id": entry.turn_id, "at": entry.at}
    if text is not None:
        record["text"] = text
    if object_id is not None:
        record["object_id"] = object_id
    record["terminal"] = terminal
    responses = state.external_responses.pop(event_id, [])
    responses.append(cast(ExternalResponse, record))
    state.external_responses[event_id] = responses
    while len(state.external_responses) > MAX_EXTERNAL_EVENTS:
        state.external_responses.pop(next(iter(state.external_responses)))


def _user_message(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    inbound_id = entry.payload.get("inbound_id")
    if inbound_id:
        state.recent_inbound_ids.append(inbound_id)
        del state.recent_inbound_ids[:-MAX_INBOUND_IDS]


def _agent_message(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    payload = entry.payload
    state.rounds_used += 1
    state.usage_total = state.usage_total + Usage.model_validate(payload.get("usage") or {})
    calls = payload.get("tool_calls") or []
    text = payload.get("text") or ""
    if calls:
        state.turn.phase = "tools"
        state.turn.open_calls = [OpenCall.model_validate(c) for c in calls]
        return
    state.turn.phase = "answered"
    state.turn.answer = text
    if text:
        state.turn.outputs.append(TurnOutput(seq=entry.seq, kind="text", text=text))
        _respond(state, entry, text=text, terminal=True)


def _tool_call(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    for call in state.turn.open_calls:
        if call.id == entry.payload["id"]:
            call.dispatched = True


def _tool_result(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    state.usage_total = state.usage_total + Usage.model_validate(entry.payload.get("usage") or {})
    call_id = entry.payload["id"]
    state.turn.open_calls = [c for c in state.turn.open_calls if c.id != call_id]


def _notice(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    _respond(state, entry, text=entry.payload.get("text", ""), terminal=False)


def _object(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    meta = cast(ObjectMeta, {k: v for k, v in entry.payload.items() if k != "data_b64"})
    meta["seq"] = entry.seq
    state.objects[entry.payload["object_id"]] = meta
    if entry.payload.get("delivery"):
        state.turn.outputs.append(
            TurnOutput(
                seq=entry.seq,
                kind="object",
                object_id=meta["object_id"],
                file_name=meta.get("file_name"),
                media_type=meta.get("media_type"),
            )
        )
        _respond(state, entry, object_id=meta["object_id"], terminal=True)


def _reply(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    text = entry.payload["text"]
    state.turn.outputs.append(TurnOutput(seq=entry.seq, kind="text", text=text))
    _respond(state, entry, text=text, terminal=True)


def _summary(state: SessionState, entry: JournalEntry) -> None:
    covers = int(entry.payload["covers_through_seq"])
    kept = [item for item in state.transcript if item["seq"] > covers]
    state.transcript = [transcript_item(entry), *kept]
    state.compacted_through_seq = covers
    state.usage_total = state.usage_total + Usage.model_validate(entry.payload.get("usage") or {})


def _box(state: SessionState, entry: JournalEntry) -> None:
    _append(state, entry)
    state.group_context = dict(entry.payload.get("context") or {})
    state.boxes.append(cast(BoxRecord, {"seq": entry.seq, **entry.payload}))
    del state.boxes[:-MAX_BOXES]


def _end_turn(state: SessionState, entry: JournalEntry, outcome: str, error: str = "") -> None:
    state.last_turn = LastTurn.model_validate(
        {"turn_id": state.turn.turn_id, "outcome": outcome, "ended_at": entry.at, "error": error[:200]}
    )
    state.turn.pending = False
    state.turn.phase = "idle"
    state.turn.open_calls = []
    state.orchestration["state"] = "idle"


def _event(state: SessionState, entry: JournalEntry) -> None:
    payload = entry.payload
    kind = payload["type"]
    state.events.append(
        cast(EventRecord, {"seq": entry.seq, "at": entry.at, **{k: v for k, v in payload.items() if k != "op"}})
    )
    del state.events[:-MAX_EVENTS]
    if kind == "created":
        state.started_at = payload["started_at"]
        state.knowledge_plan.write_session_id = payload["write_session_id"]
    elif kind == "turn_started":
        state.turn = TurnState(
            pending=True,
            turn_id=entry.turn_id,
            external_event_id=entry.external_event_id,
            principal=payload.get("principal"),
            phase="awaiting_model",
        )
        state.rounds_used = 0
        state.exhausted = False
        state.orchestration["state"] = "turn"
    elif kind == "turn_ended":
        _end_turn(state, entry, payload["outcome"], payload.get("error", ""))
    elif kind == "interrupted":
        _end_turn(state, entry, "aborted")
    elif kind == "rounds_exhausted":
        state.exhausted = True
    elif kind == "rounds_reset":
        state.rounds_used = 0
        state.exhausted = False
    elif kind == "opening":
        state.openings[payload["mode"]] = True
    elif kind == "source_terminated":
        state.source_terminated = True
    elif kind == "finalized":
        state.free_time_result = FreeTimeResult(reason=payload["reason"], result=payload.get("result", ""), at=entry.at)
        if state.turn.pending:
            _end_turn(state, entry, "finalized")
    elif kind == "knowledge_staged":
        state.knowledge_plan.ops.append(KnowledgeOp.model_validate(payload["op"]))
    elif kind == "committed":
        state.commit = CommitFacts(
            write_session_id=payload["write_session_id"],
            committed_at=entry.at,
            op_count=int(payload["op_count"]),
        )
        state.knowledge_plan.ops = []
        state.completed = True
    else:
        raise ValueError(f"unknown journal event type {kind!r}")


_HANDLERS = {
    EntryKind.USER_MESSAGE: _user_message,
    EntryKind.AGENT_MESSAGE: _agent_message,
    EntryKind.TOOL_CALL: _tool_call,
    EntryKind.TOOL_RESULT: _tool_result,
    EntryKind.NOTICE: _notice,
    EntryKind.OBJECT: _object,
    EntryKind.REPLY: _reply,
    EntryKind.SUMMARY: _summary,
    EntryKind.BOX: _box,
    EntryKind.EVENT: _event,
}
