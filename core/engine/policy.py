"""What to do with an inbound message that arrives while a turn of its session runs."""

from __future__ import annotations

from enum import StrEnum


class MidTurnPolicy(StrEnum):
    """Per-session policy for mid-turn inbound messages.

    ``enqueue`` (default): keep the message for the next turn.
    ``interrupt``: cancel the running operation, ``interrupt_current_turn`` (repairs
    open tool calls), then begin the new turn.
    ``reject``: drop it and publish ``message.dropped`` with reason ``busy``.
    """

    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    REJECT = "reject"


class MidTurnAction(StrEnum):
    """The worker's next step for one inbound message."""

    BEGIN = "begin"
    ENQUEUE = "enqueue"
    INTERRUPT_THEN_BEGIN = "interrupt_then_begin"
    REJECT = "reject"


REJECT_REASON = "busy"


def decide_mid_turn(policy: MidTurnPolicy | str, *, turn_running: bool, turn_pending: bool) -> MidTurnAction:
    """Pure decision: with no turn pending or running the message simply begins a turn."""
    if not turn_running and not turn_pending:
        return MidTurnAction.BEGIN
    chosen = MidTurnPolicy(policy)
    if chosen is MidTurnPolicy.INTERRUPT:
        return MidTurnAction.INTERRUPT_THEN_BEGIN
    if chosen is MidTurnPolicy.REJECT:
        return MidTurnAction.REJECT
    return MidTurnAction.ENQUEUE
