"""The per-inbound-message publish shape of turnstile, measured from its own streams.

For each output stream the shape is (publishes per inbound message, stored
bytes per message). Counts come from the streams' last sequence numbers (every
publish ever, even those the checkpoint stream's per-subject limit discarded);
sizes from bytes kept / messages kept. Baseline A is fed these numbers, so it
does the same JetStream work as the service as the service changes.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import StreamState

OUTPUT_STREAMS = ("checkpoint", "events", "outbound")
# nats-server file store: a record is 22 bytes of header + subject + message + 8 bytes of hash,
# plus 4 bytes and the header block when headers are present.
STORE_RECORD_OVERHEAD = 30
STORE_HEADER_OVERHEAD = 4


@dataclass(frozen=True)
class StreamShape:
    """One stream's share of the work per inbound message."""

    per_msg: float
    stored_bytes_per_msg: float


@dataclass(frozen=True)
class PublishShape:
    """Publishes per inbound message and their stored sizes, per output stream."""

    inbound: int
    streams: dict[str, StreamShape]

    def as_dict(self) -> dict[str, Any]:
        return {"inbound": self.inbound, "streams": {k: asdict(v) for k, v in self.streams.items()}}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PublishShape:
        return PublishShape(int(d["inbound"]), {k: StreamShape(**v) for k, v in d["streams"].items()})

    @property
    def publishes_per_msg(self) -> float:
        return sum(s.per_msg for s in self.streams.values())


def measure_shape(
    before: dict[str, StreamState],
    after: dict[str, StreamState],
    checkpoint_seen: tuple[int, int] | None = None,
) -> PublishShape:
    """The shape of the work done between two stream-state snapshots of one prefix.

    ``checkpoint_seen`` = (records, stored bytes) counted over the same
    window; it replaces the kept-bytes mean, which the per-subject limit biases upwards.
    """
    inbound = after["inbound"].last_seq - before["inbound"].last_seq
    streams: dict[str, StreamShape] = {}
    for key in OUTPUT_STREAMS:
        published = after[key].last_seq - before[key].last_seq
        kept = after[key].messages
        stored = after[key].bytes / kept if kept else 0.0
        if key == "checkpoint" and checkpoint_seen and checkpoint_seen[0]:
            stored = checkpoint_seen[1] / checkpoint_seen[0]
        streams[key] = StreamShape(per_msg=published / inbound if inbound else 0.0, stored_bytes_per_msg=stored)
    return PublishShape(inbound, streams)


def payload_size(stored_bytes_per_msg: float, subject: str, header_bytes: int) -> int:
    """Payload length that makes a record of this subject and headers store as many bytes."""
    overhead = STORE_RECORD_OVERHEAD + len(subject) + (header_bytes + STORE_HEADER_OVERHEAD if header_bytes else 0)
    return max(2, round(stored_bytes_per_msg - overhead))


class EventIds:
    """Each event's ``Nats-Msg-Id`` as turnstile's publisher makes it (a random id and a count), so baseline A
    and the floor publish the same header and the events stream does the same de-duplication."""

    def __init__(self) -> None:
        self._prefix = f"{uuid.uuid4().hex[:16]}-"
        self._n = 0
        # ``NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n`` with a 6-digit count: what a payload gives up to it
        self.header_bytes = len(f"NATS/1.0\r\nNats-Msg-Id: {self._prefix}100000\r\n\r\n")

    def headers(self) -> dict[str, str]:
        self._n += 1
        return {"Nats-Msg-Id": f"{self._prefix}{self._n}"}


class Spreader:
    """Turns a fractional rate (e.g. 2.4 publishes per message) into whole counts with the same total."""

    def __init__(self, per_msg: float) -> None:
        self.per_msg = per_msg
        self._owed = 0.0

    def take(self) -> int:
        self._owed += self.per_msg
        whole = int(self._owed + 1e-9)
        self._owed -= whole
        return whole
