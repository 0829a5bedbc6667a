"""Wire models of protocol v1: what clients publish and what they receive."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.tokens import check_session_id_size

T = TypeVar("T")
_CONTROL = re.compile(r"[\x00-\x1f]")  # control characters (below U+0020), searched at C speed


class WireModel(BaseModel):
    """Base of every wire model: unknown fields are refused, so typos surface as errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ChatScope(WireModel):
    """The chat window a message came from, as the platform adapter declares it."""

    type: str = Field(min_length=1, max_length=64, description="platform chat type name, e.g. group, private")
    target_id: str = Field(max_length=256, description="group id for multi-party chats, peer account otherwise")
    multi_party: bool
    declared_one_to_one: bool = Field(False, description="the adapter explicitly declared this window one-to-one")
    name: str | None = Field(None, max_length=256, description="group name or peer nickname")


class Sender(WireModel):
    """Who sent the message."""

    user_id: str = Field(max_length=256)
    name: str | None = Field(None, max_length=256)


class Attachment(WireModel):
    """An attachment: a reference (``url``) and/or small inline bytes (``data_base64``, within the size limit)."""

    id: str | None = Field(None, max_length=256, description="stable object id; generated when absent")
    file_name: str = Field(min_length=1, max_length=255)
    media_type: str = Field("application/octet-stream", max_length=128)
    url: str | None = Field(None, max_length=4096)
    size_bytes: int | None = Field(None, ge=0)
    data_base64: str | None = Field(None, description="inline bytes, base64")


class InboundMessage(WireModel):
    """A chat message published by a platform adapter on ``<prefix>.inbound.<platform>.<sid-token>``."""

    id: str = Field(min_length=1, max_length=256, description="unique message id; also use it as Nats-Msg-Id")
    session_id: str | None = Field(None, min_length=1, max_length=512)
    platform: str = Field(min_length=1, max_length=64, pattern=r"^[^.*> \t\r\n]+$")
    text: str = Field(max_length=65_536)
    instance: str | None = Field(None, max_length=256, description="adapter instance id")
    self_id: str | None = Field(None, max_length=256, description="the bot account that received it")
    chat: ChatScope | None = None
    sender: Sender | None = None
    source: str | None = Field(None, max_length=256, description="set for non-native (forwarded/system) input")
    external_event_id: str | None = Field(None, max_length=256)
    attachments: list[Attachment] = Field(default_factory=list, max_length=32)
    sent_at: float | None = Field(None, description="epoch seconds at the platform")

    @field_validator("session_id")
    @classmethod
    def _no_control_chars(cls, value: str | None) -> str | None:
        if value is not None and _CONTROL.search(value) is not None:
            raise ValueError("session_id must not contain control characters")
        return value if value is None else check_session_id_size(value)


class OutboundReply(WireModel):
    """A reply to deliver, published on ``<prefix>.outbound.<platform>.<sid-token>``.

    ``Nats-Msg-Id`` is ``<session_id>:<turn_id>:<seq>``, so a resumed turn cannot
    publish the same reply twice inside the stream's duplicate window.
    """

    session_id: str
    generation: int
    turn_id: str
    seq: int
    reply_to: str = Field(description="the inbound message id this answers")
    external_event_id: str | None = None
    text: str
    objects: list[dict[str, Any]] = Field(default_factory=list)


class StreamChunk(WireModel):
    """Ephemeral progress of a turn on ``<prefix>.stream.<platform>.<sid-token>`` (core NATS: not
    stored, not replayed, may be missed). The outbound reply stays the only durable answer.

    ``typing`` (``seq`` 0) when a turn starts or resumes; then ``text`` chunks while the model
    writes, ``seq`` 1, 2, … in order. ``delta`` extends the text of the same ``round`` shown so
    far; ``reset`` means start that text again from ``delta`` (the first text after typing, a new
    model round, or an attempt retried after the provider failed midway). ``text_chars`` is the length of the round's text
    with this chunk, so a client that missed a chunk can tell (``seq`` too).
    """

    type: Literal["typing", "text"]
    session_id: str
    generation: int
    turn_id: str
    seq: int = Field(ge=0, description="running number of this turn's chunks since its typing signal")
    round: int = Field(ge=1, description="model round of the turn the text belongs to")
    delta: str = ""
    reset: bool = Field(False, description="discard the text shown for the turn; this delta starts it again")
    text_chars: int = Field(0, ge=0, description="length of the round's text once this delta is added")


EventType = Literal[
    "session.created",
    "session.updated",
    "session.completed",
    "session.deleted",
    "turn.started",
    "turn.ended",
    "message.dropped",
    "usage",
    "service.degraded",
    "service.recovered",
]


class Event(WireModel):
    """A session, turn or message event on ``<prefix>.events.<sid-token>.<type>``."""

    type: str
    session_id: str | None
    at: float = Field(description="epoch seconds when the event was emitted")
    data: dict[str, Any] = Field(default_factory=dict)


class Checkpoint(WireModel):
    """A complete snapshot published on ``<prefix>.checkpoint.<sid-token>`` after a durable step.

    ``snapshot`` is the KS-20 value (see ``docs/schemas/snapshot.json``); the last
    checkpoint of a subject restores the session.
    """

    session_id: str
    generation: int
    format_version: int
    state_version: int
    transition: str = Field(description="which durable step produced it, e.g. message_staged, turn_ended")
    inbound_id: str | None = Field(None, description="inbound message the running turn serves")
    at: float
    snapshot: dict[str, Any]


class ErrorBody(WireModel):
    """A refusal: a stable machine code and a human message."""

    code: str
    message: str


class DeadLetter(WireModel):
    """What lands on the dead-letter stream: the error, a bounded prefix of the raw input (as text),
    and what identifies the whole original: its size, sha256 and stream sequence."""

    error: ErrorBody
    subject: str
    raw: str = Field(
        description="the first raw bytes (at most TURNSTILE_DLQ_RAW_MAX_BYTES, fewer when the letter would "
        "not fit under the server's max_payload), UTF-8 decoded with replacement"
    )
    raw_size_bytes: int | None = Field(None, ge=0, description="size of the whole raw payload")
    raw_truncated: bool = Field(False, description="raw holds only a prefix of the payload")
    raw_sha256: str | None = Field(None, description="sha256 (hex) of the whole raw payload")
    stream_seq: int | None = Field(
        None, description="sequence of the original in its stream (the inbound stream for dlq.inbound)"
    )
    headers: dict[str, str] = Field(default_factory=dict)
    session_id: str | None = Field(None, description="the session of a message given up after its turn kept failing")
    at: float


class ControlOk(WireModel, Generic[T]):
    """A successful control reply."""

    ok: Literal[True] = True
    result: T


class ControlPageOk(WireModel, Generic[T]):
    """A successful reply of a list operation: one page of items, and the cursor of the next page
    (``null`` on the last page; pass it back unchanged as ``cursor``)."""

    ok: Literal[True] = True
    result: list[T]
    next_cursor: str | None = None


@dataclass(frozen=True)
class Page(Generic[T]):
    """What a list operation returns: one page, sent as ``ControlPageOk``."""

    items: list[T]
    next_cursor: str | None


class ControlError(WireModel):
    """A refused control request."""

    ok: Literal[False] = False
    error: ErrorBody
