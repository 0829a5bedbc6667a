"""The partitioned session space: which partition a session is in, and how many each process takes.

With ``TURNSTILE_PARTITIONS`` = N > 1 the inbound stream carries a subject transform,
``<prefix>.inbound.<platform>.<sid-token>`` → ``<prefix>.inpart.<p>.<platform>.<sid-token>``
with ``p = {{partition(N, 2)}}`` (NATS's own deterministic FNV-1a hash of the session token),
so publishers keep today's subjects. Each partition has its own durable pull consumer
(``<consumer_name>-p<p>``) filtered on its stored subjects; a partition is consumed by the one
process that holds its ownership lease (``consumers/ownership.py``). ``partition_of`` computes
the same hash in Python (a test checks it against the server) so staged inbox rows, actors and
control requests are mapped to partitions without asking the broker.

Everything here is pure (no I/O).
"""

from __future__ import annotations

import math

from schemas.subjects import Subjects
from schemas.tokens import encode_sid

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619
# The partition that also consumes malformed inbound subjects (stored untransformed) to dead-letter them.
CATCH_ALL_PARTITION = 0


def fnv1a_32(data: bytes) -> int:
    h = FNV32_OFFSET
    for byte in data:
        h ^= byte
        h = (h * FNV32_PRIME) & 0xFFFFFFFF
    return h


def partition_of(session_id: str | None, partitions: int) -> int:
    """The partition NATS's ``{{partition(partitions, 2)}}`` files ``session_id``'s inbound under."""
    if partitions <= 1:
        return 0
    return fnv1a_32(encode_sid(session_id).encode()) % partitions


def inbound_transform(subjects: Subjects, partitions: int) -> dict[str, str]:
    """The inbound stream's ``subject_transform`` (source → partitioned destination)."""
    return {
        "src": f"{subjects.prefix}.inbound.*.*",
        "dest": f"{subjects.prefix}.inpart.{{{{partition({partitions},2)}}}}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}",
    }


def partition_filter(subjects: Subjects, partition: int) -> str:
    return f"{subjects.prefix}.inpart.{partition}.*.*"


def partition_filters(subjects: Subjects, partition: int) -> list[str]:
    """What partition ``partition``'s consumer reads; the catch-all also takes malformed subjects."""
    filters = [partition_filter(subjects, partition)]
    if partition == CATCH_ALL_PARTITION:
        # Well-formed inbound subjects are always transformed, so whatever is stored under
        # ``<prefix>.inbound.>`` is malformed: it is read here to be dead-lettered.
        filters.append(subjects.inbound_all)
    return filters


def partition_consumer(consumer_name: str, partition: int) -> str:
    return f"{consumer_name}-p{partition}"


def stored_partition(prefix: str, subject: str) -> int | None:
    """The partition token of a stored inbound subject, or None when it is not partitioned."""
    head = f"{prefix}.inpart."
    if not subject.startswith(head):
        return None
    token = subject[len(head):].split(".", 1)[0]
    return int(token) if token.isdigit() else None


def fair_share(partitions: int, members: int) -> int:
    """The most partitions one of ``members`` live processes should hold (every partition is covered)."""
    return math.ceil(partitions / max(members, 1))
