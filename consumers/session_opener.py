"""SessionOpener: opens engine sessions over the shared journal, knowledge store, provider, tools and
file leases (one per process, built by ``consumers/bootstrap.py``)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from consumers.known_tails import KnownTails
from consumers.mcp_tools import McpToolServers
from consumers.settings import Settings, secret_value
from core.engine import (
    JournalHistoryReader,
    JournalOfGeneration,
    JournalReadAhead,
    RuntimeModel,
    Session,
    SessionOptions,
    TakePolicy,
    ToolRegistry,
)
from core.errors import InvalidInput
from core.providers.base import Provider
from core.store.journal_repo import SqlHistoryJournal
from core.store.knowledge_repo import SqlKnowledgeStore
from core.store.lease_repo import SqlFileLeases
from core.store.partition_epochs import WriteFence

MAX_CREATED_REMEMBERED = 100_000  # sessions created and not opened yet (see SessionOpener.remember_created)
# A snapshot may take the broker's max_payload less this share of it: room for what one turn adds between
# two compactions (they run before each model round), the checkpoint's envelope and its headers.
CHECKPOINT_HEADROOM_DIVISOR = 8


def snapshot_budget(setting: int | None, max_payload: int) -> int | None:
    """The largest snapshot a session may publish: ``TURNSTILE_CHECKPOINT_MAX_BYTES``, at most the
    broker's ``max_payload`` less an eighth (None when neither is known)."""
    ceiling = max_payload - max_payload // CHECKPOINT_HEADROOM_DIVISOR if max_payload > 0 else None
    if setting is None:
        return ceiling
    return setting if ceiling is None else min(setting, ceiling)


def build_provider(settings: Settings) -> Provider:
    """The model provider the settings name (``scripted`` | ``openai``)."""
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


class SessionOpener:
    """Opens engine sessions, fresh or from a checkpoint snapshot, over the process's shared parts.

    ``tools`` is one registry shared by every session of the process (tests may register
    extra tools on it before the first turn). ``generation_of`` answers an id's current
    generation (the manager's): another session's history is read from that generation only.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        journal: SqlHistoryJournal,
        knowledge: SqlKnowledgeStore,
        provider: Provider,
        tools: ToolRegistry,
        tool_servers: McpToolServers,
        leases: SqlFileLeases,
        take_policy: TakePolicy,
        generation_of: Callable[[str], int],
        max_payload: Callable[[], int] = lambda: 0,
    ) -> None:
        self._system_prompt = settings.system_prompt
        self._checkpoint_max_bytes = settings.checkpoint_max_bytes
        self._max_payload = max_payload  # the connected broker's (0 before connecting)
        # Sessions this process created (record_inbound) and has not opened yet: they have no
        # journal and no checkpoint of their generation, so opening them reads neither.
        self._created: OrderedDict[str, None] = OrderedDict()
        self.journal = journal
        self.knowledge = knowledge
        self.provider = provider
        self.tools = tools  # custom tools: docs/agent-developers.md
        self.tool_servers = tool_servers
        self.leases = leases
        self.take_policy = take_policy
        self._generation_of = generation_of
        # Partitioned: the epochs this process holds its partitions at (set by ``bootstrap``).
        self.fence: WriteFence | None = None
        # Unloaded sessions whose journal past their last checkpoint is known empty (consumers/known_tails.py).
        self.tails = KnownTails(self._epoch_of)
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

    def remember_created(self, session_id: str) -> None:
        """``session_id`` was just created by this process: nothing of it is stored yet."""
        self._created[session_id] = None
        while len(self._created) > MAX_CREATED_REMEMBERED:
            self._created.popitem(last=False)  # forgetting only costs that session a full load

    def forget_moved(self, moved: Callable[[str], bool]) -> None:
        """Sessions another process owns now (a lost partition): whatever it writes, their journal is
        no longer known here (neither empty after a create nor ending at a kept tail), so their next
        open here reads it."""
        for session_id in [sid for sid in self._created if moved(sid)]:
            del self._created[session_id]
        self.tails.forget(moved)

    def forget_all(self) -> None:
        """Ownership of everything lost (the prefix lease): no journal is known to be empty any more."""
        self._created.clear()
        self.tails.forget_all()

    def _epoch_of(self, session_id: str) -> int | None:
        if self.fence is None:
            return 0
        claim = self.fence.epoch_of(session_id or None)
        return None if claim is None else claim[1]

    def pop_created(self, session_id: str) -> bool:
        """True once for a session ``remember_created`` saw and nothing opened since."""
        if session_id not in self._created:
            return False
        del self._created[session_id]
        return True

    def read_ahead(self, session_id: str, generation: int) -> asyncio.Future[JournalReadAhead] | None:
        """Start reading the newest journal rows of ``generation`` for a reopen, to overlap the
        checkpoint fetch (None where that gains nothing: ``SqlHistoryJournal.reads_ahead``). Hand
        it to ``open``; a caller that does not, cancels it."""
        if not self.journal.reads_ahead:
            return None
        return asyncio.ensure_future(self.journal.newest(session_id, generation=generation))

    async def open(
        self, session_id: str, restored: dict[str, Any] | None, *, generation: int,
        options: SessionOptions | None = None, chat: dict[str, Any] | None = None, new: bool = False,
        known_tail: bool = False, read_ahead: asyncio.Future[JournalReadAhead] | None = None,
    ) -> Session:
        """Open ``generation`` of ``session_id``; ``restored`` (a snapshot) wins over ``options``.

        The session reads and writes only that generation's journal rows, also after its id
        was deleted (SM-21/SM-22: a late write never reaches the next generation).
        ``new``: the session was created by this process a moment ago (``pop_created``), so its
        journal is known to be empty and is not read. ``known_tail``: the journal holds nothing past
        ``restored`` (``KnownTails.take`` held for it), so it is not read either. ``read_ahead`` (from ``read_ahead``, started
        before the checkpoint was fetched): the journal tail past ``restored`` is taken from it
        when it covers it.
        """
        return await Session.open(
            session_id=session_id,
            system_prompt=self._system_prompt,
            runtime=self.runtime,
            options=options or self.options_for(session_id, chat),
            journal=JournalOfGeneration(
                self.journal, lambda _session_id: generation, read_ahead, on_unsure=self.tails.unsure
            ),
            provider=self.provider,
            tools=self.tools,
            knowledge=self.knowledge,
            restored=restored,
            take_policy=self.take_policy,
            history_reader=JournalHistoryReader(JournalOfGeneration(self.journal, self._generation_of)),
            leases=self.leases,
            journal_empty=new or (known_tail and restored is not None),
            snapshot_max_bytes=snapshot_budget(self._checkpoint_max_bytes, self._max_payload()),
        )

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None:
        """Delete the history of generations older than ``before_generation`` (None: all of it)."""
        self.tails.drop(session_id)
        await self.journal.clear(session_id, before_generation=before_generation)
        self.tails.drop(session_id)

    async def clear_older(self, generations: Sequence[tuple[str, int]]) -> None:
        """Per ``(session_id, generation)``: delete that session's older generations' history."""
        for session_id, _ in generations:
            self.tails.drop(session_id)
        await self.journal.clear_older(generations)
        for session_id, _ in generations:
            self.tails.drop(session_id)

    async def clear_stale(self) -> int:
        """Start-up: delete journal rows of ids without a record or of superseded generations."""
        return await self.journal.clear_stale()

    async def close(self) -> None:
        await self.tool_servers.close()
        await self.journal.aclose()
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
