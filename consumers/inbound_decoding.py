"""Decode and validate a raw inbound message; bad input becomes an ErrorBody, never an exception."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from core.engine.attachments import check_inbound_attachment
from core.errors import TurnstileError
from schemas.subjects import parse_inbound_subject
from schemas.tokens import decode_sid
from schemas.wire import ErrorBody, InboundMessage


def decode_inbound(
    prefix: str, subject: str, raw: bytes, max_bytes: int, max_attachment_bytes: int | None = None
) -> InboundMessage | ErrorBody:
    """Validate size, JSON, schema, attachments, and that the subject matches the body's platform and session.

    ``max_attachment_bytes`` bounds each attachment's inline bytes (default: ``max_bytes``).
    """
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
        if all(err["loc"][:1] == ("attachments",) for err in exc.errors()):
            return ErrorBody(code="invalid_attachment", message=_summarise(exc))
        return ErrorBody(code="invalid", message=_summarise(exc))
    bad_attachment = _check_attachments(msg, max_bytes if max_attachment_bytes is None else max_attachment_bytes)
    if bad_attachment is not None:
        return bad_attachment
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


def _check_attachments(msg: InboundMessage, max_attachment_bytes: int) -> ErrorBody | None:
    """The attachment rules of ``core.engine.attachments``, before anything is filed or staged."""
    for i, attachment in enumerate(msg.attachments):
        try:
            check_inbound_attachment(attachment.file_name, attachment.data_base64, max_attachment_bytes)
        except TurnstileError as exc:
            return ErrorBody(code="invalid_attachment", message=f"attachments.{i}: {exc.message}")
    return None


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
