"""Control requests of the turn area: interrupt, mode turns, group context, objects, knowledge.

Subjects are ``<prefix>.api.<resource>.<verb>``; replies are ``{ok, result}`` or
``{ok: false, error: {code, message}}`` (see ``schemas.wire.ControlOk``/``ControlError``).
Documented with examples in docs/protocol.md (control API, turn area).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.tokens import check_session_id_size

SessionId = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(check_session_id_size)]
NodeId = Annotated[str, Field(min_length=1, max_length=256)]

MAX_INSTRUCTIONS_CHARS = 65_536
MAX_ROUNDS = 64

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class TurnsRequest(BaseModel):
    """Base of the turn-area requests: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class InterruptRequest(TurnsRequest):
    """``session.interrupt``: stop the session's running turn (or close a pending one)."""

    session_id: SessionId


class RetryRequest(TurnsRequest):
    """``turn.retry``: reset an exhausted conversation turn's round count (KS-9) and run it again."""

    session_id: SessionId
    platform: str | None = Field(
        None, min_length=1, max_length=64, description="deliver the answer on this platform's outbound subject"
    )
    reply_to: str | None = Field(None, max_length=256, description="the inbound message id the answer replies to")


class ModeTurnRequest(TurnsRequest):
    """Fields shared by ``turn.free_time`` / ``turn.wakeup``: a fresh session in that mode."""

    session_id: SessionId = Field(description="the mode session's own id; must have no history yet")
    roots: list[NodeId] = Field(default_factory=list, description="writable knowledge roots, in order")
    reference_roots: list[NodeId] = Field(default_factory=list, description="read-only knowledge roots")
    instructions: str | None = Field(None, max_length=MAX_INSTRUCTIONS_CHARS,
                                     description="appended verbatim to the mode's opening message")
    max_rounds: int | None = Field(None, ge=1, le=MAX_ROUNDS, description="model rounds of the turn")
    wait: bool = Field(False, description="reply when the turn has ended instead of once it is staged")


class FreeTimeRequest(ModeTurnRequest):
    """``turn.free_time``: open a free-time slice and run it; it commits its knowledge writes."""

    free_time: dict[str, Any] = Field(default_factory=dict, description="slice data shown in the opening")
    deadline_s: float | None = Field(None, gt=0, description="finalize with reason deadline after this")


class WakeupRequest(ModeTurnRequest):
    """``turn.wakeup``: open a wakeup session at ``wakeup_marker`` and run it."""

    wakeup_marker: str = Field(description="RFC 3339 date-time with an offset")
    platform: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[^.*> \t\r\n]+$",
                                 description="deliver the turn's replies on outbound.<platform>.<sid>")

    @field_validator("wakeup_marker")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        if not _RFC3339.match(value):
            raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2025-01-02T03:04:05Z")
        try:
            datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError as exc:
            raise ValueError(f"not a valid date-time: {exc}") from exc
        return value


class IngressRequest(TurnsRequest):
    """``turn.ingress`` (KS-16): ingest a terminated conversation's transcript into the knowledge store."""

    session_id: SessionId = Field(description="the source conversation")
    ingress_session_id: SessionId | None = Field(None, description="default: '<session_id>:ingress'")
    final_text: str | None = Field(None, min_length=1, max_length=65_536,
                                   description="terminate the source with this last message first (KS-5)")
    roots: list[NodeId] | None = Field(None, description="writable roots; default: the source's")
    reference_roots: list[NodeId] | None = Field(None, description="reference roots; default: the source's")
    instructions: str | None = Field(None, max_length=MAX_INSTRUCTIONS_CHARS)
    max_rounds: int | None = Field(None, ge=1, le=MAX_ROUNDS)
    wait: bool = False


class GroupContextRequest(TurnsRequest):
    """``session.group_context`` (KS-15): replace a group session's channel context."""

    session_id: SessionId
    context: dict[str, Any]
    current_message_id: str | None = Field(None, max_length=256)


class ObjectResolveRequest(TurnsRequest):
    """``object.resolve`` (KS-11): a pending history object or a canonical knowledge object."""

    session_id: SessionId
    object_id: str = Field(min_length=1, max_length=256)


class KnowledgeGetRequest(TurnsRequest):
    """``knowledge.get``: one committed node with its children's ids."""

    node_id: NodeId


class KnowledgeListRequest(TurnsRequest):
    """``knowledge.list``: committed children of ``parent_id``, or a search inside ``roots``."""

    parent_id: NodeId | None = None
    query: str | None = Field(None, min_length=1, max_length=1024)
    roots: list[NodeId] = Field(default_factory=list, description="search scope; default [parent_id]")
    limit: int = Field(50, ge=1, le=500)

    @model_validator(mode="after")
    def _scope(self) -> KnowledgeListRequest:
        if self.parent_id is None and not (self.query and self.roots):
            raise ValueError("give parent_id, or query with roots")
        return self


class AnswerLookupRequest(TurnsRequest):
    """``answer.lookup`` (KS-14): how the session answered one external event, from its journal."""

    session_id: SessionId
    external_event_id: str = Field(min_length=1, max_length=512, description="the platform's event id")


class AnswerReplyOut(BaseModel):
    """One reply of the answering turn, as delivered on the outbound subject (``seq`` as there)."""

    seq: int
    kind: str = Field(description="agent_message, reply or object")
    text: str | None = None
    object_id: str | None = None
    at: str | None = Field(None, description="when the reply was journaled (RFC 3339)")


class AnswerLookupOut(BaseModel):
    """Result of ``answer.lookup``: ``answered`` false (``turn_id`` null, no replies) when it was not."""

    answered: bool
    turn_id: str | None = None
    replies: list[AnswerReplyOut] = Field(default_factory=list)


TURNS_CONTROL_MODELS: dict[str, type[BaseModel]] = {
    "session.interrupt": InterruptRequest,
    "session.group_context": GroupContextRequest,
    "turn.retry": RetryRequest,
    "turn.free_time": FreeTimeRequest,
    "turn.wakeup": WakeupRequest,
    "turn.ingress": IngressRequest,
    "object.resolve": ObjectResolveRequest,
    "knowledge.get": KnowledgeGetRequest,
    "knowledge.list": KnowledgeListRequest,
    "answer.lookup": AnswerLookupRequest,
}
