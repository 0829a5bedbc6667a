"""record_inbound: filing new IM rooms and backfilling origins from native inbound (SM-3, SM-12, SM-17)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from core.sessions.incoming_message import IncomingMessage
from core.sessions.places import window_place
from core.sessions.platforms import AdapterInstance, PlatformRegistry
from core.sessions.ports import StoreChange
from core.sessions.records import OriginChat, PlaceRecord, SessionRecord
from core.sessions.rules import IsOwner, is_unfiled, place_of
from core.sessions.writer import PendingEvent, SessionWriter

log = logging.getLogger(__name__)


def origin_chat_from(message: IncomingMessage, registry: PlatformRegistry) -> OriginChat | None:
    """The origin chat to record for ``message``, scoped as its platform declares; None without a chat."""
    chat = message.chat
    if chat is None:
        return None
    multi_party = registry.resolve_multi_party(message.platform, chat)
    return OriginChat(chat.type, multi_party, chat.target_id, message.self_id or None, chat.name or None)


def window_name(message: IncomingMessage) -> str | None:
    """A window's display name: the group's name, or the peer's for one-to-one chats."""
    chat = message.chat
    if chat is None:
        return None
    if chat.name:
        return chat.name
    if not chat.multi_party and message.sender is not None:
        return message.sender.name or None
    return None


class InboundRecorder:
    """Files and backfills sessions from native inbound; one recording in flight per session."""

    def __init__(self, writer: SessionWriter, registry: PlatformRegistry, is_owner: IsOwner | None) -> None:
        self._writer = writer
        self._table = writer.table
        self._registry = registry
        self._is_owner = is_owner
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def record(self, message: IncomingMessage) -> None:
        """SM-17: wait out a deletion, then file/backfill; failures are logged, never raised."""
        try:
            await self._record(message)
        except Exception as exc:
            log.warning("recording inbound %s for session %s failed: %s", message.id, message.session_id, exc)

    async def drain(self) -> None:
        """Wait for every background name refresh and in-flight recording to finish."""
        while self._background or self._in_flight:
            await asyncio.gather(*self._background, *self._in_flight.values(), return_exceptions=True)

    async def _record(self, message: IncomingMessage) -> None:
        session_id = message.session_id
        if session_id:
            await self._writer.wait_for_deletion(session_id)
        if message.source is not None or not session_id:
            return
        if message.chat is not None:
            self._registry.note_message_declaration(message.platform, message.chat)
        record = self._table.raw(session_id)
        if record is not None and record.parent_id is not None:
            return  # children are not recorded
        if record is not None and record.origin_platform and record.origin_instance is not None:
            self._spawn(self._refresh_names(session_id, message))
            return
        if record is not None and not record.origin_platform and not is_unfiled(record):
            return  # WebUI, CLI and project roots have no IM origin to record
        if message.chat is None and (record is None or is_unfiled(record)):
            return  # nothing to file or backfill without a chat scope (SM-3); skip the writer lock
        task = self._in_flight.get(session_id)
        if task is None:
            task = asyncio.create_task(self._file_or_backfill(session_id, message))
            self._in_flight[session_id] = task
            task.add_done_callback(lambda done: self._forget(session_id, done))
        await asyncio.shield(task)

    def _forget(self, session_id: str, task: asyncio.Task[None]) -> None:
        if self._in_flight.get(session_id) is task:
            del self._in_flight[session_id]
        if not task.cancelled():
            task.exception()  # mark it retrieved: the awaiting callers log it themselves

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("refreshing display names failed: %s", exc)

    def _claimants(self, session_id: str, message: IncomingMessage) -> list[AdapterInstance]:
        return self._registry.claimants_of(session_id, platform=message.platform, instance=message.instance)

    async def _file_or_backfill(self, session_id: str, message: IncomingMessage) -> None:
        async with self._writer.mutation():
            record = self._table.raw(session_id)
            if record is not None and record.parent_id is not None:
                return
            if record is None or is_unfiled(record):
                await self._file_origin(session_id, record, message)
            elif record.origin_platform and record.origin_instance is None:
                await self._resolve_instance(record, message)
        if record is not None and record.origin_platform:
            await self._refresh_names(session_id, message)

    async def _file_origin(self, session_id: str, record: SessionRecord | None, message: IncomingMessage) -> None:
        """SM-3: file a new room or backfill an unfiled root from this native inbound."""
        origin_chat = origin_chat_from(message, self._registry)
        if origin_chat is None:
            log.debug("inbound %s has no chat scope; session %s not filed", message.id, session_id)
            return
        claimants = self._claimants(session_id, message)
        platforms = {c.platform for c in claimants}
        if len(platforms) > 1:
            log.info("session %s is claimed by several platforms; its window cannot be told", session_id)
            return
        if platforms and platforms != {message.platform}:
            log.info("session %s is claimed by another platform than %s", session_id, message.platform)
            return
        if record is not None and not claimants:
            return  # an unfiled root is backfilled only by a platform that claims it
        now = self._writer.now()
        instance = claimants[0].instance_id if claimants else None
        if record is None:
            filed = SessionRecord(id=session_id, created_at=now, updated_at=now)
            event = PendingEvent(session_id, "session.created")
        else:
            filed = replace(record, updated_at=now)
            event = PendingEvent(session_id, "session.updated", {"change": "origin_backfilled"})
        filed = replace(
            filed, origin_platform=message.platform, origin_chat=origin_chat, origin_instance=instance
        )
        places = self._window_for(filed, message, now, filed_now=True)
        await self._writer.apply(StoreChange(sessions=(filed,), places=places), [event])

    async def _resolve_instance(self, record: SessionRecord, message: IncomingMessage) -> None:
        """SM-12: a filed room without an origin instance takes its first claimant now."""
        if message.platform != record.origin_platform:
            return
        claimants = [c for c in self._claimants(record.id, message) if c.platform == record.origin_platform]
        if not claimants:
            return
        updated = replace(record, origin_instance=claimants[0].instance_id, updated_at=self._writer.now())
        event = PendingEvent(record.id, "session.updated", {"change": "origin_instance_backfilled"})
        await self._writer.apply(StoreChange(sessions=(updated,)), [event])

    def _window_for(
        self, root: SessionRecord, message: IncomingMessage, now: float, *, filed_now: bool
    ) -> tuple[PlaceRecord, ...]:
        """The window record to create (on filing) or rename (on later inbound); owner DMs have none."""
        place = place_of(root.id, lambda i: root if i == root.id else self._table.raw(i), self._is_owner, ())
        if place.kind != "window":
            return ()
        existing = self._table.place(place.key)
        name = window_name(message)
        if existing is not None and not filed_now and not name:
            return ()
        written = window_place(place.key, name, existing, now)
        return (written,) if written is not None else ()

    async def _refresh_names(self, session_id: str, message: IncomingMessage) -> None:
        """Rename the room's window from a later inbound of its origin platform (not awaited by callers)."""
        root = self._table.raw(session_id)
        if root is None or root.parent_id is not None or message.platform != root.origin_platform:
            return
        if not window_name(message):
            return
        async with self._writer.mutation():
            root = self._table.raw(session_id)
            if root is None or root.origin_platform != message.platform:
                return
            places = self._window_for(root, message, self._writer.now(), filed_now=False)
            if places:
                await self._writer.apply(StoreChange(places=places))
