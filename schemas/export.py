"""Export the JSON Schema of every wire model and the AsyncAPI document: ``python -m schemas.export docs/schemas``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, get_args, get_origin

import orjson
from pydantic import BaseModel

from schemas.wire import (
    Checkpoint,
    ControlError,
    DeadLetter,
    ErrorBody,
    Event,
    InboundMessage,
    OutboundReply,
    Page,
    StreamChunk,
)

WIRE_MODELS: dict[str, type[BaseModel]] = {
    "inbound": InboundMessage,
    "outbound": OutboundReply,
    "stream_chunk": StreamChunk,
    "event": Event,
    "checkpoint": Checkpoint,
    "dead_letter": DeadLetter,
    "error": ErrorBody,
    "control_error": ControlError,
}


def json_schemas() -> dict[str, dict[str, object]]:
    """Name → JSON Schema for every wire model and every control request (``api.<resource>.<verb>``)."""
    from schemas.control import CONTROL_REQUESTS
    from schemas.time_travel import TIME_TRAVEL_MODELS
    from schemas.turns_control import TURNS_CONTROL_MODELS

    schemas = {name: model.model_json_schema() for name, model in WIRE_MODELS.items()}
    for op, model in {**CONTROL_REQUESTS, **TURNS_CONTROL_MODELS, **TIME_TRAVEL_MODELS}.items():
        schemas[f"api.{op}"] = model.model_json_schema()
    return schemas


def event_schemas() -> dict[str, dict[str, object]]:
    """``event.<type>`` → JSON Schema of that event with its typed ``data``."""
    from schemas.events import EVENT_DATA, typed_event

    return {f"event.{t}": typed_event(t).model_json_schema() for t in EVENT_DATA}


def all_documents() -> dict[str, dict[str, object]]:
    """Everything ``make schemas`` writes: the JSON Schemas (wire models, control requests and
    results, typed events, the snapshot) and ``asyncapi`` (the AsyncAPI 3.0 document).

    The operation list comes from the service's own declarations (``consumers.catalog``) and
    the snapshot model from the core, so this needs the whole project installed."""
    from pydantic import TypeAdapter

    from consumers.catalog import operation_specs
    from core.engine.snapshot import Snapshot
    from schemas.asyncapi import ApiOperation, build

    documents = {**json_schemas(), **event_schemas()}
    documents["snapshot"] = Snapshot.model_json_schema()
    checkpoint = documents["checkpoint"]
    properties = checkpoint.get("properties")
    if isinstance(properties, dict):  # the checkpoint's snapshot is the KS-20 value: point at its schema
        properties["snapshot"] = {"$ref": "snapshot.json", "description": "the complete KS-20 value"}
    specs = operation_specs()
    for spec in specs:
        # A list operation's `result` is the page's items (its `next_cursor` stands beside `result`).
        items: Any = list[get_args(spec.result)[0]] if get_origin(spec.result) is Page else spec.result  # type: ignore[misc]
        documents[f"api.{spec.name}.result"] = TypeAdapter(items).json_schema()
    operations = [ApiOperation(s.name, s.summary, s.request, s.result) for s in specs]
    documents["asyncapi"] = build(operations, snapshot=Snapshot)
    return documents


def render(document: dict[str, object]) -> bytes:
    """One exported file's bytes (indented, keys sorted, so a diff shows what changed)."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "docs/schemas")
    out.mkdir(parents=True, exist_ok=True)
    documents = all_documents()
    for name, document in documents.items():
        (out / f"{name}.json").write_bytes(render(document))
    print(f"wrote {len(documents)} documents (JSON Schemas and asyncapi.json) to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
