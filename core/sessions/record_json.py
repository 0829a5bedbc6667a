"""JSON forms of records, for event payloads and JSON columns.

Decoding is tolerant the way the seed asks: a sub-object of the wrong shape is
dropped (an origin chat of the wrong type is read as absent), never guessed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from core.sessions.records import (
    SESSION_STATUSES,
    TAKE_SCOPES,
    TURN_OUTCOMES,
    JsonObject,
    JsonValue,
    LastTurn,
    OriginChat,
    PlaceRecord,
    SessionRecord,
    SessionStatus,
    TakeScope,
    TakeSettings,
    TokenUsage,
    WorkBinding,
    WorkspaceRecord,
)


def _opt_str(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _opt_float(value: JsonValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str_tuple(value: JsonValue) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def origin_chat_to_json(chat: OriginChat | None) -> JsonObject | None:
    """An origin chat as JSON, or None."""
    if chat is None:
        return None
    out: JsonObject = {"type": chat.type, "multi_party": chat.multi_party, "target_id": chat.target_id}
    if chat.self_id is not None:
        out["self_id"] = chat.self_id
    if chat.name is not None:
        out["name"] = chat.name
    return out


def origin_chat_from_json(value: JsonValue) -> OriginChat | None:
    """An origin chat from JSON; None when absent or of the wrong shape."""
    if not isinstance(value, dict):
        return None
    chat_type, multi, target = value.get("type"), value.get("multi_party"), value.get("target_id")
    if not isinstance(chat_type, str) or not isinstance(multi, bool) or not isinstance(target, str):
        return None
    return OriginChat(chat_type, multi, target, _opt_str(value.get("self_id")), _opt_str(value.get("name")))


def work_to_json(work: WorkBinding | None) -> JsonObject | None:
    """A work binding as JSON, or None."""
    if work is None:
        return None
    return {"root": work.root, "extra_roots": list(work.extra_roots), "worktrees": list(work.worktrees)}


def work_from_json(value: JsonValue) -> WorkBinding | None:
    """A work binding from JSON; None when absent or without a root."""
    if not isinstance(value, dict) or not isinstance(value.get("root"), str):
        return None
    return WorkBinding(
        cast(str, value["root"]), _str_tuple(value.get("extra_roots")), _str_tuple(value.get("worktrees"))
    )


def last_turn_to_json(turn: LastTurn | None) -> JsonObject | None:
    """The last turn as JSON, or None."""
    if turn is None:
        return None
    out: JsonObject = {"outcome": turn.outcome, "ended_at": turn.ended_at}
    if turn.error is not None:
        out["error"] = turn.error
    return out


def last_turn_from_json(value: JsonValue) -> LastTurn | None:
    """The last turn from JSON; None when absent or malformed."""
    if not isinstance(value, dict):
        return None
    outcome, ended_at = value.get("outcome"), _opt_float(value.get("ended_at"))
    if outcome not in TURN_OUTCOMES or ended_at is None:
        return None
    return LastTurn(outcome, ended_at, _opt_str(value.get("error")))


def tokens_to_json(tokens: TokenUsage | None) -> JsonObject | None:
    """Token usage as JSON, or None."""
    return None if tokens is None else {"input": tokens.input, "output": tokens.output}


def tokens_from_json(value: JsonValue) -> TokenUsage | None:
    """Token usage from JSON; None when absent or malformed."""
    if not isinstance(value, dict):
        return None
    given, used = value.get("input"), value.get("output")
    if not isinstance(given, int) or not isinstance(used, int):
        return None
    return TokenUsage(given, used)


def take_settings_to_json(settings: TakeSettings | None) -> JsonObject | None:
    """Take settings as JSON, or None."""
    if settings is None:
        return None
    return {
        "scope": settings.scope,
        "cross_bot_account": settings.cross_bot_account,
        "read_other_groups": settings.read_other_groups,
        "read_others_dms": settings.read_others_dms,
    }


def take_settings_from_json(value: JsonValue) -> TakeSettings | None:
    """Take settings from JSON; None when absent or with an unknown scope."""
    if not isinstance(value, dict) or value.get("scope") not in TAKE_SCOPES:
        return None
    return TakeSettings(
        scope=cast(TakeScope, value["scope"]),
        cross_bot_account=value.get("cross_bot_account") is True,
        read_other_groups=value.get("read_other_groups") is True,
        read_others_dms=value.get("read_others_dms") is True,
    )


def status_from_json(value: JsonValue) -> SessionStatus:
    """A status from JSON; unknown values read as ``active``."""
    return value if value in SESSION_STATUSES else "active"


# The JSON of the records encoded lately, by identity. A record is frozen, and a turn's record write
# encodes it twice: its row, then its ``session.updated`` payload once the write landed (other
# sessions' writes may come between). A held record keeps its id from being reused.
RECENT_RECORDS = 256
_recent: dict[int, tuple[SessionRecord, JsonObject]] = {}


def record_to_json(record: SessionRecord) -> JsonObject:
    """A session record as a JSON object (absent optional fields are None): a fresh dict, whose
    values a caller reads (a record encoded a moment ago is not encoded again)."""
    held = _recent.get(id(record))
    if held is not None and held[0] is record:
        return dict(held[1])
    value = _record_json(record)
    _recent[id(record)] = (record, value)
    if len(_recent) > RECENT_RECORDS:
        del _recent[next(iter(_recent))]
    return dict(value)


def _record_json(record: SessionRecord) -> JsonObject:
    return {
        "id": record.id,
        "name": record.name,
        "title": record.title,
        "parent_id": record.parent_id,
        "children": list(record.children),
        "status": record.status,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "created_from": record.created_from,
        "input_context": record.input_context,
        "result": record.result,
        "metadata": dict(record.metadata),
        "kind": record.kind,
        "origin_platform": record.origin_platform,
        "origin_chat": origin_chat_to_json(record.origin_chat),
        "workspace": record.workspace,
        "work": work_to_json(record.work),
        "current_dir": record.current_dir,
        "origin_instance": record.origin_instance,
        "last_reply_at": record.last_reply_at,
        "last_turn": last_turn_to_json(record.last_turn),
        "tokens": tokens_to_json(record.tokens),
        "take_settings": take_settings_to_json(record.take_settings),
    }


def record_from_json(value: JsonObject) -> SessionRecord:
    """A session record from JSON; ``kind`` and ``children`` are left for the manager to derive."""
    record_id = value.get("id")
    if not isinstance(record_id, str) or not record_id:
        raise ValueError("a session record needs a string id")
    metadata = value.get("metadata")
    created_at = _opt_float(value.get("created_at")) or 0.0
    return SessionRecord(
        id=record_id,
        created_at=created_at,
        updated_at=_opt_float(value.get("updated_at")) or created_at,
        status=status_from_json(value.get("status")),
        name=_opt_str(value.get("name")),
        title=_opt_str(value.get("title")),
        parent_id=_opt_str(value.get("parent_id")),
        created_from=_opt_str(value.get("created_from")),
        input_context=_opt_str(value.get("input_context")),
        result=_opt_str(value.get("result")),
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
        origin_platform=_opt_str(value.get("origin_platform")),
        origin_chat=origin_chat_from_json(value.get("origin_chat")),
        workspace=_opt_str(value.get("workspace")),
        work=work_from_json(value.get("work")),
        current_dir=_opt_str(value.get("current_dir")),
        origin_instance=_opt_str(value.get("origin_instance")),
        last_reply_at=_opt_float(value.get("last_reply_at")),
        last_turn=last_turn_from_json(value.get("last_turn")),
        tokens=tokens_from_json(value.get("tokens")),
        take_settings=take_settings_from_json(value.get("take_settings")),
    )


def place_to_json(place: PlaceRecord) -> JsonObject:
    """A place record as JSON."""
    return {
        "key": place.key,
        "kind": place.kind,
        "name": place.name,
        "root": place.root,
        "metadata": dict(place.metadata),
        "created_at": place.created_at,
        "updated_at": place.updated_at,
    }


def workspace_to_json(workspace: WorkspaceRecord) -> JsonObject:
    """A workspace as JSON (``id``, ``name``, ``root``)."""
    return {"id": workspace.id, "name": workspace.name, "root": workspace.root}


def without_derived(record: SessionRecord) -> SessionRecord:
    """The record as stored: derived ``children`` emptied (the record itself when it has none)."""
    return replace(record, children=()) if record.children else record

