"""Export the JSON Schema of every wire model: ``python -m schemas.export docs/schemas``."""

from __future__ import annotations

import sys
from pathlib import Path

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
    from schemas.turns_control import TURNS_CONTROL_MODELS

    schemas = {name: model.model_json_schema() for name, model in WIRE_MODELS.items()}
    for op, model in {**CONTROL_REQUESTS, **TURNS_CONTROL_MODELS}.items():
        schemas[f"api.{op}"] = model.model_json_schema()
    return schemas


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "docs/schemas")
    out.mkdir(parents=True, exist_ok=True)
    schemas = json_schemas()
    try:  # the KS-20 snapshot model lives in the core; clients of schemas/ do not need it
        from core.engine.snapshot import Snapshot

        schemas["snapshot"] = Snapshot.model_json_schema()
    except ImportError:
        pass
    for name, schema in schemas.items():
        (out / f"{name}.json").write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    print(f"wrote {len(schemas)} schemas to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
