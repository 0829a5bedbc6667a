"""Result models of the turn-area control operations (``result`` of ``{ok: true, result}``).

They describe what ``consumers/turn_operations.py`` answers; ``extra="allow"`` keeps a client
reading an older schema working when a later version adds a field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TurnsResult(BaseModel):
    """Base of the turn-area results: known fields typed, later additions allowed."""

    model_config = ConfigDict(extra="allow")


class InterruptOut(TurnsResult):
    """``session.interrupt``: whether a running turn was stopped or a pending one closed."""

    session_id: str
    interrupted: bool
    stopped_running: bool
    closed_pending: bool
    turn_id: str | None
    status: str = Field(description="engine status after the interrupt")


class RetryOut(TurnsResult):
    """``turn.retry``: the retried turn's outcome and how many replies were delivered."""

    session_id: str
    turn_id: str | None
    outcome: str = Field(description="replied, silent, aborted or error")
    error: str | None
    status: str
    delivered: int


class GroupContextOut(TurnsResult):
    """``session.group_context``: ``applied`` false (with ``reason``) when the chat is not multi-party."""

    session_id: str
    applied: bool
    reason: str | None = None


class ModeTurnOut(TurnsResult):
    """``turn.free_time`` / ``turn.wakeup``: the started turn; with ``wait`` also its end (the rest)."""

    session_id: str
    mode: str
    turn_id: str | None
    status: str
    outcome: str | None = Field(None, description="with wait: replied, silent, aborted or error")
    error: str | None = None
    completed: bool | None = None
    delivered: int | None = None
    committed: dict[str, Any] | None = Field(None, description="with wait: the knowledge commit's facts")
    free_time_result: dict[str, Any] | None = None


class IngressOut(ModeTurnOut):
    """``turn.ingress``: the ingress turn (as ``ModeTurnOut``) and its source session."""

    source_session_id: str


class ResolvedObjectOut(TurnsResult):
    """``object.resolve``: an object's facts and bytes (base64, at most 512 KiB)."""

    object_id: str
    file_name: str
    media_type: str
    transport_kind: str
    size: int
    data_base64: str


class KnowledgeNodeOut(TurnsResult):
    """A committed knowledge node."""

    id: str
    parent_id: str | None = None
    content: str = ""
    version: int = 0


class KnowledgeNodeWithChildrenOut(KnowledgeNodeOut):
    """``knowledge.get``: the node and its children's ids."""

    children: list[str]


class KnowledgeListOut(TurnsResult):
    """``knowledge.list``: the nodes found."""

    nodes: list[KnowledgeNodeOut]
