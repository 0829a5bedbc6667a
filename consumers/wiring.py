"""Adapters between the service shell and the core: engine sessions, manager, take policy, platforms."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import tzinfo
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.mcp_tools import McpToolServers, parse_mcp_servers
from consumers.settings import Settings, secret_value
from consumers.tool_plugins import load_tools
from core.engine import (
    JournalHistoryReader,
    JournalOfGeneration,
    RuntimeModel,
    Session,
    SessionOptions,
    TakeVerdict,
    builtin_registry,
)
from core.errors import InvalidInput
from core.providers.base import Provider
from core.sessions import take
from core.sessions.inbound import ChatScope, IncomingMessage, Sender
from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance, OwnerIdentities, PlatformRegistry
from core.sessions.ports import ClearSessionData, EventSink
from core.store.change_feed import NotifyingSessionRepository
from core.store.committer import GroupCommitter
from core.store.journal_repo import SqlHistoryJournal
from core.store.knowledge_repo import SqlKnowledgeStore
from core.store.lease_repo import SqlFileLeases
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

MAX_NEW_REMEMBERED = 100_000  # sessions created and not opened yet (see EngineSessions.mark_new)


def to_incoming(message: InboundMessage) -> IncomingMessage:
    """Map the wire inbound model onto the core's IncomingMessage."""
    chat = None
    if message.chat is not None:
        chat = ChatScope(
            type=message.chat.type,
            target_id=message.chat.target_id,
            multi_party=message.chat.multi_party,
            declared_one_to_one=message.chat.declared_one_to_one,
            name=message.chat.name,
        )
    sender = Sender(user_id=message.sender.user_id, name=message.sender.name) if message.sender else None
    return IncomingMessage(
        id=message.id,
        session_id=message.session_id,
        platform=message.platform,
        instance=message.instance,
        self_id=message.self_id,
        chat=chat,
        sender=sender,
        source=message.source,
        text=message.text,
    )


class ManagerRecorder:
    """The inbound loop's view of the session manager (wire model in, core model to the manager)."""

    def __init__(self, manager: SessionManager, on_created: Callable[[str], None] | None = None) -> None:
        self._manager = manager
        self._on_created = on_created

    async def record_inbound(self, message: InboundMessage) -> None:
        sid = message.session_id
        existed = sid is None or self._manager.get_session(sid) is not None
        await self._manager.record_inbound(to_incoming(message))
        if sid is not None and message.source is None and self._manager.get_session(sid) is None:
            # No chat scope to file a room from (SM-3): keep the session as a record filed by id,
            # which a later native inbound with a chat scope backfills.
            try:
                await self._manager.ensure_session(sid)
            except Exception as exc:  # SM-17: a failure to record is a warning, never a rejection
                log.warning("filing %s by id failed: %r", sid, exc)
        # Filed just now under an id that was never deleted: nothing of it can be stored (a deleted
        # id's history might outlive a crash between the deletion and its data clear).
        if (
            not existed and self._on_created is not None and self._manager.get_session(sid) is not None  # type: ignore[arg-type]
            and self._manager.generation_of(sid) == 0  # type: ignore[arg-type]
        ):
            self._on_created(sid)  # type: ignore[arg-type]

    def generation_of(self, session_id: str) -> int:
        return self._manager.generation_of(session_id)


class ManagerTakePolicy:
    """The engine's TakePolicy port, answered by the session manager's can_take (SM-24/SM-25).

    The engine passes the principal as ``"<platform>:<user_id>"`` (split at the first colon).
    """

    def __init__(self, manager: SessionManager, tz: tzinfo) -> None:
        self._manager = manager
        self._tz = tz

    def can_take(self, current_id: str, target_id: str, principal: str | None) -> TakeVerdict:
        verdict = self._manager.can_take(current_id, target_id, take.Principal.from_key(principal))
        return TakeVerdict(ok=True) if verdict.ok else TakeVerdict(ok=False, reason=verdict.reason.source(self._tz) if verdict.reason else None)


