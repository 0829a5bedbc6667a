"""TurnstileService: the one place that wires everything and owns start-up and shutdown."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from faststream.nats import NatsBroker
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.actors import ActorRegistry
from consumers.api import build_router
from consumers.connect import wait_for_broker
from consumers.http_server import HttpServer
from consumers.inbound import InboundLoop
from consumers.inflight import recover_inflight
from consumers.inspector import inspector_routes
from consumers.lease import OwnershipLease
from consumers.max_deliveries import watch_max_deliveries
from consumers.metrics import Metrics
from consumers.nats_connect import broker_options, connect_options
from consumers.observability import observability_routes
from consumers.operations import control_operations
from consumers.publisher import Publisher
from consumers.retry_policy import TurnRetryPolicy
from consumers.settings import Settings, service_time_zone
from consumers.shared_state import SharedState, new_origin
from consumers.startup import EXIT_SETTINGS, StartupError, check_provider, open_database
from consumers.streams import ensure_streams
from consumers.turns import TurnRunner
from consumers.wiring import EngineSessions, ManagerRecorder, ManagerTakePolicy, build_manager
from core.errors import Unavailable
from core.store.committer import GroupCommitter
from core.store.inbox import SqlInbox
from core.store.migrate import migrate
from schemas.subjects import Subjects
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)


class TurnstileService:
    """One turnstile process: broker connection, streams, store, session manager, actors, inbound loop, API."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.subjects = Subjects(settings.prefix)
        self.broker: NatsBroker | None = None
        self.js: JetStreamContext | None = None
        self.db: AsyncEngine | None = None
        self.inbox: SqlInbox | None = None
        self.publisher: Publisher | None = None
        self.manager: Any = None
        self.shared: SharedState | None = None
        self.engines: EngineSessions | None = None
        self.actors: ActorRegistry | None = None
        self.inbound: InboundLoop | None = None
        self.lease: OwnershipLease | None = None
        self.committer: GroupCommitter | None = None
        self.lost = asyncio.Event()
        # Health, metrics and the inspector register their routes on it before start().
        self.http = HttpServer(settings.http_host, settings.http_port)
        self.http.add_routes(inspector_routes(self))
        self.metrics = Metrics()  # one registry per service: several services in one process do not collide
        self.role = "starting"  # starting → standby (waiting for the lease) → owner; fenced; stopping
        self.http.add_routes(observability_routes(self))
        self._started = False

    async def start(self, patient: bool = False) -> None:
        """Connect, wait for the ownership lease (hot standby while another process holds it), then serve.

        The broker is retried for ``connect_timeout_s`` (``BrokerUnreachable`` after that), or as
        long as it takes when ``patient`` (competing again after a lost lease).
        """
        s = self.settings
        try:
            await self.http.start()  # first: a standby answers health checks while it waits
        except Unavailable as exc:
            raise StartupError(exc.message, EXIT_SETTINGS) from None
        # Checked before any ownership is taken: a process that cannot work never holds the lease.
        await wait_for_broker(s.nats_url, None if patient else s.connect_timeout_s, connect_options(s))
        self.db = await open_database(s)
        await check_provider(s)
        self.broker = NatsBroker(
            s.nats_url, max_reconnect_attempts=-1, graceful_timeout=10.0, log_level=logging.DEBUG,
            **broker_options(s),
        )
        await self.broker.connect()
        self.js = self.broker.connection.jetstream()
        self.lease = OwnershipLease(self.js, f"{self.subjects.stream_prefix}_LEASES", s.lease_ttl_s)
        self._set_role("standby")
        await self.lease.acquire(on_lost=self._on_lease_lost)
        self._set_role("starting")
        await migrate(self.db, allow_foreign_tables=s.database_allow_foreign_tables)
        await ensure_streams(self.js, s, self.subjects)
        self.publisher = Publisher(
            self.broker.connection, self.js, self.subjects, dlq_raw_max_bytes=s.dlq_raw_max_bytes
        )
        self.committer = GroupCommitter(self.db, sqlite_synchronous=s.sqlite_synchronous)
        self.inbox = SqlInbox(self.db, self.committer)
        self.inbox.start(retention_s=s.inbound_max_age_s)
        self.engines = EngineSessions(s, self.db, self.committer)
        await self.engines.open_tool_servers()
        self.metrics.meter_tools(self.engines.tools)
        origin = new_origin()
        self.manager = build_manager(s, self.db, self.publisher, self._clear_session_data, self.committer, origin)
        self.shared = SharedState(self.db, self.manager, origin)  # registrations; other processes' writes
        await self.shared.listen()  # before the load: nothing written meanwhile by another process is missed
        await self.manager.start()
        await self.shared.start()
        self.engines.take_policy = ManagerTakePolicy(self.manager, service_time_zone(s.time_zone))
        self.engines.generation_of = self.manager.generation_of
        # SM-21: history a crash left behind (between a deletion's record removal and its clear).
        stale = await self.engines.clear_stale()
        if stale:
            log.info("removed %d journal rows of deleted sessions or superseded generations", stale)
        turn_slots = asyncio.Semaphore(s.max_concurrent_turns)
        retry = TurnRetryPolicy(s.turn_retry_attempts, s.turn_retry_max_backoff_s)
        still_owner = self.lease.still_ours
        self.actors = ActorRegistry(
            lambda sid: TurnRunner(
                sid,
                engines=self.engines,  # type: ignore[arg-type]
                book=self.manager,
                publisher=self.publisher,  # type: ignore[arg-type]
                inbox=self.inbox,  # type: ignore[arg-type]
                turn_slots=turn_slots,
                mid_turn_policy=s.mid_turn_policy,
                retry=retry,
                still_owner=still_owner,
                metrics=self.metrics,
                failure_reply=s.provider_failure_reply,
            ),
            idle_s=s.actor_idle_s,
        )
        self.broker.include_router(
            build_router(self.subjects, control_operations(self), max_request_bytes=s.max_request_bytes)
        )
        await self.broker.start()
        # Messages staged but unfinished before a stop or crash go back to their actors, in order.
        for staged in await self.inbox.pending():
            await self.actors.deliver(staged, InboundMessage.model_validate(orjson.loads(staged.payload)))
        self.inbound = InboundLoop(
            self.js,
            s,
            self.subjects,
            self.publisher,
            ManagerRecorder(self.manager, on_created=self.engines.mark_new),
            self.inbox,
            self.actors.deliver,
            metrics=self.metrics,
        )
        # Fetched-but-unstaged messages of a dead owner come first, in stream order (per-session order).
        await recover_inflight(
            self.broker.connection, self.js, self.subjects.inbound_stream, s.consumer_name,
            self.inbound.process_batch, s.fetch_batch,
        )
        self.inbound.start()
        # A message JetStream gave up redelivering (max deliveries) is served from the stream, not parked.
        await watch_max_deliveries(
            self.broker.connection, self.js, self.subjects.inbound_stream, s.consumer_name,
            self.inbound.process_batch, self.lost,
        )
        self._started = True
        self._set_role("owner")

    def _set_role(self, role: str) -> None:
        self.role = role
        self.metrics.set_ownership(role)

    def _on_lease_lost(self) -> None:
        """Another process owns the prefix now: stop fetching and running turns at once (fenced)."""
        log.warning("fenced: ownership lost, stopped fetching and cancelled running turns (they stay staged)")
        self._set_role("fenced")
        self.lost.set()
        if self.inbound is not None:
            # Stage nothing more: what is in flight is redelivered to the new owner.
            asyncio.get_running_loop().create_task(self.inbound.stop(drain_timeout_s=0))
        if self.actors is not None:
            asyncio.get_running_loop().create_task(self.actors.close(drain_timeout_s=0))

    async def clear_history(self, session_id: str) -> bool:
        """Stop the session's running turn, clear its journal and purge its checkpoints.

        The turn is stopped (awaited, bounded by ``ActorRegistry.stop_wait_s``) and its loaded
        state forgotten first, and the session's actor starts nothing until the clear is done;
        the checkpoints go too, so the next message cannot restore the old transcript. True
        when all of it succeeded (SM-23's ``historyCleared``). Used by deletion (SM-21) and
        ``memory.clear``.
        """
        try:
            if self.actors is None or self.engines is None or self.js is None:
                return False
            # SM-21: the running item is stopped and awaited, and the session held, until the clear is done.
            async with self.actors.stopped(session_id):
                # A deletion has bumped the generation already: its older generations go. memory.clear
                # keeps the generation: all of the history goes.
                deleting = self.manager.is_deleting(session_id)
                keep_from = self.manager.generation_of(session_id) if deleting else None
                await self.engines.clear(session_id, before_generation=keep_from)
                await self.js.purge_stream(
                    self.subjects.checkpoint_stream, subject=self.subjects.checkpoint(session_id)
                )
        except Exception as exc:
            log.warning("clearing the history of %s failed: %r", session_id, exc)
            return False
        return True

    async def _clear_session_data(self, session_id: str) -> None:
        """SM-21: after session.deleted, the deleted session's history and checkpoints go."""
        await self.clear_history(session_id)

    async def stop(self) -> None:
        """Stop fetching, let running turns finish (bounded), flush, close connections."""
        self._set_role("stopping")
        if self.inbound is not None:
            await self.inbound.stop()
        if self.actors is not None:
            await self.actors.close(drain_timeout_s=0 if self.lost.is_set() else self.settings.drain_timeout_s)
        if self.inbox is not None:
            try:
                await self.inbox.close()
            except Exception as exc:
                log.warning("flushing the inbox: %r", exc)
        # Draining has ended and the inbox is flushed: hand ownership over at once.
        if self.lease is not None and not self.lost.is_set():
            await self.lease.release()
            log.info("ownership released")
        if self.engines is not None:
            await self.engines.close()
        if self.shared is not None:
            await self.shared.close()
        if self.committer is not None:
            await self.committer.aclose()
        if self.db is not None:
            await self.db.dispose()
        if self.broker is not None:
            try:
                await self.broker.stop()
            except Exception as exc:
                log.warning("closing the broker: %r", exc)
        await self.http.stop()
        self._started = False
