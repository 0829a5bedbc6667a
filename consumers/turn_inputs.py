"""What a turn reads of its inbound message, its session's records and its transcript."""

from __future__ import annotations

from typing import Any

from consumers.runner_ports import SessionRecords
from core.engine import Session
from core.engine.options import WorkBinding
from core.sessions.rules import root_of
from core.sessions.take import Principal
from schemas.wire import InboundMessage


def external_id_of(inbound: InboundMessage) -> str:
    """The id a turn is keyed by: the platform's event id, else one derived from the inbound message id."""
    return inbound.external_event_id or f"inbound:{inbound.platform}:{inbound.id}"


def principal_of(inbound: InboundMessage) -> str | None:
    """Who acts in the turn this message starts, in its journaled form (``Principal.key``)."""
    if inbound.sender is None or not inbound.sender.user_id:
        return None
    return Principal(inbound.platform, inbound.sender.user_id).key


def work_of(book: SessionRecords, session_id: str) -> WorkBinding | None:
    """The engine's view of the session's work binding (SM-5, SM-6, SM-35).

    The binding is the root's (a child works in its root's project); ``current_dir`` is the
    session's own. None when the tree has no binding (file tools are then refused).
    """
    record = book.get_session(session_id)
    root = root_of(session_id, book.get_session) if record is not None else None
    if record is None or root is None or root.work is None:
        return None
    return WorkBinding(
        root=root.work.root,
        extra_roots=tuple(root.work.extra_roots),
        worktrees=tuple(root.work.worktrees),
        current_dir=record.current_dir,
    )


def chat_of(book: SessionRecords, session_id: str, inbound: InboundMessage | None) -> dict[str, Any] | None:
    """The session's chat scope for a fresh engine session: the root's origin chat, else the inbound's."""
    origin = book.origin_chat_of(session_id)
    if origin is not None:
        return {"type": origin.type, "multi_party": bool(origin.multi_party), "target_id": origin.target_id,
                "name": origin.name}
    if inbound is not None and inbound.chat is not None:
        return inbound.chat.model_dump(exclude_none=True)
    return None


def turn_usage(engine: Session) -> tuple[int, int]:
    """Input and output tokens of every model call journaled for the current turn.

    Read from the transcript (which a restore brings back), so the rounds run before a
    crash are counted too, not only those of the resumed run (SM-15). Read from the tail
    back to the newest item of another turn: turns run one after another and an entry is
    tied only to the pending turn, so every item of this turn comes after the last item
    of the one before (items of no turn may sit between); a turn costs its own length,
    not the conversation's.
    """
    turn_id = engine.turn_id
    if turn_id is None:
        return 0, 0
    tokens_in = tokens_out = 0
    for item in reversed(engine.transcript):
        item_turn = item.get("turn_id")
        if item_turn != turn_id:
            if item_turn is not None:
                break
            continue
        usage = (item.get("payload") or {}).get("usage") or {}
        tokens_in += int(usage.get("input_tokens") or 0)
        tokens_out += int(usage.get("output_tokens") or 0)
    return tokens_in, tokens_out
