"""Replay a session's events or checkpoints from JetStream: from the start, a sequence or a time (MQ-6).

Uses an ephemeral pull consumer with no acks, filtered to the session's subject,
and stops when the consumer reports nothing pending, so a replay always ends —
unless ``follow`` is set: then it goes on yielding what arrives until the caller stops.
``latest_checkpoint`` reads a session's last checkpoint directly (one request, no consumer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from schemas.subjects import Subjects

ReplayKind = Literal["events", "checkpoints"]
FETCH_BATCH = 256


@dataclass(frozen=True)
class Replayed:
    """One replayed message: its stream sequence, subject, and decoded JSON payload."""

    seq: int
    subject: str
    data: dict[str, Any]


def _target(subjects: Subjects, kind: ReplayKind, session_id: str) -> tuple[str, str]:
    if kind == "events":
        return subjects.events_stream, subjects.events_of(session_id)
    if kind == "checkpoints":
        return subjects.checkpoint_stream, subjects.checkpoint(session_id)
    raise ValueError(f"unknown replay kind {kind!r} (events | checkpoints)")


async def replay(
    js: JetStreamContext,
    subjects: Subjects,
    session_id: str,
    kind: ReplayKind,
    *,
    start_seq: int | None = None,
    start_time: datetime | None = None,
    fetch_timeout_s: float = 1.0,
    follow: bool = False,
) -> AsyncIterator[Replayed]:
    """Yield the session's events or checkpoints in stream order, then stop (with ``follow``: go on)."""
    if start_seq is not None and start_time is not None:
        raise ValueError("give start_seq or start_time, not both")
    if start_time is not None and start_time.tzinfo is None:
        start_time = start_time.replace(tzinfo=UTC)  # a naive time is UTC
    stream, subject = _target(subjects, kind, session_id)
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, filter_subject=subject, inactive_threshold=30.0)
    if start_seq is not None:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_seq
    elif start_time is not None:
        config.deliver_policy = DeliverPolicy.BY_START_TIME
        config.opt_start_time = start_time.isoformat()  # type: ignore[assignment]  # nats-py sends it as given; its hint says datetime
    else:
        config.deliver_policy = DeliverPolicy.ALL
    psub = await js.pull_subscribe(subject, durable=None, stream=stream, config=config)
    try:
        while True:
            if follow:
                batch = FETCH_BATCH
            else:
                info = await psub.consumer_info()
                if not info.num_pending:
                    return
                batch = min(FETCH_BATCH, info.num_pending)
            try:
                msgs = await psub.fetch(batch, timeout=fetch_timeout_s)
            except (NatsTimeoutError, TimeoutError):  # nats-py raises asyncio's when its no-wait pull used it all
                continue
            for m in msgs:
                if start_time is not None and m.metadata.timestamp < start_time:
                    continue  # a start time the server cannot hold (after year 2262) starts at the first
                yield Replayed(int(m.metadata.sequence.stream), m.subject, orjson.loads(m.data))
    finally:
        await psub.unsubscribe()


async def latest_checkpoint(js: JetStreamContext, subjects: Subjects, session_id: str) -> Replayed | None:
    """The session's last checkpoint, read with a direct get by subject (None when it has none)."""
    from nats.js.errors import NotFoundError

    try:
        msg = await js.get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(session_id), direct=True)
    except NotFoundError:
        return None
    return Replayed(int(msg.seq or 0), msg.subject or subjects.checkpoint(session_id), orjson.loads(msg.data or b"{}"))
