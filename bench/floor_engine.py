"""The turn engine inside the guarantee floor (``python -m bench.floor --engine``): the floor plus the work the spec asks of a turn.

The floor (bench/floor.py) publishes checkpoints of a measured size filled with ``x`` and answers
``echo: <text>`` without a transcript. The spec asks more of every message: the user message and
the answer go through the session's state (KS-4, KS-10), and each checkpoint is a complete snapshot
of it (KS-20, MQ-3). With ``--engine`` the floor runs turnstile's own engine for that
(``core.engine.Session`` with the scripted provider, as the bench's turnstile runs it): its journal
entries are the rows the floor commits, and its snapshots are the checkpoints the floor publishes,
fenced as before. Nothing of the service around the engine is added (no session records, events
beyond the measured count, inbox marks, KS-14 lookups, actors, metrics), so the difference between
this worker and turnstile is the service shell, and the difference between it and the floor is the
engine's share of a message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from bench.floor_store import FloorStore
from consumers.settings import Settings
from core.engine import (
    EntryKind,
    JournalEntry,
    KnowledgeNode,
    KnowledgeObject,
    LeaseRegistry,
    RuntimeModel,
    SameSessionOnly,
    Session,
    SessionOptions,
    builtin_registry,
)
from core.engine.snapshot import EncodedSnapshot
from core.providers import ScriptedProvider

Publish = Callable[[bytes], Awaitable[None]]


class FloorJournal:
    """The engine's journal port over the floor's journal table: an append is one committed write of
    the entries as JSON; a session opened by a later process (the paced phase's) is folded from them."""

    def __init__(self, store: FloorStore) -> None:
        self._store = store

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        rows = [(session_id, e.seq, e.kind.value, orjson.dumps(e.model_dump(mode="json"))) for e in entries]
        await self._store.write(("journal", rows))

    async def load(self, session_id: str, *, from_seq: int = 0) -> list[JournalEntry]:
        bodies = await self._store.journal_bodies(session_id, from_seq)
        return [JournalEntry.model_validate(orjson.loads(body)) for body in bodies]

    async def clear(self, session_id: str) -> None:
        return None

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        return []

    async def event_ids(self, session_id: str) -> set[str]:
        return set()


class NoKnowledge:
    """A knowledge store with nothing in it (a plain turn reads none)."""

    async def get_node(self, node_id: str) -> KnowledgeNode | None:
        return None

    async def children(self, parent_id: str) -> list[KnowledgeNode]:
        return []

    async def ancestors(self, node_id: str) -> list[str]:
        return []

    async def search(self, query: str, roots: list[str], limit: int) -> list[KnowledgeNode]:
        return []

    async def get_object(self, object_id: str) -> KnowledgeObject | None:
        return None

    async def commit(self, write_session_id: str, ops: list[Any]) -> None:
        return None


class EngineTurns:
    """One engine session per chat session, opened on its first message, run as turnstile runs it."""

    def __init__(self, store: FloorStore) -> None:
        settings = Settings()
        self._journal = FloorJournal(store)
        self._provider = ScriptedProvider(directives=settings.scripted_directives)
        self._tools = builtin_registry()
        self._knowledge = NoKnowledge()
        self._leases = LeaseRegistry()
        self._policy = SameSessionOnly()
        self._prompt = settings.system_prompt
        self._runtime = RuntimeModel(
            model=settings.model, reasoning_effort=settings.reasoning_effort,
            context_window_tokens=settings.context_window_tokens,
        )
        self._sessions: dict[str, Session] = {}

    async def _session(self, sid: str) -> Session:
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = await Session.open(
                session_id=sid, system_prompt=self._prompt, runtime=self._runtime,
                options=SessionOptions.conversation("conversation", roots=[]), journal=self._journal,
                provider=self._provider, tools=self._tools, knowledge=self._knowledge, take_policy=self._policy,
                leases=self._leases,
            )
        return session

    async def turn(self, inbound: dict[str, Any], checkpoint: Publish) -> str:
        """The user message staged and the turn run; each checkpoint's snapshot goes to ``checkpoint``.
        Returns the answer's text."""
        session = await self._session(inbound["session_id"])

        async def publish(snapshot: EncodedSnapshot) -> None:
            await checkpoint(snapshot.raw)

        metadata = {"external_event_id": inbound["id"], "inbound_id": inbound["id"]}
        if not await session.begin_user_turn(inbound["text"], metadata, checkpoint=publish):
            raise RuntimeError(f"message {inbound['id']} was not staged")
        answer = await session.run_pending_turn(f"{inbound['id']}:turn", publish)
        return answer or ""
