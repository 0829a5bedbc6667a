"""A cold session's last checkpoint, read while its message is being staged.

Restoring a session that has no actor starts with a read of its last checkpoint (a JetStream
direct get, ~0.4–0.6 ms), which used to begin only when the actor took the message, after the
inbox commit (on PostgreSQL ~1.3 ms) and the hand-off. The inbound pipeline now starts that read
when it admits a message of a session without an actor (``ActorRegistry.prefetch``), so the two
overlap, and the actor's restore (``TurnRunner.load``) takes the read's result instead of asking.

Why a prefetched checkpoint is the one the restore would have read:

- only a loaded engine publishes a session's checkpoints, and loading one takes (or discards) the
  session's prefetch first; a prefetch starts only while the session has no actor, so nothing of
  this process can publish between the read and its use;
- a deletion or ``memory.clear`` purges the checkpoints while holding the session
  (``ActorRegistry.stopped``): no prefetch starts while it is held, and any taken before is dropped
  when the hold begins and again when it ends;
- another process may publish only after taking the session's partition, which takes seconds; a
  prefetch is used only within ``MAX_AGE_S`` of its start, and a checkpoint read too early is
  refused by the fence (``Nats-Expected-Last-Subject-Sequence``) exactly as a read that lost the
  same race at load time: the runner reloads.

Only a few are kept (``MAX_KEPT``): under a backlog the pipeline does not prefetch at all, and one
never taken (its message dropped, or its session new) lapses after ``MAX_AGE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["CheckpointPrefetch", "CheckpointRead"]

CheckpointRead = tuple[int, bytes] | None  # (subject sequence, payload) of the last checkpoint, or None
MAX_AGE_S = 1.0
MAX_KEPT = 16


@dataclass(slots=True)
class _Kept:
    read: asyncio.Task[CheckpointRead]
    started_at: float  # monotonic


class CheckpointPrefetch:
    """Reads started ahead (``start``) and taken by the restore that needs them (``take``)."""

    def __init__(
        self, last_checkpoint: Callable[[str], Awaitable[CheckpointRead]], *,
        max_age_s: float = MAX_AGE_S, max_kept: int = MAX_KEPT,
    ) -> None:
        self._last_checkpoint = last_checkpoint
        self._max_age_s = max_age_s
        self._max_kept = max_kept
        self._kept: dict[str, _Kept] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def start(self, session_id: str) -> None:
        """Begin reading the session's last checkpoint, unless one is read already or too many are kept."""
        if session_id in self._kept:
            return
        if len(self._kept) >= self._max_kept:
            self._lapse()
            if len(self._kept) >= self._max_kept:
                return
        read = asyncio.ensure_future(self._last_checkpoint(session_id))
        read.add_done_callback(_retrieve)
        self._kept[session_id] = _Kept(read, time.monotonic())

    def take(self, session_id: str) -> asyncio.Task[CheckpointRead] | None:
        """The session's read if one was started within ``max_age_s``; it is no longer kept."""
        kept = self._kept.pop(session_id, None)
        if kept is None:
            return None
        if time.monotonic() - kept.started_at > self._max_age_s:
            kept.read.cancel()
            return None
        return kept.read

    def discard(self, session_id: str) -> None:
        """Forget the session's read (its checkpoints may change: a hold, a new session, an unload)."""
        kept = self._kept.pop(session_id, None)
        if kept is not None:
            kept.read.cancel()

    def _lapse(self) -> None:
        now = time.monotonic()
        for session_id in [sid for sid, kept in self._kept.items() if now - kept.started_at > self._max_age_s]:
            self.discard(session_id)


async def read_checkpoint(
    taken: asyncio.Task[CheckpointRead] | None, read: Callable[[], Awaitable[CheckpointRead]]
) -> CheckpointRead:
    """A taken prefetch's result; if there is none, or it failed, a read of its own."""
    if taken is not None:
        with contextlib.suppress(Exception):
            return await taken
    return await read()


def _retrieve(read: asyncio.Future[CheckpointRead]) -> None:
    if not read.cancelled():
        read.exception()  # a failure is the restore's to retry; never "exception was never retrieved"
