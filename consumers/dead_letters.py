"""Build a dead letter that always fits under the broker's max_payload.

A rejected payload can be as large as the server accepts, and JSON escaping makes
its text larger still (a NUL byte becomes ``\\u0000``, a stray high byte a 3-byte
U+FFFD). A letter that does not fit cannot be published, and a message that cannot
be dead-lettered is eventually abandoned. So a letter keeps only a prefix of the raw
bytes plus their size, their sha256 and the original's stream sequence: the
original stays in its stream, where an operator fetches it by that sequence.
"""

from __future__ import annotations

import hashlib
import time

import orjson

from schemas.wire import DeadLetter, ErrorBody

MAX_ERROR_MESSAGE_CHARS = 2048
# The subject, the Turnstile-Error-Code header and the protocol line travel outside the JSON body.
ENVELOPE_RESERVE_BYTES = 1024


def dead_letter_payload(
    *,
    subject: str,
    raw: bytes,
    headers: dict[str, str] | None,
    code: str,
    message: str,
    stream_seq: int | None,
    raw_max_bytes: int,
    session_id: str | None = None,
    max_payload_bytes: int,
    at: float | None = None,
) -> bytes:
    """The JSON of a ``DeadLetter`` for ``raw``, at most ``max_payload_bytes - ENVELOPE_RESERVE_BYTES`` long.

    Keeps the first ``raw_max_bytes`` of ``raw`` (fewer when their escaped text would
    not fit); drops the copied headers only when even an empty prefix does not fit.
    """
    budget = max(max_payload_bytes - ENVELOPE_RESERVE_BYTES, 0)
    if len(message) > MAX_ERROR_MESSAGE_CHARS:
        message = message[:MAX_ERROR_MESSAGE_CHARS] + "…"
    sha256 = hashlib.sha256(raw).hexdigest()
    kept_headers = dict(headers or {})
    keep = min(len(raw), raw_max_bytes)
    when = time.time() if at is None else at
    attempts = 0
    while True:
        attempts += 1
        letter = DeadLetter(
            error=ErrorBody(code=code, message=message),
            subject=subject,
            raw=raw[:keep].decode("utf-8", errors="replace"),
            raw_size_bytes=len(raw),
            raw_truncated=keep < len(raw),
            raw_sha256=sha256,
            stream_seq=stream_seq,
            headers=kept_headers,
            session_id=session_id,
            at=when,
        )
        payload = orjson.dumps(letter.model_dump())
        if len(payload) <= budget:
            return payload
        if keep > 0:
            # Shrink in proportion to the overshoot (escaping is roughly uniform), at least by one byte.
            keep = max(min(keep - 1, keep * budget // len(payload)), 0)
            if attempts > 4:  # a large fixed part (headers): stop creeping
                keep //= 2
        elif kept_headers:
            kept_headers = {}
        else:
            return payload  # only the subject and error remain: both bounded far below any max_payload
