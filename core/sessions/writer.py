"""The one write path of the session manager: serialised, repository first, then table, then events.

Every mutation runs inside ``mutation()`` (one writer at a time). ``apply``
writes a ``StoreChange`` through the repository and only then installs it in
the table, so a refused or failed write leaves nothing half-done. Events are
emitted in order after the writer lock is released, so a sink may call back
into the manager. Deletion marks live here too: they make new inbound wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from core.sessions.ports import EventSink, SessionEventType, SessionRepository, StoreChange
from core.sessions.record_json import record_to_json
from core.sessions.records import JsonObject, SessionRecord
from core.sessions.table import SessionTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingEvent:
    """An event to emit for ``session_id`` once its change is installed; ``extra`` joins the payload."""

    session_id: str
    event_type: SessionEventType
    extra: JsonObject = field(default_factory=dict)


def event_payload(record: SessionRecord, extra: JsonObject | None = None) -> JsonObject:
    """The payload of a session event: the record under ``session`` plus ``extra``."""
    payload: JsonObject = {"session": record_to_json(record)}
    if extra:
        payload.update(extra)
    return payload


# At most this many records are written in one round (one store change).
MAX_ROUND = 256


@dataclass
class _Behind:
    """A record queued to be written behind, its waiters' future, whether it may wait for company,
    and the ``session.updated`` changes to announce once it landed."""

    record: SessionRecord
    done: asyncio.Future[None]
    lazy: bool
    whys: list[str] = field(default_factory=list)


class SessionWriter:
    """Serialises writes, keeps repository and table in step, and emits session events."""

    def __init__(
        self,
        table: SessionTable,
        repository: SessionRepository,
        events: EventSink,
        clock: Callable[[], float],
    ) -> None:
        self.table = table
        self._repository = repository
        self._events = events
        self._clock = clock
        self._lock = asyncio.Lock()
        self._outbox: list[tuple[str, SessionEventType, JsonObject]] = []
        self._deleting: dict[str, asyncio.Event] = {}
        # Written behind (``apply_behind``): per session, the record queued (with its waiters' future,
        # whether the write may wait for company, and the ``session.updated`` changes to announce);
        # the round of records being written now; the one task writing rounds; a future that
        # settles when the round being written ends (``settle_behind`` waits on it).
        self._queued: dict[str, _Behind] = {}
        self._writing: dict[str, _Behind] = {}
        self._writing_lazy = False
        self._rounds: asyncio.Task[None] | None = None
        self._round_over: asyncio.Future[None] | None = None

    def now(self) -> float:
        """The service clock, epoch seconds."""
        return self._clock()

    @asynccontextmanager
    async def mutation(self) -> AsyncIterator[None]:
        """Hold the writer lock for one operation; emit its events after releasing it."""
        ready: list[tuple[str, SessionEventType, JsonObject]] = []
        try:
            async with self._lock:
                try:
                    yield
                finally:
                    ready, self._outbox = self._outbox, []
        finally:
            for session_id, event_type, payload in ready:
                await self.emit(session_id, event_type, payload)

    async def apply(self, change: StoreChange, events: Iterable[PendingEvent] = ()) -> None:
        """Write ``change``, install it, and queue ``events`` with the records as they now are."""
        if not self._lock.locked():
            raise RuntimeError("SessionWriter.apply outside mutation()")
        if not change.is_empty():
            # Bookkeeping writes of these records, started earlier, land first (a deletion is never
            # overtaken by an older update); writes of unrelated records need not wait.
            await self.settle_behind({r.id for r in change.sessions} | set(change.deleted_sessions))
            await self._repository.apply(change)
        self.table.install(change)
        for pending in events:
            record = self.table.get(pending.session_id)
            if record is not None:
                self._outbox.append((pending.session_id, pending.event_type, event_payload(record, pending.extra)))

    def apply_behind(self, record: SessionRecord, *, lazy: bool = False) -> asyncio.Future[None]:
        """Install one record now and write it without holding the writer lock across the I/O.

        For turn bookkeeping and new roots, which change a single record: the writes of every
        session queued at once go out together. One task (``_write_rounds``) writes rounds: it
        takes every queued record and writes them as ONE store change (one group-commit
        operation, one ``executemany`` per statement), then announces each and settles its
        waiters; records queued meanwhile make the next round. A session's record queued while
        another of its records waits replaces it (it is the full, newer record, so the older one
        need not be written), and every caller whose record was written or replaced shares the
        returned future, which settles when the write carrying its change landed (or failed). A
        session is in at most one round at a time, so its writes land in order; every structural
        ``apply`` first waits until its records' queued writes landed, so a deletion can never be
        overtaken by an older update.

        ``lazy`` (turn bookkeeping): the write may wait briefly to share the store's next
        transaction (``SessionRepository.apply(..., lazy=True)``); a round holding any record
        queued by a caller that is not lazy (a creation awaiting its write) is eager, and such a
        record queued while a lazy round waits for company hurries it.
        """
        if not self._lock.locked():
            raise RuntimeError("SessionWriter.apply_behind outside mutation()")
        return self._put_behind(record, lazy, None)

    def _put_behind(self, record: SessionRecord, lazy: bool, why: str | None) -> asyncio.Future[None]:
        """``apply_behind`` without the lock check; ``why``: announce the change with ``session.updated``
        once the write carrying it landed (or failed: the record stands in the table either way)."""
        held = self.table.put(record)
        session_id = held.id
        queued = self._queued.get(session_id)
        if queued is None:
            queued = self._queued[session_id] = _Behind(held, asyncio.get_running_loop().create_future(), lazy)
        else:
            queued.record = held
            queued.lazy = queued.lazy and lazy
        if why is not None:
            queued.whys.append(why)
        if self._rounds is None:
            self._round_over = asyncio.get_running_loop().create_future()
            self._rounds = asyncio.ensure_future(self._write_rounds())
        elif not lazy and self._writing_lazy:
            self._repository.hurry()  # the round being written waits for company: not behind it
        return queued.done

    def change_behind(
        self, session_id: str, change: Callable[[SessionRecord], SessionRecord], why: str, *, lazy: bool = False
    ) -> asyncio.Future[None] | None:
        """``apply_behind`` the changed held record and announce it (``session.updated`` with ``change``
        = ``why``, the record as it is once the write landed); None when the record is not held.

        The returned future settles after the write and the event (a failed write: its exception,
        already logged; the next write of the session carries the record). The turn bookkeeping's
        step is synchronous and queues no events, so while no mutation holds the writer lock (the
        usual case) it runs now, with no task of its own; otherwise a task waits for the lock.
        """
        if not self._lock.locked():
            record = self.table.get(session_id)
            if record is None:
                return None
            return self._put_behind(change(record), lazy, why)
        return asyncio.ensure_future(self._change_behind_locked(session_id, change, why, lazy))

    async def _change_behind_locked(
        self, session_id: str, change: Callable[[SessionRecord], SessionRecord], why: str, lazy: bool
    ) -> None:
        async with self._lock:
            record = self.table.get(session_id)
            if record is None:
                return
            written = self._put_behind(change(record), lazy, why)
        await asyncio.shield(written)  # shared with other callers: a cancelled waiter leaves it be

    async def _write_rounds(self) -> None:
        """The write-behind task: write rounds of queued records until none is left."""
        try:
            while self._queued:
                if len(self._queued) <= MAX_ROUND:
                    self._writing, self._queued = self._queued, {}
                else:
                    self._writing = {sid: self._queued.pop(sid) for sid in list(self._queued)[:MAX_ROUND]}
                self._writing_lazy = all(b.lazy for b in self._writing.values())
                failures = await self._write_round(self._writing, self._writing_lazy)
                self._writing_lazy = False
                # Announced before the round is over: a deletion waiting for it follows its events.
                for session_id, behind in self._writing.items():
                    for why in behind.whys:
                        current = self.table.get(session_id)
                        if current is not None:
                            await self.emit(session_id, "session.updated", event_payload(current, {"change": why}))
                    failure = failures.get(session_id)
                    if behind.done.done():
                        continue
                    if failure is not None:
                        behind.done.set_exception(failure)
                        behind.done.exception()  # logged: not an "exception never retrieved"
                    else:
                        behind.done.set_result(None)
                self._writing = {}
                self._next_round()
        finally:
            self._rounds = None
            # Only on cancellation can anything be left unsettled: release its waiters.
            for behind in (*self._writing.values(), *self._queued.values()):
                if not behind.done.done():
                    behind.done.cancel()
            self._writing, self._queued = {}, {}
            self._next_round()
            self._round_over = None

    async def _write_round(self, round_: dict[str, _Behind], lazy: bool) -> dict[str, Exception]:
        """Write one round's records in one store change; if that fails, each alone. Returns the failures."""
        records = tuple(b.record for b in round_.values())
        try:
            await self._repository.apply(StoreChange(sessions=records), lazy=lazy)
            return {}
        except Exception as exc:
            if len(records) == 1:
                log.warning("writing session %s failed: %r", records[0].id, exc)
                return {records[0].id: exc}
        failures: dict[str, Exception] = {}
        for record in records:  # one bad record does not fail its neighbours
            try:
                await self._repository.apply(StoreChange(sessions=(record,)))
            except Exception as exc:
                # The next write of the session carries the full record anyway.
                log.warning("writing session %s failed: %r", record.id, exc)
                failures[record.id] = exc
        return failures

    def _next_round(self) -> None:
        """The round being written is over: wake ``settle_behind``'s waiters."""
        over = self._round_over
        if over is not None and not over.done():
            over.set_result(None)
        if self._rounds is not None:
            self._round_over = asyncio.get_running_loop().create_future()

    async def settle_behind(self, session_ids: set[str] | None = None) -> None:
        """Wait until the writes started by ``apply_behind`` (of ``session_ids``, default all) landed."""
        while True:
            pending = [
                b for sid, b in (*self._writing.items(), *self._queued.items())
                if session_ids is None or sid in session_ids
            ]
            if not pending or self._round_over is None:
                return
            # Someone waits for these: none of them waits for company any more.
            for behind in pending:
                behind.lazy = False
            self._repository.hurry()
            await asyncio.shield(self._round_over)

    def queue(self, session_id: str, event_type: SessionEventType, payload: JsonObject) -> None:
        """Queue an event whose payload is already built (e.g. of a record just removed)."""
        self._outbox.append((session_id, event_type, payload))

    async def emit(self, session_id: str, event_type: SessionEventType, payload: JsonObject) -> None:
        """Emit one event now; a sink failure is logged (the state change already stands)."""
        try:
            await self._events.emit(session_id, event_type, payload)
        except Exception:
            log.exception("emitting %s for session %s failed", event_type, session_id)

    async def emit_all(self, events: Sequence[tuple[str, SessionEventType, JsonObject]]) -> None:
        """Emit events in this order, their acks awaited together; a sink failure is logged."""
        try:
            await self._events.emit_all(events)
        except Exception:
            log.exception("emitting %d session events failed", len(events))

    async def stored_so_far(self) -> None:
        """Wait until everything published before now is stored; a sink failure is logged."""
        try:
            await self._events.stored_so_far()
        except Exception:
            log.exception("waiting for earlier publishes to be stored failed")

    # -- deletion marks (SM-17, SM-22) ---------------------------------------

    def mark_deleting(self, session_ids: Sequence[str]) -> asyncio.Event:
        """Make inbound for ``session_ids`` wait until the returned event is set."""
        done = asyncio.Event()
        for session_id in session_ids:
            self._deleting[session_id] = done
        return done

    def unmark_deleting(self, session_ids: Sequence[str], done: asyncio.Event) -> None:
        """End a deletion: release every waiter."""
        for session_id in session_ids:
            if self._deleting.get(session_id) is done:
                del self._deleting[session_id]
        done.set()

    def is_deleting(self, session_id: str) -> bool:
        """Is a deletion of ``session_id`` in progress?"""
        return session_id in self._deleting

    async def wait_for_deletion(self, session_id: str) -> None:
        """Return once no deletion of ``session_id`` is in progress."""
        while (done := self._deleting.get(session_id)) is not None:
            await done.wait()
