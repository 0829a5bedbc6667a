"""The session manager's records shared by every process on one PostgreSQL database.

``SharedState`` loads the platform instances registered over the control API (``platform_instances``)
and the chat types messages declared one-to-one (``learned_chat_scopes``, SM-26) into the manager's
registry, persists ``platform.register``/``platform.unregister`` and every newly declared chat type
(written in the background: the message's recording does not wait for it), and on PostgreSQL
listens for the other processes' writes (``core.store.change_feed``): changed records, places,
workspaces and generations are read back into the manager's table, registrations into the registry.
On SQLite it only persists: SQLite is the single-process store.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import Connection, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance
from core.sessions.ports import StoreChange
from core.store.change_feed import ChangeFeed, SharedChange, notify, read_back, read_with_ancestors
from core.store.chat_scope_repo import SqlChatScopeRepository
from core.store.platform_repo import SqlPlatformRepository
from core.store.session_tables import places_table, workspaces_table

log = logging.getLogger(__name__)

# pg_advisory_xact_lock key serialising place and workspace writes across processes ("tsdirect").
DIRECTORY_LOCK_KEY = 0x7473646972656374


def new_origin() -> str:
    """A process's (or manager's) id in change notifications: its own are not read back."""
    return uuid.uuid4().hex


class SharedState:
    """Platform registrations persisted, and the other processes' writes installed (PostgreSQL)."""

    def __init__(self, engine: AsyncEngine, manager: SessionManager, origin: str) -> None:
        self._engine = engine
        self._manager = manager
        self._origin = origin
        self._platforms = SqlPlatformRepository(engine, on_write=self._notify_platforms)
        self._stored: set[str] = set()  # ids of the registry's instances that came from the table
        self._scopes = SqlChatScopeRepository(engine, on_write=self._notify_platforms)
        self._writing: set[asyncio.Task[None]] = set()  # declared chat types being stored
        self.feed: ChangeFeed | None = None

    @property
    def shared(self) -> bool:
        """Is the database one other processes can share (PostgreSQL)?"""
        return self._engine.dialect.name == "postgresql"

    async def listen(self) -> None:
        """Before the manager loads its table: start hearing other processes' writes (PostgreSQL)."""
        if self.shared and self.feed is None:
            dsn = self._engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
            self.feed = ChangeFeed(dsn, self._origin, self._on_change)
            await self.feed.listen()

    async def start(self) -> None:
        """After the manager loaded its table: load the registrations, install what was heard since."""
        await self.listen()
        self._manager.registry.on_learned = self._learned
        await self._load_platforms()
        if self.feed is not None:
            self.feed.deliver()

    async def flush(self) -> None:
        """Wait until the chat types declared so far are stored."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        if self.feed is not None:
            await self.feed.close()
            self.feed = None

    async def register_platform(self, instance: AdapterInstance) -> None:
        """Persist, then hold, a registration (replacing one with the same id)."""
        await self._platforms.put(instance)
        self._manager.registry.register(instance)
        self._stored.add(instance.instance_id)

    async def unregister_platform(self, instance_id: str) -> bool:
        """Forget a registration (stored or configured); True when it existed."""
        stored = await self._platforms.delete(instance_id)
        self._stored.discard(instance_id)
        return self._manager.registry.unregister(instance_id) or stored

    async def read_through(self, *session_ids: str) -> None:
        """On a shared database: read these sessions and their ancestors back before a rule is judged on
        them (take.check, place_of by root, create_child under a parent another process wrote)."""
        wanted = [i for i in session_ids if i]
        if self.shared and wanted:
            await self._manager.install_external(lambda: read_with_ancestors(self._engine, wanted))

    @asynccontextmanager
    async def directory_writes(self) -> AsyncIterator[None]:
        """Around ``place.update`` and ``workspace.add``/``remove`` on a shared database: one process at a
        time (a PostgreSQL advisory lock held until the write committed), judged on every place and
        workspace read through first, so two processes never merge onto or check a stale copy."""
        if not self.shared:
            yield
            return
        async with self._engine.begin() as conn:  # the lock ends with this transaction, after the write
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": DIRECTORY_LOCK_KEY})
            await self._manager.install_external(self._read_directory)
            yield

    async def _read_directory(self) -> StoreChange:
        async with self._engine.connect() as conn:
            places = {str(k) for k in (await conn.execute(select(places_table.c.key))).scalars()}
            workspaces = {str(k) for k in (await conn.execute(select(workspaces_table.c.id))).scalars()}
        places |= {p.key for p in self._manager.list_places()}
        workspaces |= {w.id for w in self._manager.list_workspaces()}
        return await read_back(self._engine, SharedChange(origin="", places=tuple(places), workspaces=tuple(workspaces)))

    def _learned(self, platform: str, chat_type: str) -> None:
        task = asyncio.create_task(self._store_learned(platform, chat_type))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _store_learned(self, platform: str, chat_type: str) -> None:
        try:
            await self._scopes.add(platform, chat_type)
        except Exception as exc:  # known here still; the other processes learn it from their own messages
            log.warning("storing that %s chat type %r is one-to-one failed: %r", platform, chat_type, exc)

    def _notify_platforms(self, conn: Connection) -> None:
        notify(conn, SharedChange(origin=self._origin, platforms=True))

    async def _load_platforms(self) -> None:
        self._manager.registry.learn_one_to_one(await self._scopes.load())
        instances = await self._platforms.load()
        found = {i.instance_id for i in instances}
        for gone in self._stored - found:
            self._manager.registry.unregister(gone)
        for instance in instances:
            self._manager.registry.register(instance)
        self._stored = found

    async def _on_change(self, change: SharedChange) -> None:
        if change.platforms or change.everything:
            await self._load_platforms()
        if change.everything:
            await self._manager.install_external(_reload_everything)
        elif change.sessions or change.places or change.workspaces or change.generations:
            ids = set(change.sessions) | set(change.generations)
            await self._manager.install_external(lambda: read_back(self._engine, change), ids)


async def _reload_everything() -> None:
    return None
