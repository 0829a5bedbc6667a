"""What the session's helpers may use of a session: a small protocol instead of ``Session``.

Openings, completion, group context, context recovery and the turn loop take a
``SessionPort``; ``core.engine.session.Session`` satisfies it. The helpers thus import
no ``Session`` and the session imports them at module top, with no cycle.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from core.engine.drafts import Checkpoint, Draft
from core.engine.journal import EntryKind, HistoryJournal, JournalEntry
from core.engine.knowledge import KnowledgeStore
from core.engine.objects import ResolvedObject
from core.engine.ports import Clock, HistoryReader, PartialText, TakePolicy
from core.engine.state import SessionState
from core.engine.tools import ToolRegistry
from core.engine.tools.leases import FileLeases
from core.providers.base import Provider, Usage

T = TypeVar("T")


class SessionPort(Protocol):
    """The session as its helpers see it: state, collaborators, and the journal plumbing."""

    system_prompt: str
    journal: HistoryJournal
    provider: Provider
    tools: ToolRegistry
    knowledge: KnowledgeStore
    take_policy: TakePolicy
    history_reader: HistoryReader | None
    leases: FileLeases
    clock: Clock
    last_usage: Usage
    snapshot_max_bytes: int | None
    snapshot_rest_bytes: int
    partial_text: PartialText | None

    @property
    def state(self) -> SessionState:
        """The accepted state (read it, never mutate it outside ``commit``)."""
        ...

    @property
    def session_id(self) -> str:
        """The session's id."""
        ...

    @property
    def running(self) -> bool:
        """True while ``run_pending_turn`` is in progress."""
        ...

    def new_id(self, prefix: str) -> str:
        """A fresh unique id with a readable prefix."""
        ...

    def draft(self, kind: EntryKind | str, payload: dict[str, Any], *, in_turn: bool = True) -> Draft:
        """An entry tied to the current turn (when ``in_turn`` and a turn is pending)."""
        ...

    async def commit(self, drafts: list[Draft], checkpoint: Checkpoint | None = None) -> list[JournalEntry]:
        """Journal ``drafts`` atomically, fold them, then checkpoint."""
        ...

    async def guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a provider call or tool dispatch so a cancel can stop it."""
        ...

    def raise_if_cancelled(self) -> None:
        """Raise Cancelled when the running operation was cancelled."""
        ...

    async def commit_current_write_session(self, *, checkpoint: Checkpoint | None = None) -> None:
        """Commit staged knowledge writes and complete the session (KS-18)."""
        ...

    async def resolve_object(self, object_id: str) -> ResolvedObject:
        """Exact bytes and delivery facts of an object (KS-11)."""
        ...


__all__ = ["SessionPort"]
