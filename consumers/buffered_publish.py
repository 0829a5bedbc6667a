"""Publishing into nats-py's outgoing buffer with the protocol line built in one step.

``Client.publish`` validates the subject and the reply with a regex each, encodes a
header dict key by key (a regex per key), formats the command with an f-string and two
concatenations, and then appends it to the connection's pending buffer and kicks the
flusher. The hot path publishes about ten times per inbound message to subjects built
by ``schemas.subjects`` and replies built by ``consumers.publisher.StreamAcks`` (its inbox
was validated once, when subscribed), with one of two headers. ``BufferedPublish``
writes the same bytes (``PUB``/``HPUB`` exactly as nats-py's ``pub_cmd``/``hpub_cmd``,
headers as its ``_send_publish`` encodes them: key stripped and checked, value stripped
with CR/LF made spaces) with one subject check (the one nats-py makes: not empty, no
whitespace) and one ``%`` format, through nats-py's own ``_send_command`` and flusher,
with ``publish``'s checks and errors (closed, draining, buffer limit while
reconnecting, max payload).

A payload may also be given in pieces (a tuple of bytes: a checkpoint is its envelope spliced
around the encoded snapshot). Its pieces go into the pending buffer as they are, after the
protocol line and before the closing CRLF, all at once: a checkpoint of a long session (hundreds
of kB, twice a turn) is not copied whole into one payload and again into one command before
the flusher's own join.

Leans on nats-py internals (``_status``, ``_max_payload``, ``_max_pending_size``, ``_pending``,
``_pending_data_size``, ``_send_command``, ``_flush_queue``, ``_flush_pending``, ``stats``):
tests/integration/test_buffered_publish.py fails if they change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nats import errors
from nats.aio.client import Client

__all__ = ["BufferedPublish", "Payload", "header_block", "payload_size", "subject_bytes"]

# A message body: bytes, or its pieces in order (published without joining them).
Payload = bytes | tuple[bytes, ...]
_CRLF = b"\r\n"

_SUBJECT_INVALID = re.compile(r"[ \t\r\n]")  # nats-py's _SUBJECT_INVALID_RE (the publish path's check)
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py's _HEADER_KEY_RE
_HEADER_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_HEADER_LINE = b"NATS/1.0\r\n"
_KEY_LINES: dict[str, bytes] = {}  # header name -> b"Name: " (names are few and fixed)


def subject_bytes(subject: str) -> bytes:
    """``subject`` encoded; nats-py's BadSubjectError when it is empty or holds whitespace."""
    if not subject or _SUBJECT_INVALID.search(subject):
        raise errors.BadSubjectError
    return subject.encode()


def payload_size(payload: Payload) -> int:
    """The body's length in bytes, pieces summed."""
    return len(payload) if isinstance(payload, bytes) else sum(map(len, payload))


def header_block(headers: Mapping[str, str]) -> bytes:
    """The header block nats-py's ``publish`` sends for ``headers`` (BadHeaderError on a bad name)."""
    parts = [_HEADER_LINE]
    for name, value in headers.items():
        key_line = _KEY_LINES.get(name)
        if key_line is None:
            key = name.strip()
            if not key:
                continue  # nats-py skips empty names
            if not _HEADER_KEY.fullmatch(key):
                raise errors.BadHeaderError(key)
            key_line = _KEY_LINES[name] = key.encode() + b": "
        parts += (key_line, value.strip().translate(_HEADER_VALUE_NEWLINES).encode(), b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class BufferedPublish:
    """``Client.publish`` for an encoded subject, reply and header block."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc

    async def publish(self, subject: bytes, payload: Payload, reply: bytes = b"", header: bytes | None = None) -> None:
        nc = self._nc
        size = payload_size(payload)
        if nc._status != Client.CONNECTED:
            self._check_not_connected(size)
        if size > nc._max_payload:
            raise errors.MaxPayloadError
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += size
        if header is None:
            line = b"PUB %b %b %d\r\n" % (subject, reply, size)
        else:
            line = b"HPUB %b %b %d %d\r\n%b" % (subject, reply, len(header), len(header) + size, header)
        if isinstance(payload, bytes):
            await nc._send_command(b"%b%b\r\n" % (line, payload))
        else:
            # One extend, no await between the pieces: nothing else can enter the buffer among them.
            nc._pending.extend((line, *payload, _CRLF))
            nc._pending_data_size += len(line) + size + 2
            if nc._max_pending_size > 0 and nc._pending_data_size > nc._max_pending_size:
                await nc._flush_pending(force_flush=True)  # as ``_send_command`` does
        flush_queue = nc._flush_queue
        if flush_queue is not None and flush_queue.empty():
            await nc._flush_pending()

    def _check_not_connected(self, size: int) -> None:
        """``publish``'s refusals while not connected (closed, draining, reconnect buffer full)."""
        nc = self._nc
        if nc.is_closed:
            raise errors.ConnectionClosedError
        if nc.is_draining_pubs:
            raise errors.ConnectionDrainingError
        if not nc.is_connected and (nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size):
            raise errors.OutboundBufferLimitError
