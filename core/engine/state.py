"""The accepted state of a session: a fold over its journal, and the core of the snapshot."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one, not typing's, before Python 3.12

from core.engine.options import AgentMode, RuntimeModel, WorkBinding
from core.providers.base import Usage

TurnPhase = Literal["idle", "awaiting_model", "tools", "answered"]

# Caps on the side lists every snapshot carries: they keep checkpoints bounded as a
# conversation grows (the journal keeps everything). External responses carry reply
# texts, so they are the costliest: 16 recent events cover redelivery and replay.
MAX_EVENTS = 64
MAX_BOXES = 16
MAX_EXTERNAL_EVENTS = 16
MAX_INBOUND_IDS = 64


class TranscriptItem(TypedDict):
    """A journal entry as the transcript keeps it: JSON-ready, an object's bytes left in the journal.

    ``kind`` is an ``EntryKind`` value; ``payload``'s shape depends on it (``core.engine.reducer``).
    """

    seq: int
    kind: str
    turn_id: str | None
    external_event_id: str | None
    at: str
    payload: dict[str, Any]


@with_config(ConfigDict(extra="allow"))
class EventRecord(TypedDict):
    """A journaled ``event`` as the state keeps it: its seq and time, its type, then its own fields."""

    seq: int
    at: str
    type: str


@with_config(ConfigDict(extra="allow"))
class ObjectMeta(TypedDict):
    """A pending history object's facts (KS-11); the bytes stay in the journal entry at ``seq``."""

    seq: int
    object_id: str
    file_name: str
    media_type: str
    transport_kind: NotRequired[str | None]
    size: NotRequired[int]
    delivery: NotRequired[bool]


class ExternalResponse(TypedDict):
    """One response the session gave to an external event (KS-14): text or an object."""

    seq: int
    kind: str
    turn_id: str | None
    at: str
    terminal: bool
    text: NotRequired[str]
    object_id: NotRequired[str]


@with_config(ConfigDict(extra="allow"))
class BoxRecord(TypedDict):
    """A controller update box (KS-15) as the state keeps it."""

    seq: int
    box_id: str
    context: dict[str, Any]
    current_message_id: str | None


class FreeTimeResult(TypedDict):
    """How a free-time slice was finalized (KS-17)."""

    reason: str
    result: str
    at: str


class OpenCall(BaseModel):
    """A tool call of the latest model response that has no result yet."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    dispatched: bool = False


class TurnOutput(BaseModel):
    """Something the turn delivers to the user; ``seq`` makes the outbound id unique."""

    seq: int
    kind: Literal["text", "object"]
    text: str | None = None
    object_id: str | None = None
    file_name: str | None = None
    media_type: str | None = None


class TurnState(BaseModel):
    """The current (or, when not pending, the last) turn."""

    pending: bool = False
    turn_id: str | None = None
    external_event_id: str | None = None
    principal: str | None = None
    phase: TurnPhase = "idle"
    answer: str | None = None
    open_calls: list[OpenCall] = Field(default_factory=list)
    outputs: list[TurnOutput] = Field(default_factory=list)


class KnowledgeOp(BaseModel):
    """One staged knowledge write, with the version it was based on (None: must be new)."""

    op: Literal["put_node", "put_object"]
    node_id: str
    parent_id: str | None = None
    content: str | None = None
    base_version: int | None = None
    object_id: str | None = None
    file_name: str | None = None
    media_type: str | None = None
    data_b64: str | None = None


class KnowledgePlan(BaseModel):
    """The session's staged knowledge write transaction."""

    write_session_id: str
    ops: list[KnowledgeOp] = Field(default_factory=list)


class CommitFacts(BaseModel):
    """What ``commit_current_write_session`` committed, and when."""

    write_session_id: str
    committed_at: str
    op_count: int


class LastTurn(BaseModel):
    """How the previous turn ended."""

    turn_id: str | None
    outcome: Literal["replied", "silent", "error", "aborted", "source_terminated", "finalized"]
    ended_at: str
    error: str = ""


class SessionState(BaseModel):
    """Everything accepted about a session. Mutated only by ``core.engine.reducer``, except
    ``work``, which mirrors the session records (``Session.bind_work``)."""

    session_id: str
    session_type: str
    system_prompt_sha256: str
    runtime: RuntimeModel
    mode: AgentMode
    channel: dict[str, Any] = Field(default_factory=dict)
    free_time: dict[str, Any] = Field(default_factory=dict)
    orchestration: dict[str, Any] = Field(default_factory=dict)
    group_context: dict[str, Any] = Field(default_factory=dict)
    provenance_id: str | None = None
    source_session_type: str | None = None
    managed_source_session_id: str
    root_node_ids: list[str] = Field(default_factory=list)
    reference_root_node_ids: list[str] = Field(default_factory=list)
    work: WorkBinding | None = None
    max_rounds: int
    started_at: str
    next_seq: int = 0
    transcript: list[TranscriptItem] = Field(default_factory=list)
    compacted_through_seq: int = -1
    turn: TurnState = Field(default_factory=TurnState)
    last_turn: LastTurn | None = None
    rounds_used: int = 0
    exhausted: bool = False
    completed: bool = False
    source_terminated: bool = False
    openings: dict[str, bool] = Field(default_factory=dict)
    free_time_result: FreeTimeResult | None = None
    commit: CommitFacts | None = None
    knowledge_plan: KnowledgePlan
    boxes: list[BoxRecord] = Field(default_factory=list)
    events: list[EventRecord] = Field(default_factory=list)
    objects: dict[str, ObjectMeta] = Field(default_factory=dict)
    external_responses: dict[str, list[ExternalResponse]] = Field(default_factory=dict)
    recent_inbound_ids: list[str] = Field(default_factory=list)
    usage_total: Usage = Field(default_factory=Usage)
