"""The AsyncAPI 3.0 document of protocol v1, generated from the pydantic models.

Every channel is here: inbound, outbound, checkpoint, events (one message per event type),
both dead-letter subjects and one channel per control operation (request → ``{ok, result}``
or ``{ok: false, error}``). Payload schemas are the models' JSON Schemas with their
definitions hoisted into ``components.schemas``. The operation list and the snapshot model
are passed in (``consumers.catalog`` and ``core.engine.snapshot``), so this module depends
on ``schemas`` only; ``python -m schemas.export`` writes the result to ``docs/schemas/asyncapi.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, create_model

from schemas.events import EVENT_DATA, typed_event
from schemas.wire import (
    Checkpoint,
    ControlError,
    ControlOk,
    ControlPageOk,
    DeadLetter,
    InboundMessage,
    OutboundReply,
    Page,
)

ASYNCAPI_VERSION = "3.0.0"
PROTOCOL_VERSION = "1"
REF = "#/components/schemas/{model}"
Action = Literal["send", "receive"]


@dataclass(frozen=True)
class ApiOperation:
    """What the document needs to know about one control operation."""

    name: str
    summary: str
    request: type[BaseModel]
    result: Any


@dataclass(frozen=True)
class _Message:
    key: str
    name: str
    summary: str
    payload: Any  # a type TypeAdapter accepts


@dataclass(frozen=True)
class _Channel:
    key: str
    address: str | None
    description: str
    action: Action
    messages: tuple[_Message, ...]
    reply_to: str | None = None  # key of the reply channel (control API)
    reply_messages: tuple[_Message, ...] = ()


_PARAMS = {
    "prefix": {"default": "turnstile", "description": "TURNSTILE_PREFIX: letters, digits, '_' and '-'"},
    "platform": {"description": "platform name: at least one character, none of '.', '*', '>', space, tab, CR, LF"},
    "sid": {"description": "session-id token (schemas.tokens.encode_sid): letters, digits and -_:@+= stay, "
                           "every other UTF-8 byte becomes ~XX; '_' alone means no session"},
    "type": {"description": "event type", "enum": sorted(EVENT_DATA)},
}


def _params(address: str) -> dict[str, Any]:
    return {name: spec for name, spec in _PARAMS.items() if "{" + name + "}" in address}


def checkpoint_model(snapshot: type[BaseModel] | None) -> type[BaseModel]:
    """The checkpoint message with ``snapshot`` typed as ``snapshot`` (the KS-20 value) when given."""
    if snapshot is None:
        return Checkpoint
    model: type[BaseModel] = create_model(
        "CheckpointMessage", __base__=Checkpoint, __doc__=Checkpoint.__doc__, snapshot=(snapshot, ...)
    )
    return model


def _key(op_name: str) -> str:
    return op_name.replace(".", "_")


def _reply_payload(op: ApiOperation) -> Any:
    if get_origin(op.result) is Page:  # a list operation: {ok, result: [items], next_cursor}
        (item,) = get_args(op.result)
        page: Any = ControlPageOk[item]  # type: ignore[valid-type]
        return page | ControlError
    ok: Any = ControlOk[op.result]  # type: ignore[name-defined]
    return ok | ControlError


def _channels(operations: Sequence[ApiOperation], snapshot: type[BaseModel] | None) -> list[_Channel]:
    channels = [
        _Channel("inbound", "{prefix}.inbound.{platform}.{sid}",
                 "Platform adapters publish chat messages (JetStream publish, header Nats-Msg-Id = message id).",
                 "receive", (_Message("inbound", "InboundMessage", "a chat message", InboundMessage),)),
        _Channel("outbound", "{prefix}.outbound.{platform}.{sid}",
                 "Replies to deliver (stream <PREFIX>_OUTBOUND; Nats-Msg-Id <session_id>:<turn_id>:<seq>).",
                 "send", (_Message("outbound", "OutboundReply", "one output of a turn", OutboundReply),)),
        _Channel("checkpoint", "{prefix}.checkpoint.{sid}",
                 "A complete snapshot after every durable step (stream <PREFIX>_CHECKPOINTS; the last one restores).",
                 "send", (_Message("checkpoint", "Checkpoint", "a complete snapshot", checkpoint_model(snapshot)),)),
        _Channel("events", "{prefix}.events.{sid}.{type}",
                 "Session, turn, message and service events (stream <PREFIX>_EVENTS; Nats-Msg-Id unique per event).",
                 "send",
                 tuple(_Message(_key(t), t, EVENT_DATA[t].__doc__ or t, typed_event(t)) for t in EVENT_DATA)),
        _Channel("dlq_inbound", "{prefix}.dlq.inbound", "Rejected inbound input and why (stream <PREFIX>_DLQ).",
                 "send", (_Message("dlq_inbound", "DeadLetter", "a rejected inbound message", DeadLetter),)),
        _Channel("dlq_turn", "{prefix}.dlq.turn", "A message given up after its turn kept failing.",
                 "send", (_Message("dlq_turn", "DeadLetter", "a message given up", DeadLetter),)),
    ]
    replies = tuple(
        _Message(f"{_key(op.name)}_reply", f"{op.name} reply", f"reply of {op.name}", _reply_payload(op))
        for op in operations
    )
    channels.append(_Channel("api_reply", None, "The requester's inbox (NATS request/reply).", "send", replies))
    for op, reply in zip(operations, replies, strict=True):
        request = _Message(f"{_key(op.name)}_request", f"{op.name} request", op.summary, op.request)
        channels.append(_Channel(f"api_{_key(op.name)}", "{prefix}.api." + op.name, op.summary, "receive",
                                 (request,), reply_to="api_reply", reply_messages=(reply,)))
    return channels


def build(operations: Sequence[ApiOperation], *, snapshot: type[BaseModel] | None = None,
          version: str = PROTOCOL_VERSION) -> dict[str, Any]:
    """The AsyncAPI 3.0 document (a JSON-ready dict)."""
    channels = _channels(operations, snapshot)
    unique = {m.key: m for c in channels for m in c.messages}
    keys = list(unique)
    refs, defs = TypeAdapter.json_schemas(
        [(k, "validation", TypeAdapter(unique[k].payload)) for k in keys], ref_template=REF
    )
    messages = {
        k: {"name": unique[k].name, "summary": unique[k].summary, "contentType": "application/json",
            "payload": refs[(k, "validation")]}
        for k in keys
    }
    doc_channels: dict[str, Any] = {}
    doc_operations: dict[str, Any] = {}
    for c in channels:
        channel: dict[str, Any] = {
            "address": c.address, "description": c.description,
            "messages": {m.key: {"$ref": f"#/components/messages/{m.key}"} for m in c.messages},
        }
        if c.address and _params(c.address):
            channel["parameters"] = _params(c.address)
        doc_channels[c.key] = channel
        if c.key == "api_reply":
            continue  # its messages are sent only as replies of the api_* operations
        operation: dict[str, Any] = {
            "action": c.action, "channel": {"$ref": f"#/channels/{c.key}"}, "summary": c.description,
            "messages": [{"$ref": f"#/channels/{c.key}/messages/{m.key}"} for m in c.messages],
        }
        if c.reply_to is not None:
            operation["reply"] = {
                "channel": {"$ref": f"#/channels/{c.reply_to}"},
                "messages": [{"$ref": f"#/channels/{c.reply_to}/messages/{m.key}"} for m in c.reply_messages],
            }
        doc_operations[c.key] = operation
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "turnstile",
            "version": version,
            "description": "Chat-agent sessions on NATS JetStream: wire protocol v1 (docs/protocol.md).",
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {"host": "127.0.0.1:4333", "protocol": "nats", "description": "`make run` (TURNSTILE_NATS_URL)"}
        },
        "channels": doc_channels,
        "operations": doc_operations,
        "components": {"schemas": defs.get("$defs", {}), "messages": messages},
    }


