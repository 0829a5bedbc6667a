"""Small ports the engine needs from the rest of the service."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

Clock = Callable[[], datetime]

PartialText = Callable[[int, str], Awaitable[None]]
"""Watches a turn's answer as the model writes it: (model round, text of the round so far).
Set on ``Session.partial_text`` by the shell for the turn it runs; None: nobody watches."""


def utc_now() -> datetime:
    """The default clock."""
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """RFC 3339 text of an aware datetime, microseconds kept."""
    return moment.isoformat()


@dataclass(frozen=True)
class TakeVerdict:
    """Outcome of a take check: ``ok``, or not with a ``reason`` (the model sees its source)."""

    ok: bool
    reason: str | None = None


@runtime_checkable
class TakePolicy(Protocol):
    """May ``current_id`` read ``target_id``'s history (SM-24)? Synchronous, never raises."""

    def can_take(self, current_id: str, target_id: str, principal: str | None) -> TakeVerdict:
        """Decide; the session manager implements this."""
        ...


@runtime_checkable
class HistoryReader(Protocol):
    """Reads another session's model-visible history as text (its Chatend projection)."""

    async def read_history(self, session_id: str, limit_chars: int) -> str | None:
        """The newest ``limit_chars`` characters of the session's chatend text, or None if unknown."""
        ...


class SameSessionOnly:
    """Take policy without a session manager (SM-25): only the same id is allowed."""

    def can_take(self, current_id: str, target_id: str, principal: str | None) -> TakeVerdict:
        """Allow the same id only."""
        if current_id == target_id:
            return TakeVerdict(ok=True)
        return TakeVerdict(ok=False, reason="TAKE_UNKNOWN")
