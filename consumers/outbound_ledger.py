"""What the outbound stream already holds of a turn's replies: the authority before any republish.

``Nats-Msg-Id`` deduplicates only inside the stream's duplicate window, so a reply sent again
after a long downtime would be stored twice. Before sending a reply again (recovery after a
restart, the finisher's retry, a replayed event) the runner reads the session's outbound
subject forward from shortly before the answer was journaled and keeps the ``seq``s whose
``Nats-Msg-Id`` is ``<sid>:<turn_id>:<seq>``. One stream read per stored reply, only on these
paths; a first delivery never reads. Replies older than the stream's max age are gone from it
and cannot be seen (docs/protocol.md#exactly-once-replies).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import orjson
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from core.errors import Unavailable

# The answer's journal time is the service's clock; stored messages carry the broker's. Reading
# from this much earlier tolerates that much clock difference between the two hosts.
CLOCK_MARGIN_S = 60.0
MSG_ID_HEADER = "Nats-Msg-Id"


def reply_msg_id(session_id: str, turn_id: str, seq: int) -> str:
    """The ``Nats-Msg-Id`` of a reply (also what ``Publisher.outbound`` sets)."""
    return f"{session_id}:{turn_id}:{seq}"


async def stored_reply_seqs(
    js: JetStreamContext, stream: str, subject: str, session_id: str, turn_id: str, since: str | None
) -> set[int]:
    """The ``seq``s of ``turn_id``'s replies stored on ``subject``.

    ``since``: RFC 3339 time the answer was journaled (read from ``CLOCK_MARGIN_S`` before it);
    None reads the subject from the stream's start.
    """
    prefix = reply_msg_id(session_id, turn_id, 0)[:-1]
    request: dict[str, object] = {"next_by_subj": subject}
    start = _start_time(since)
    if start is not None:
        request["start_time"] = start
    else:
        request["seq"] = 1
    found: set[int] = set()
    while True:
        try:
            seq, msg_id = await _get(js, stream, request)
        except NotFoundError:
            return found
        except Exception as exc:  # unreadable now: the caller retries rather than publish blindly
            raise Unavailable(f"outbound stream {stream} not readable: {exc!r}") from exc
        if msg_id.startswith(prefix) and msg_id[len(prefix):].isdigit():
            found.add(int(msg_id[len(prefix):]))
        request = {"seq": seq + 1, "next_by_subj": subject}


def _start_time(since: str | None) -> str | None:
    if not since:
        return None
    try:
        moment = datetime.fromisoformat(since)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    start = moment.astimezone(UTC) - timedelta(seconds=CLOCK_MARGIN_S)
    return start.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def _get(js: JetStreamContext, stream: str, request: dict[str, object]) -> tuple[int, str]:
    """One ``STREAM.MSG.GET`` (nats-py's ``get_msg`` cannot send ``start_time``): (stream seq, msg id)."""
    reply = await js._api_request(  # the typed get_msg lacks start_time
        f"{js._prefix}.STREAM.MSG.GET.{stream}", orjson.dumps(request), timeout=js._timeout
    )
    message = RawStreamMsg.from_response(reply["message"])
    headers = _headers(message.hdrs)
    return int(message.seq or 0), headers.get(MSG_ID_HEADER, "")


def _headers(encoded: str | None) -> dict[str, str]:
    if not encoded:
        return {}
    lines = base64.b64decode(encoded).decode("utf-8", errors="replace").split("\r\n")[1:]
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip()] = value.strip()
    return headers
