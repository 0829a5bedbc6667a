"""The composition root: every part of a running turnstile is built here, once, from the settings.

``bootstrap`` takes the settings and the open connections (broker, database) and returns a
``Runtime``: an immutable bundle of fully built parts. Nothing in it starts as ``None`` to be
filled later and no policy is patched in after construction. Tests pass ``Replacements`` (a
session repository, journal or provider wrapping or replacing the real one, a clock).
Connecting and taking ownership stay in ``TurnstileService.start``; ``Runtime.start`` only
starts the built parts, in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import orjson
from faststream.nats import NatsBroker
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.actors import ActorRegistry
from consumers.api import build_router
from consumers.catalog import control_operations
from consumers.checkpoint_prefetch import CheckpointPrefetch
from consumers.control_parts import ControlParts
from consumers.control_routing import ControlRouter
from consumers.heap_trim import HeapTrim
from consumers.history import SessionHistory
from consumers.inbound_loop import InboundLoop
from consumers.inflight import recover_inflight
from consumers.manager_adapters import ManagerRecorder, ManagerTakePolicy, build_manager
from consumers.max_deliveries import watch_max_deliveries
from consumers.mcp_tools import McpToolServers, parse_mcp_servers
from consumers.metrics import Metrics
from consumers.partitioned import PartitionedInbound
from consumers.publisher import Publisher
from consumers.retry_policy import TurnRetryPolicy
from consumers.session_opener import SessionOpener, build_provider
from consumers.settings import Settings, service_time_zone
from consumers.shared_state import SharedState, new_origin
from consumers.tool_plugins import load_tools
from consumers.turn_runner import TurnRunner
from core.engine import builtin_registry
from core.providers.base import Provider
from core.sessions.manager import SessionManager
from core.sessions.ports import SessionRepository
from core.store.change_feed import NotifyingSessionRepository
from core.store.committer import GroupCommitter
from core.store.inbox import SqlInbox
from core.store.journal_repo import SqlHistoryJournal
from core.store.knowledge_repo import SqlKnowledgeStore
from core.store.lease_repo import SqlFileLeases
from core.store.session_repo import SqlSessionRepository
from schemas.subjects import Subjects
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

StillOwner = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class Connections:
    """What ``TurnstileService.start`` opened before anything is built."""

    broker: NatsBroker
    js: JetStreamContext
    db: AsyncEngine


@dataclass(frozen=True)
class Replacements:
    """Parts a test supplies instead of the real ones (each is given the real one, to wrap or ignore)."""

    repository: Callable[[SqlSessionRepository], SessionRepository] | None = None
    journal: Callable[[SqlHistoryJournal], SqlHistoryJournal] | None = None
    provider: Provider | None = None
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class Runtime:
    """Every built part of one turnstile process that owns the prefix."""

    settings: Settings
    subjects: Subjects
    connections: Connections
    metrics: Metrics
    publisher: Publisher
    committer: GroupCommitter
    inbox: SqlInbox
    manager: SessionManager
    opener: SessionOpener
    actors: ActorRegistry
    history: SessionHistory
    inbound: InboundLoop  # the one fetch loop (TURNSTILE_PARTITIONS = 1)
    control: ControlParts
    shared: SharedState
    # TURNSTILE_PARTITIONS > 1: one fetch loop per owned partition, requests routed to the owner
    partitioned: PartitionedInbound | None
    router: ControlRouter | None

    async def start(self, lost: asyncio.Event) -> None:
        """Start the parts in order: the store and tools, the manager, the control API, then inbound."""
        s = self.settings
        self.inbox.start(retention_s=s.inbound_max_age_s)
        await self.opener.open_tool_servers()
        self.metrics.meter_tools(self.opener.tools)
        await self.shared.listen()  # before the load: nothing another process writes meanwhile is missed
        await self.manager.start()
        await self.shared.start()
        # SM-21: history a crash left behind (between a deletion's record removal and its clear).
        stale = await self.opener.clear_stale()
        if stale:
            log.info("removed %d journal rows of deleted sessions or superseded generations", stale)
        broker = self.connections.broker
        operations = control_operations(self.control)
        if self.router is not None:
            operations = self.router.wrap(operations)
        broker.include_router(build_router(self.subjects, operations, max_request_bytes=s.max_request_bytes))
        await broker.start()
        if self.partitioned is not None and self.router is not None:
            # Partitioned: what is staged, in flight or parked is taken up partition by partition as owned.
            await self.router.serve()
            await self.partitioned.start(lost)
            return
        # Messages staged but unfinished before a stop or crash go back to their actors, in order.
        for staged in await self.inbox.pending():
            await self.actors.deliver(staged, InboundMessage.model_validate(orjson.loads(staged.payload)))
        # Fetched-but-unstaged messages of a dead owner come first, in stream order (per-session order).
        await recover_inflight(
            broker.connection, self.connections.js, self.subjects.inbound_stream, s.consumer_name,
            self.inbound.process_batch, s.fetch_batch,
        )
        self.inbound.start()
        # A message JetStream gave up redelivering (max deliveries) is served from the stream, not parked.
        await watch_max_deliveries(
            broker.connection, self.connections.js, self.subjects.inbound_stream, s.consumer_name,
            self.inbound.process_read, lost,
        )

    async def drain(self, drain_timeout_s: float) -> None:
        """Stop fetching, let running turns finish (bounded), flush the inbox, hand partitions over."""
        if self.partitioned is not None:
            await self.partitioned.stop_fetching()  # their leases are still renewed while turns drain
        if self.router is not None:
            await self.router.close()
        await self.inbound.stop()
        await self.actors.close(drain_timeout_s=drain_timeout_s)
        try:
            await self.inbox.close()
        except Exception as exc:
            log.warning("flushing the inbox: %r", exc)
        if self.partitioned is not None:
            await self.partitioned.release()  # work drained and flushed: the others take them at once

    async def close(self) -> None:
        """Close tool servers, the journal, the provider and the write committer (after ``drain``)."""
        await self.opener.close()
        await self.shared.close()
        await self.committer.aclose()

    def fence(self) -> list[asyncio.Task[None]]:
        """Ownership is lost: stage nothing more and cancel running turns now (they stay staged)."""
        self.opener.forget_all()  # another process may write any session now
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(self.inbound.stop(drain_timeout_s=0)),
            loop.create_task(self.actors.close(drain_timeout_s=0)),
        ]
        if self.partitioned is not None:
            tasks.append(loop.create_task(self.partitioned.abandon()))
        return tasks


def bootstrap(
    settings: Settings,
    connections: Connections,
    *,
    metrics: Metrics,
    still_owner: StillOwner,
    replace: Replacements | None = None,
) -> Runtime:
    """Build every part of a running turnstile over ``connections``; nothing is started or connected here."""
    s = settings
    replace = replace or Replacements()
    subjects = Subjects(s.prefix)
    tz = service_time_zone(s.time_zone)
    broker, js, db = connections.broker, connections.js, connections.db
    publisher = Publisher(
        broker.connection, js, subjects, dlq_raw_max_bytes=s.dlq_raw_max_bytes, retried=metrics.publish_retries.inc,
        direct_gets=s.stream_replicas == 1,  # replicated: a follower could answer a direct get with an older checkpoint
    )
    committer = GroupCommitter(db, sqlite_synchronous=s.sqlite_synchronous, lazy_wait_s=s.lazy_write_wait_s)
    inbox = SqlInbox(db, committer)

    # Every write of the session tree also notifies other processes sharing the database (PostgreSQL).
    origin = new_origin()
    repository: SessionRepository = NotifyingSessionRepository(db, committer, origin=origin)
    if replace.repository is not None:
        repository = replace.repository(NotifyingSessionRepository(db, committer, origin=origin))
    sql_journal = journal = SqlHistoryJournal(db, committer=committer)
    if replace.journal is not None:
        journal = replace.journal(journal)

    # The manager's deletion clears the session's history through ``history``, built below from
    # the actors, which in turn need the manager: the hook is bound here, called only after start.
    async def clear_deleted(session_ids: Sequence[str]) -> None:
        # Partitioned: a session another worker owns is cleared by that worker.
        here = [sid for sid in session_ids if router is None or await router.clear_elsewhere(sid) is None]
        await history.clear_deleted(here)

    manager = build_manager(s, repository, publisher, clear_deleted, clock=replace.clock)
    opener = SessionOpener(
        s,
        journal=journal,
        knowledge=SqlKnowledgeStore(db),
        provider=replace.provider or build_provider(s),
        tools=builtin_registry(load_tools(s)),  # custom tools: docs/agent-developers.md
        tool_servers=McpToolServers(parse_mcp_servers(s.mcp_servers_json), s.tool_timeout_s),
        leases=SqlFileLeases(db),
        take_policy=ManagerTakePolicy(manager, tz),
        generation_of=manager.generation_of,
        max_payload=lambda: broker.connection.max_payload,
    )
    turn_slots = asyncio.Semaphore(s.max_concurrent_turns)
    retry = TurnRetryPolicy(s.turn_retry_attempts, s.turn_retry_max_backoff_s)

    def runner_of(session_id: str) -> TurnRunner:
        return TurnRunner(
            session_id,
            engines=opener,
            book=manager,
            publisher=publisher,
            inbox=inbox,
            turn_slots=turn_slots,
            mid_turn_policy=s.mid_turn_policy,
            retry=retry,
            still_owner=partitioned.still_owner(session_id) if partitioned is not None else still_owner,
            metrics=metrics,
            failure_reply=s.provider_failure_reply,
            clock=replace.clock,
            prefetch=prefetch,
        )

    prefetch = CheckpointPrefetch(publisher.last_checkpoint)
    actors = ActorRegistry(
        runner_of, idle_s=s.actor_idle_s, max_loaded=s.max_loaded_sessions, max_with_work=s.max_sessions_with_work,
        heap_trim=HeapTrim(), prefetch=prefetch,
    )
    history = SessionHistory(actors, opener, js, subjects, manager)
    recorder = ManagerRecorder(manager, on_created=opener.remember_created)
    inbound = InboundLoop(
        js, s, subjects, publisher, recorder, inbox, actors.deliver_when_room, metrics=metrics, prefetch=actors.prefetch
    )
    shared = SharedState(db, manager, origin)  # registrations; other processes' writes

    def partition_loop(consumer_name: str, fence: Callable[[], bool]) -> InboundLoop:
        return InboundLoop(
            js, s, subjects, publisher, recorder, inbox, actors.deliver_when_room,
            metrics=metrics, consumer_name=consumer_name, fence=fence, prefetch=actors.prefetch,
        )

    partitioned: PartitionedInbound | None = None
    router: ControlRouter | None = None
    if s.partitions > 1:
        partitioned = PartitionedInbound(
            s, subjects, connection=broker.connection, js=js, inbox=inbox, actors=actors, manager=manager,
            metrics=metrics, make_loop=partition_loop, db=db, forget_moved=opener.forget_moved,
        )
        inbox.fence = sql_journal.fence = partitioned  # SQL writes carry the partition epoch held
        opener.fence = partitioned  # a known journal tail holds only at the epoch it was kept at
        actors.fence = partitioned  # a session in doubt serves nothing until its staged messages replay in order
        router = ControlRouter(
            partitioned, subjects=subjects, connection=broker.connection, manager=manager, actors=actors,
            clear_history=history.clear,
        )
    control = ControlParts(
        manager=manager,
        actors=actors,
        opener=opener,
        clear_history=history.clear,
        max_payload_bytes=lambda: broker.connection.max_payload,
        time_zone=tz,
        shared=shared,
        last_checkpoint=publisher.last_checkpoint,
    )
    return Runtime(
        settings=s, subjects=subjects, connections=connections, metrics=metrics, publisher=publisher,
        committer=committer, inbox=inbox, manager=manager, opener=opener, actors=actors, history=history,
        inbound=inbound, control=control, shared=shared, partitioned=partitioned, router=router,
    )
