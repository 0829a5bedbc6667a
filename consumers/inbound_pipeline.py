"""After the fetch: record → stage → ack → hand off, each message as soon as it can go.

Every admitted message is recorded on its own (``record_inbound``, SM-17) and its
generation is read the moment that recording finishes (SM-22), never later. A session's
messages wait in its lane in stream order; the stager takes from every lane the leading
messages whose recording is done, stages them in one transaction (concurrent writes are
group-committed further by ``core/store/committer.py``), acks them only then (MQ-8), and
hands the new ones to their session actors in lane order. So a recording that waits behind
a long deletion holds back its own session only, and a session's messages reach its actor
in stream order, across fetches too.

If staging fails (the store refuses writes), the same messages are retried in place with
backoff while the pipeline is degraded: the fetch loop takes no new work until a write
succeeds, so nothing staged later can overtake them. Messages waiting longer than a third
of the ack wait get in-progress heartbeats so JetStream does not redeliver them meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nats.aio.msg import Msg

from consumers.backoff import compute_backoff_s
from consumers.health import ServiceHealth
from consumers.task_stop import cancel_and_wait
from core.errors import OwnershipLost
from core.store.inbox import SqlInbox, StagedMessage
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

STAGE_RETRY_FIRST_S = 0.05
STAGE_RETRY_MAX_S = 2.0
# One failure healed by the next attempt (a dropped connection the pool replaces) is not an outage.
DEGRADED_AFTER_FAILURES = 2
# A message admitted with at most this many in flight (itself included) has its session's restore read
# started at once (``Prefetch``): live traffic; a backlog's messages wait for staging and admission anyway.
PREFETCH_IN_FLIGHT_AT_MOST = 4


class InboundRecorder(Protocol):
    """What the pipeline needs from the session manager."""

    async def record_inbound(self, message: InboundMessage) -> None: ...

    def generation_of(self, session_id: str) -> int: ...


Handoff = Callable[[StagedMessage, InboundMessage], Awaitable[None]]
Prefetch = Callable[[str], None]  # a message of this session was admitted (consumers/checkpoint_prefetch.py)


@dataclass(eq=False)
class InFlight:
    """One fetched, valid message that is not yet staged, acked and handed off."""

    msg: Msg
    inbound: InboundMessage
    touched_at: float  # monotonic: admitted, or last in-progress heartbeat
    generation: int | None = None  # set when its own recording finished

    @property
    def lane(self) -> str:
        return self.inbound.session_id or ""

    def staged(self) -> StagedMessage:
        assert self.generation is not None
        inb = self.inbound
        return StagedMessage(inb.platform, inb.id, inb.session_id, self.generation, self.msg.data)


class InboundPipeline:
    """Per-message recording, per-session lanes, one stager; at most ``max_in_flight`` messages held."""

    def __init__(
        self,
        recorder: InboundRecorder,
        inbox: SqlInbox,
        handoff: Handoff,
        health: ServiceHealth,
        *,
        max_in_flight: int,
        heartbeat_s: float,
        fence: Callable[[], bool] | None = None,
        prefetch: Prefetch | None = None,
    ) -> None:
        self._fence = fence  # False: this process lost the messages' partition; stage nothing more
        self._prefetch = prefetch
        self._recorder = recorder
        self._inbox = inbox
        self._handoff = handoff
        self.health = health
        self._max_in_flight = max_in_flight
        self._heartbeat_s = heartbeat_s
        self._lanes: dict[str, deque[InFlight]] = {}
        self._ready: set[str] = set()  # lanes whose head may have finished recording
        self._unacked: dict[InFlight, None] = {}
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # room freed, or health changed
        self._recordings: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    @property
    def in_flight(self) -> int:
        return len(self._unacked)

    def room(self) -> int:
        """How many messages the fetch loop may take now (0 while degraded or full)."""
        if self.health.degraded:
            return 0
        return max(self._max_in_flight - len(self._unacked), 0)

    async def wait_for_room(self, timeout_s: float) -> None:
        """Return when there may be room, or after ``timeout_s``."""
        self._changed.clear()
        if self.room():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):  # not wait_for: it can lose a cancel (task_stop.py)
                await self._changed.wait()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._stage_loop(), name="inbound-stager"),
            asyncio.create_task(self._heartbeat_loop(), name="inbound-heartbeat"),
        ]

    def admit(self, msg: Msg, inbound: InboundMessage) -> None:
        """Take a valid message: it joins its session's lane and its recording starts now."""
        entry = InFlight(msg, inbound, time.monotonic())
        self._lanes.setdefault(entry.lane, deque()).append(entry)
        self._unacked[entry] = None
        if self._prefetch is not None and entry.lane and len(self._unacked) <= PREFETCH_IN_FLIGHT_AT_MOST:
            self._prefetch(entry.lane)  # its restore's read overlaps recording and staging
        task = asyncio.create_task(self._record(entry))
        self._recordings.add(task)
        task.add_done_callback(self._recordings.discard)

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted message is staged, acked and handed off; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._changed.clear()
            remaining_s = deadline - time.monotonic()
            if not self._unacked or remaining_s <= 0:
                return not self._unacked
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining_s):  # not wait_for: it can lose a cancel (task_stop.py)
                    await self._changed.wait()

    async def close(self, drain_timeout_s: float) -> None:
        """Finish what is in flight within the timeout; the rest stays unacked and is redelivered."""
        if not await self.drain(drain_timeout_s):
            log.warning("stopping with %d inbound messages unacked; JetStream redelivers them", len(self._unacked))
        self._closing = True
        # Cancelled again while running on: a cancel lost in a driver's wait (task_stop.py) left the
        # stager waiting for new work, and this close waiting for it, for ever.
        await asyncio.gather(*(cancel_and_wait(task) for task in [*self._recordings, *self._tasks]))

    # -- recording -----------------------------------------------------------------

    async def _record(self, entry: InFlight) -> None:
        sid = entry.inbound.session_id
        try:
            # SM-17 / MQ-1: awaited before the hand-off; concurrent calls for one session
            # share one recording inside the manager.
            await self._recorder.record_inbound(entry.inbound)
        except Exception as exc:  # record_inbound never raises; if it did, the message still goes on
            log.warning("recording inbound %s failed: %r", entry.inbound.id, exc)
        # SM-22: the generation in force when THIS message's recording finished (no await since).
        entry.generation = self._recorder.generation_of(sid) if sid else 0
        self._ready.add(entry.lane)
        self._wake.set()

    # -- staging ---------------------------------------------------------------------

    def _take_ready(self) -> list[InFlight]:
        """From every lane with news, its leading recorded messages (stream order within a lane)."""
        batch: list[InFlight] = []
        for lane in self._ready:
            queue = self._lanes.get(lane)
            while queue and queue[0].generation is not None:
                batch.append(queue.popleft())
            if queue is not None and not queue:
                del self._lanes[lane]
        self._ready.clear()
        return batch

    async def _stage_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = self._take_ready()
            if not batch:
                continue
            try:
                await self._stage(batch)
            except OwnershipLost as exc:  # the SQL fence refused: nothing staged, the new owner gets them
                log.warning("%d inbound messages not staged (%s); JetStream redelivers them", len(batch), exc)
                await asyncio.gather(*(_quietly(e.msg.nak()) for e in batch))
                self._settled(batch)
            except Exception:
                if self._closing:
                    return
                log.exception("inbound hand-off of %d messages failed; JetStream redelivers them", len(batch))
                await asyncio.gather(*(_quietly(e.msg.nak()) for e in batch))
                self._settled(batch)

    async def _stage(self, batch: list[InFlight]) -> None:
        if self._fence is not None and not self._fence():
            # Another process owns these sessions now: what it will replay from the inbox is fixed,
            # so nothing is staged behind its back; JetStream redelivers the messages to it.
            await asyncio.gather(*(_quietly(e.msg.nak()) for e in batch))
            self._settled(batch)
            return
        staged = [e.staged() for e in batch]
        fresh = await self._stage_in_place(staged, batch)
        # MQ-8: ack only once durably staged. One after another, in stream order: an ack is written to
        # the connection's buffer without waiting, so a gather's task per message bought nothing.
        for entry in batch:
            await _quietly(entry.msg.ack())
        self._settled(batch)
        for entry, item, is_new in zip(batch, staged, fresh, strict=False):
            if is_new:
                try:
                    await self._handoff(item, entry.inbound)
                except Exception:  # staged: the inbox hands it back at the next start
                    log.exception("handing inbound %s to its actor failed", item.message_id)

    async def _stage_in_place(self, staged: list[StagedMessage], batch: list[InFlight]) -> list[bool]:
        """Stage, retrying the same messages with backoff while the store refuses (degraded).

        A plain loop, not a retry library: its per-call state is cyclic garbage, which the served
        process's young collections (``tune_gc``) then walk and free while the loop waits.
        """
        failures = 0
        while True:
            try:
                fresh = await self._inbox.stage(staged)
                break
            except OwnershipLost:
                raise
            except Exception as exc:
                failures += 1
                if failures >= DEGRADED_AFTER_FAILURES:
                    await self.health.failing(exc, waiting=len(self._unacked))
                    self._changed.set()
                else:
                    log.info("staging %d inbound messages failed (%r); retrying in place", len(staged), exc)
                if self._closing:
                    raise
            await asyncio.sleep(compute_backoff_s(failures, base_s=STAGE_RETRY_FIRST_S, max_s=STAGE_RETRY_MAX_S))
        if self.health.degraded:
            await self.health.working()
            self._changed.set()
        return fresh

    def _settled(self, batch: list[InFlight]) -> None:
        for entry in batch:
            self._unacked.pop(entry, None)
        self._changed.set()

    # -- heartbeats --------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            now = time.monotonic()
            # Half a period of slack: a beat is never skipped for arriving a hair early.
            due = [e for e in self._unacked if now - e.touched_at >= self._heartbeat_s / 2]
            for entry in due:
                entry.touched_at = now
            await asyncio.gather(*(_quietly(e.msg.in_progress()) for e in due))


async def _quietly(aw: Awaitable[object]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("ack/nak/in-progress failed: %r", exc)
