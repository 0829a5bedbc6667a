"""The durable inbox port (MQ-8): inbound messages staged before they are acknowledged.

``core.store.inbox.SqlInbox`` is the adapter. The shell stages a fetched batch, acks it,
hands each message to its session actor, and marks it ``done`` or ``dropped`` when its
turn is over; after a restart ``pending()`` returns what was staged and not finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

STAGED: Final = "staged"
DONE: Final = "done"
DROPPED: Final = "dropped"


@dataclass(frozen=True)
class StagedMessage:
    """One inbound message as staged: raw validated payload plus the generation it belongs to."""

    platform: str
    message_id: str
    session_id: str | None
    generation: int
    payload: bytes

    @property
    def key(self) -> tuple[str, str]:
        """What staging is idempotent on: (platform, message id)."""
        return (self.platform, self.message_id)


class Inbox(Protocol):
    """Where inbound messages wait, durably, until their turn is finished."""

    def start(self, retention_s: float | None = None) -> None:
        """Start the background work (status marks; pruning finished rows older than ``retention_s``)."""
        ...

    async def stage(self, messages: Sequence[StagedMessage]) -> list[bool]:
        """Stage a batch atomically; True for each message that was not staged before."""
        ...

    async def pending(self) -> list[StagedMessage]:
        """Every staged, unfinished message in staging order."""
        ...

    async def status_of(self, platform: str, message_id: str) -> str | None:
        """``staged``, ``done``, ``dropped``, or None for a message the inbox does not hold."""
        ...

    def mark(self, message: StagedMessage, status: str) -> None:
        """Record that a message finished (``done``) or was dropped; written soon after."""
        ...

    async def flush(self) -> None:
        """Write the queued status marks now."""
        ...

    async def forget_finished(self, older_than_s: float) -> int:
        """Delete messages finished more than ``older_than_s`` ago; staged ones always stay."""
        ...

    async def close(self) -> None:
        """Stop the background work and write what is queued."""
        ...


__all__ = ["DONE", "DROPPED", "STAGED", "Inbox", "StagedMessage"]
