"""What a tool handler can see and use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.engine.knowledge import KnowledgeStore
from core.engine.objects import ResolvedObject
from core.engine.ports import Clock, HistoryReader, TakePolicy
from core.engine.state import SessionState
from core.engine.tools.leases import FileLeases
from core.providers.base import Provider


@dataclass
class ToolContext:
    """Capabilities handed to a tool; ``state`` is read-only for tools (they return entries)."""

    session_id: str
    state: SessionState
    provider: Provider
    knowledge: KnowledgeStore
    take_policy: TakePolicy
    history_reader: HistoryReader | None
    leases: FileLeases
    clock: Clock
    resolve_object: Callable[[str], Awaitable[ResolvedObject]]
    new_id: Callable[[str], str]

    @property
    def mode(self) -> str:
        """The session's mode kind."""
        return self.state.mode.kind

    @property
    def readable_roots(self) -> list[str]:
        """Writable then reference roots."""
        return [*self.state.root_node_ids, *self.state.reference_root_node_ids]
