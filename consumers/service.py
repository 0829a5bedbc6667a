"""TurnstileService: one turnstile process's life — connect, own the prefix, serve, hand over, stop.

What it serves is built in one place, ``consumers/bootstrap.py``; the service connects
(broker, database), takes the ownership lease, prepares the store and streams, and then
asks ``bootstrap`` for the ``Runtime`` it starts and, at the end, drains and closes. How far it
got is one value, ``phase``: ``Unconnected`` → ``Connected(connections, lease)`` (standby,
preparing) → ``Serving(connections, lease, runtime)``; nothing is half-built.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

from faststream.nats import NatsBroker
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.actors import ActorRegistry
from consumers.bootstrap import Connections, Replacements, Runtime, bootstrap
from consumers.connect import patiently, wait_for_broker
from consumers.http_server import HttpServer
from consumers.inbound_loop import InboundLoop
from consumers.inspector import inspector_routes
from consumers.lease import OwnershipLease
from consumers.metrics import Metrics
from consumers.nats_connect import broker_options, connect_options
from consumers.observability import observability_routes
from consumers.publisher import Publisher
from consumers.session_opener import SessionOpener
from consumers.settings import Settings
from consumers.startup import EXIT_SETTINGS, StartupError, check_provider, open_database
from consumers.streams import ensure_streams
from core.errors import Unavailable
from core.sessions.manager import SessionManager
from core.store.committer import GroupCommitter
from core.store.inbox import SqlInbox
from core.store.migrate import migrate
from schemas.subjects import Subjects

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unconnected:
    """Before ``start`` has connected: only the operator endpoint runs."""


@dataclass(frozen=True)
class Connected:
    """Connected, with the ownership lease to take or taken: a standby, or preparing to serve."""

    connections: Connections
    lease: OwnershipLease


@dataclass(frozen=True)
class Serving:
    """Connected, owning, and running the built ``Runtime``."""

    connections: Connections
    lease: OwnershipLease
    runtime: Runtime


Phase = Unconnected | Connected | Serving


class TurnstileService:
    """One turnstile process: health endpoint, connections, ownership, and the built ``Runtime``."""

    def __init__(self, settings: Settings, replace: Replacements | None = None) -> None:
        self.settings = settings
        self.subjects = Subjects(settings.prefix)
        self._replace = replace
        self.lost = asyncio.Event()
        self.metrics = Metrics()  # one registry per service: several services in one process do not collide
        self.role = "starting"  # starting → standby (waiting for the lease) → owner; fenced; stopping
        # Health, metrics and the inspector are served from the start: a standby answers health checks.
        self.http = HttpServer(settings.http_host, settings.http_port)
        self.http.add_routes(inspector_routes(self))
        self.http.add_routes(observability_routes(self))
        # What start() opened, closed in reverse order by stop(); how far start() got.
        self._opened = AsyncExitStack()
        self.phase: Phase = Unconnected()
        self._fencing: list[asyncio.Task[None]] = []  # referenced until done

    # -- the running parts (None while not there yet; read by the endpoint, the CLI and tests) ------
    @property
    def runtime(self) -> Runtime | None:
        return self.phase.runtime if isinstance(self.phase, Serving) else None

    @property
    def connections(self) -> Connections | None:
        return None if isinstance(self.phase, Unconnected) else self.phase.connections

    @property
    def broker(self) -> NatsBroker | None:
        return self.connections.broker if self.connections is not None else None

    @property
    def js(self) -> JetStreamContext | None:
        return self.connections.js if self.connections is not None else None

    @property
    def db(self) -> AsyncEngine | None:
        return self.connections.db if self.connections is not None else None

    @property
    def manager(self) -> SessionManager | None:
        return self.runtime.manager if self.runtime is not None else None

    @property
    def engines(self) -> SessionOpener | None:
        return self.runtime.opener if self.runtime is not None else None

    @property
    def actors(self) -> ActorRegistry | None:
        return self.runtime.actors if self.runtime is not None else None

    @property
    def inbox(self) -> SqlInbox | None:
        return self.runtime.inbox if self.runtime is not None else None

    @property
    def publisher(self) -> Publisher | None:
        return self.runtime.publisher if self.runtime is not None else None

    @property
    def inbound(self) -> InboundLoop | None:
        return self.runtime.inbound if self.runtime is not None else None

    @property
    def committer(self) -> GroupCommitter | None:
        return self.runtime.committer if self.runtime is not None else None

    @property
    def lease(self) -> OwnershipLease | None:
        return None if isinstance(self.phase, Unconnected) else self.phase.lease

    # -- life -------------------------------------------------------------------------------------
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
        self._opened.push_async_callback(self.http.stop)
        # Checked before any ownership is taken: a process that cannot work never holds the lease.
        await wait_for_broker(s.nats_url, None if patient else s.connect_timeout_s, connect_options(s))
        db = await open_database(s)
        self._opened.push_async_callback(db.dispose)
        await check_provider(s)
        broker = NatsBroker(
            s.nats_url, max_reconnect_attempts=-1, graceful_timeout=10.0, log_level=logging.DEBUG,
            **broker_options(s),
        )
        self._opened.push_async_callback(self._stop_broker, broker)
        await broker.connect()
        js = broker.connection.jetstream()
        connections = Connections(broker=broker, js=js, db=db)
        lease = OwnershipLease(js, f"{self.subjects.stream_prefix}_LEASES", s.lease_ttl_s)
        self.phase = Connected(connections, lease)
        self._set_role("standby")
        await lease.acquire(on_lost=self._on_lease_lost)
        self._opened.push_async_callback(self._release_ownership, lease)
        self._set_role("starting")
        await migrate(db, allow_foreign_tables=s.database_allow_foreign_tables, in_child=True)
        await patiently(
            lambda: ensure_streams(js, s, self.subjects), "setting up the streams",
            None if patient else s.connect_timeout_s,
        )
        runtime = bootstrap(
            s, connections, metrics=self.metrics, still_owner=lease.still_ours, replace=self._replace
        )
        self._opened.push_async_callback(runtime.close)
        self.phase = Serving(connections, lease, runtime)
        if runtime.partitioned is not None and not s.database_url.startswith("sqlite"):
            # The prefix lease only serialised migrations and stream set-up: partition leases rule now
            # (SQLite: it stays held, and its holder owns every partition; the others stand by).
            await lease.release()
        await runtime.start(self.lost)
        self._set_role("owner")

    def _set_role(self, role: str) -> None:
        self.role = role
        self.metrics.set_ownership(role)

    def _on_lease_lost(self) -> None:
        """Another process owns the prefix now: stop fetching and running turns at once (fenced)."""
        log.warning("fenced: ownership lost, stopped fetching and cancelled running turns (they stay staged)")
        self._set_role("fenced")
        self.lost.set()
        if isinstance(self.phase, Serving):
            # Stage nothing more: what is in flight is redelivered to the new owner.
            self._fencing = self.phase.runtime.fence()

    async def clear_history(self, session_id: str) -> bool:
        """Clear the session's journal and checkpoints (``SessionHistory.clear``); False when not serving."""
        return await self.phase.runtime.history.clear(session_id) if isinstance(self.phase, Serving) else False

    async def _clear_session_data(self, session_ids: Sequence[str]) -> None:
        """SM-21: the manager's hook after session.deleted (``SessionHistory.clear_deleted``)."""
        if isinstance(self.phase, Serving):
            await self.phase.runtime.history.clear_deleted(session_ids)

    async def _release_ownership(self, lease: OwnershipLease) -> None:
        # Draining has ended and the inbox is flushed: hand ownership over at once.
        if not self.lost.is_set():
            await lease.release()
            log.info("ownership released")

    @staticmethod
    async def _stop_broker(broker: NatsBroker) -> None:
        try:
            await broker.stop()
        except Exception as exc:
            log.warning("closing the broker: %r", exc)

    async def stop(self) -> None:
        """Stop fetching, let running turns finish (bounded), flush, hand over, close connections."""
        self._set_role("stopping")
        if isinstance(self.phase, Serving):
            await self.phase.runtime.drain(0 if self.lost.is_set() else self.settings.drain_timeout_s)
        await asyncio.gather(*self._fencing, return_exceptions=True)
        await self._opened.aclose()