def platform_registry(settings: Settings) -> PlatformRegistry:
    """Adapter instances from ``TURNSTILE_PLATFORMS_JSON`` (see docs/protocol.md#platforms)."""
    if not settings.platforms_json.strip():
        return PlatformRegistry()
    try:
        items = orjson.loads(settings.platforms_json)
        instances = [
            AdapterInstance(
                instance_id=str(i["instance_id"]),
                platform=str(i["platform"]),
                type=str(i.get("type", "")),
                claims=tuple(str(c) for c in i.get("claims", [])),
                chat_scopes={str(k): bool(v) for k, v in (i.get("chat_scopes") or {}).items()},
            )
            for i in items
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidInput(f"TURNSTILE_PLATFORMS_JSON is not a list of adapter instances: {exc!r}") from exc
    return PlatformRegistry(instances)


def owner_identities(settings: Settings) -> OwnerIdentities:
    pairs = []
    for item in settings.owners:
        platform, sep, user_id = item.partition(":")
        if not sep or not platform or not user_id:
            raise InvalidInput(f"owner identity {item!r} must be 'platform:user_id'")
        pairs.append((platform, user_id))
    return OwnerIdentities(pairs)


class ManagerEvents:
    """The session manager's event sink: session events are in the stream when ``emit`` returns
    (SM-32: ``session.deleted`` lands before the data clear), except the per-turn bookkeeping
    updates, which stay pipelined on the hot path (their order on the connection is kept)."""

    PIPELINED_CHANGES = frozenset({"turn_started", "turn_ended", "usage"})

    def __init__(self, publisher: Any) -> None:
        self._publisher = publisher

    async def emit(self, session_id: str, event_type: str, payload: Any) -> None:
        sent = await self._publisher.emit(session_id, event_type, payload)
        if event_type == "session.updated" and payload.get("change") in self.PIPELINED_CHANGES:
            return
        if not await self._publisher.settle([sent]):
            log.warning("event %s of %s not acknowledged by the broker", event_type, session_id)


def build_manager(
    settings: Settings,
    db: AsyncEngine,
    events: EventSink,
    clear_session_data: ClearSessionData,
    committer: GroupCommitter | None = None,
    origin: str = "",
) -> SessionManager:
    return SessionManager(
        NotifyingSessionRepository(db, committer, origin=origin),  # notifies other processes (PostgreSQL)
        ManagerEvents(events),
        registry=platform_registry(settings),
        owners=owner_identities(settings),
        clear_session_data=clear_session_data,
    )


def build_provider(settings: Settings) -> Provider:
    if settings.provider == "scripted":
        from core.providers.scripted import ScriptedProvider

        return ScriptedProvider(directives=settings.scripted_directives)
    if settings.provider == "openai":
        from core.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(
            settings.openai_base_url, secret_value(settings.openai_api_key), timeout_s=settings.provider_timeout_s,
            stream=settings.openai_stream,
        )
    raise InvalidInput(f"unknown provider {settings.provider!r} (scripted | openai)")


class EngineSessions:
    """Opens engine sessions over the shared journal, knowledge store, provider, tools and leases.

    ``tools`` is one registry shared by every session of the process (tests may register
    extra tools on it before the first turn).
    """

    def __init__(self, settings: Settings, db: AsyncEngine, committer: GroupCommitter | None = None) -> None:
        self._settings = settings
        # Sessions this process created (record_inbound) and has not opened yet: they have no
        # journal and no checkpoint of their generation, so opening them reads neither.
        self._new: OrderedDict[str, None] = OrderedDict()
        self.journal = SqlHistoryJournal(db, committer=committer)
        self.knowledge = SqlKnowledgeStore(db)
        self.provider = build_provider(settings)
        self.tools = builtin_registry(load_tools(settings))  # custom tools: docs/agent-developers.md
        self.tool_servers = McpToolServers(parse_mcp_servers(settings.mcp_servers_json), settings.tool_timeout_s)
        self.leases = SqlFileLeases(db)
        self.take_policy: Any = None
        # The current generation of an id (the manager's, set at start-up): another session's
        # history is read from its current generation only.
        self.generation_of: Callable[[str], int] = lambda _session_id: 0
        self.runtime = RuntimeModel(
            model=settings.model,
            reasoning_effort=settings.reasoning_effort,
            context_window_tokens=settings.context_window_tokens,
        )

    async def open_tool_servers(self) -> None:
        """Start the MCP tool servers and register their tools (before the first turn)."""
        for tool in await self.tool_servers.start():
            self.tools.register(tool)

    def options_for(self, session_id: str, chat: dict[str, Any] | None = None) -> SessionOptions:
        """A conversation; its channel carries the chat scope, so a multi-party chat is a group (KS-15)."""
        options = SessionOptions.conversation("conversation", roots=[])
        if chat:
            options = options.with_changes(channel={"chat": dict(chat)})
        return options

    def mark_new(self, session_id: str) -> None:
        """``session_id`` was just created by this process: nothing of it is stored yet."""
        self._new[session_id] = None
        while len(self._new) > MAX_NEW_REMEMBERED:
            self._new.popitem(last=False)  # forgetting only costs that session a full load

    def take_new(self, session_id: str) -> bool:
        """True once for a session ``mark_new`` saw and nothing opened since."""
        if session_id not in self._new:
            return False
        del self._new[session_id]
        return True

    async def open(
        self, session_id: str, restored: dict[str, Any] | None, *, generation: int,
        options: SessionOptions | None = None, chat: dict[str, Any] | None = None, new: bool = False,
    ) -> Session:
        """Open ``generation`` of ``session_id``; ``restored`` (a snapshot) wins over ``options``.

        The session reads and writes only that generation's journal rows, also after its id
        was deleted (SM-21/SM-22: a late write never reaches the next generation).
        ``new``: the session was created by this process a moment ago (``take_new``), so its
        journal is known to be empty and is not read.
        """
        return await Session.open(
            session_id=session_id,
            system_prompt=self._settings.system_prompt,
            runtime=self.runtime,
            options=options or self.options_for(session_id, chat),
            journal=JournalOfGeneration(self.journal, lambda _session_id: generation),
            provider=self.provider,
            tools=self.tools,
            knowledge=self.knowledge,
            restored=restored,
            take_policy=self.take_policy,
            history_reader=JournalHistoryReader(JournalOfGeneration(self.journal, self._current_generation)),
            leases=self.leases,
            journal_empty=new,
        )

    def _current_generation(self, session_id: str) -> int:
        return self.generation_of(session_id)

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None:
        """Delete the history of generations older than ``before_generation`` (None: all of it)."""
        await self.journal.clear(session_id, before_generation=before_generation)

    async def clear_stale(self) -> int:
        """Start-up: delete journal rows of ids without a record or of superseded generations."""
        return await self.journal.clear_stale()

    async def close(self) -> None:
        await self.tool_servers.close()
        await self.journal.aclose()
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
