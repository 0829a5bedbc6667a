"""Clearing a session's history: its journal rows and its checkpoints, with its actor held (SM-21, SM-23)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from nats.js import JetStreamContext

from consumers.actors import ActorRegistry
from consumers.session_opener import SessionOpener
from schemas.subjects import Subjects

log = logging.getLogger(__name__)

# Checkpoint purges of a deleted subtree's chunk in flight at once (each a JetStream API request).
PURGES_IN_FLIGHT = 16


class DeletionBook(Protocol):
    """What clearing needs from the session manager: is the id being deleted, and its generation."""

    def is_deleting(self, session_id: str) -> bool: ...

    def generation_of(self, session_id: str) -> int: ...


class SessionHistory:
    """Clears one session's journal and checkpoints once its running turn is stopped."""

    def __init__(
        self, actors: ActorRegistry, opener: SessionOpener, js: JetStreamContext, subjects: Subjects,
        book: DeletionBook,
    ) -> None:
        self._actors = actors
        self._opener = opener
        self._js = js
        self._subjects = subjects
        self._book = book

    async def clear(self, session_id: str) -> bool:
        """Stop the session's running turn, clear its journal and purge its checkpoints.

        The turn is stopped (awaited, bounded by ``ActorRegistry.stop_wait_s``) and its loaded
        state forgotten first, and the session's actor starts nothing until the clear is done;
        the checkpoints go too, so the next message cannot restore the old transcript. True
        when all of it succeeded (SM-23's ``historyCleared``). Used by deletion (SM-21) and
        ``memory.clear``.
        """
        try:
            # SM-21: the running item is stopped and awaited, and the session held, until the clear is done.
            async with self._actors.stopped(session_id):
                # A deletion has bumped the generation already: its older generations go. memory.clear
                # keeps the generation: all of the history goes.
                deleting = self._book.is_deleting(session_id)
                keep_from = self._book.generation_of(session_id) if deleting else None
                await self._opener.clear(session_id, before_generation=keep_from)
                await self._js.purge_stream(
                    self._subjects.checkpoint_stream, subject=self._subjects.checkpoint(session_id)
                )
        except Exception as exc:
            log.warning("clearing the history of %s failed: %r", session_id, exc)
            return False
        return True

    async def clear_deleted(self, session_ids: Sequence[str]) -> None:
        """SM-21: after their session.deleted, deleted sessions' history and checkpoints go.

        A chunk of a deleted subtree at once: every session's running turn stopped and all of them
        held, the older generations' journal rows deleted in one transaction, the checkpoint
        subjects purged with ``PURGES_IN_FLIGHT`` requests at a time. A failure is logged; the
        journal rows left are removed by the start-up sweep (``clear_stale``).
        """
        try:
            async with contextlib.AsyncExitStack() as held:
                for session_id in session_ids:
                    await held.enter_async_context(self._actors.stopped(session_id))
                generations = [(sid, self._book.generation_of(sid)) for sid in session_ids]
                await self._opener.clear_older(generations)
                window = asyncio.Semaphore(PURGES_IN_FLIGHT)
                await asyncio.gather(*(self._purge(sid, window) for sid in session_ids))
        except Exception as exc:
            log.warning("clearing the history of %d deleted sessions failed: %r", len(session_ids), exc)

    async def _purge(self, session_id: str, window: asyncio.Semaphore) -> None:
        async with window:
            try:
                await self._js.purge_stream(
                    self._subjects.checkpoint_stream, subject=self._subjects.checkpoint(session_id)
                )
            except Exception as exc:
                log.warning("purging the checkpoints of deleted session %s failed: %r", session_id, exc)
