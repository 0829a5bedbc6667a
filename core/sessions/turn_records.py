"""Turn bookkeeping on a record (SM-13 … SM-16), as pure record-to-record functions."""

from __future__ import annotations

from core.errors import InvalidInput
from core.sessions.records import (
    LAST_TURN_ERROR_MAX_CHARS,
    TURN_OUTCOMES,
    LastTurn,
    SessionRecord,
    TokenUsage,
    TurnOutcome,
    evolved,
)


def checked_outcome(outcome: str | None) -> TurnOutcome:
    """A turn outcome; None (the message was blocked, no outcome) counts as ``silent`` (SM-14)."""
    if outcome is None:
        return "silent"
    for known in TURN_OUTCOMES:
        if outcome == known:
            return known
    raise InvalidInput(f"turn outcome must be one of {', '.join(TURN_OUTCOMES)}")


def turn_started(record: SessionRecord, now: float) -> SessionRecord:
    """SM-16: a turn start makes the session ``active``."""
    return evolved(record, status="active", updated_at=now)


def turn_ended(
    record: SessionRecord,
    outcome: TurnOutcome,
    error: str | None,
    ended_at: float,
    *,
    other_turns_running: bool,
) -> SessionRecord:
    """SM-13, SM-14, SM-16: write last_turn (and last_reply_at on ``replied``); close the status.

    ``error`` is kept only for outcome ``error``, cut to 200 characters, and an
    empty string counts as none. When no other turn of the session runs and it
    is still ``active``, it becomes ``error`` (outcome error) or ``completed``.
    """
    kept_error = error[:LAST_TURN_ERROR_MAX_CHARS] if outcome == "error" and error else None
    status = record.status
    if not other_turns_running and status == "active":
        status = "error" if outcome == "error" else "completed"
    # One copy for all fields: this runs at every turn end, on the hot path.
    return evolved(
        record,
        last_turn=LastTurn(outcome, ended_at, kept_error),
        updated_at=ended_at,
        last_reply_at=ended_at if outcome == "replied" else record.last_reply_at,
        status=status,
    )


def usage_added(record: SessionRecord, input_tokens: int, output_tokens: int) -> SessionRecord:
    """SM-15: add the session's own model usage; updated_at is not touched."""
    if input_tokens < 0 or output_tokens < 0:
        raise InvalidInput("token counts cannot be negative")
    tokens = record.tokens or TokenUsage()
    return evolved(record, tokens=TokenUsage(tokens.input + input_tokens, tokens.output + output_tokens))
