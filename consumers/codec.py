"""Decode and validate a raw inbound message; bad input becomes an ErrorBody, never an exception."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from schemas.subjects import parse_inbound_subject
from schemas.tokens import decode_sid
from schemas.wire import ErrorBody, InboundMessage


def decode_inbound(prefix: str, subject: str, raw: bytes, max_bytes: int) -> InboundMessage | ErrorBody:
    """Validate size, JSON, schema, and that the subject matches the body's platform and session."""
    if len(raw) > max_bytes:
        return ErrorBody(code="too_large", message=f"payload is {len(raw)} bytes; the limit is {max_bytes}")
    try:
        platform, token = parse_inbound_subject(prefix, subject)
        sid = decode_sid(token)
    except ValueError as exc:
        return ErrorBody(code="bad_subject", message=str(exc))
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return ErrorBody(code="bad_json", message=f"payload is not JSON: {exc}")
    try:
        msg = InboundMessage.model_validate(data)
    except ValidationError as exc:
        return ErrorBody(code="invalid", message=_summarise(exc))
    if msg.platform != platform:
        return ErrorBody(
            code="subject_mismatch", message=f"subject platform {platform!r} != body platform {msg.platform!r}"
        )
    if msg.session_id != sid:
        return ErrorBody(
            code="subject_mismatch", message=f"subject session {sid!r} != body session_id {msg.session_id!r}"
        )
    if msg.session_id is None:
        return ErrorBody(
            code="no_session",
            message="inbound messages need a session_id (protocol v1 answers only session-bound messages)",
        )
    return msg


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
