"""Read what a JetStream stream holds (not what a live subscription happened to see): an ephemeral pull consumer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

BATCH = 1000


@dataclass(frozen=True)
class StoredMessage:
    """One stored message: its stream sequence, the server's store time (epoch seconds), subject and JSON body."""

    seq: int
    stored_at: float
    subject: str
    body: dict[str, Any]


async def read_stream(js: JetStreamContext, stream: str, filter_subject: str) -> list[StoredMessage]:
    """Every message of ``stream`` matching ``filter_subject``, in stream order (empty when the stream is absent)."""
    try:
        info = await js.stream_info(stream, subjects_filter=filter_subject)
    except NotFoundError:
        return []
    if info.state.messages == 0 or not info.state.subjects:
        return []  # nothing matches: skip the fetch that would wait out its timeout
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.ALL,
        inactive_threshold=30.0,
        filter_subject=filter_subject,
    )
    sub = await js.pull_subscribe(filter_subject, stream=stream, config=config)
    out: list[StoredMessage] = []
    try:
        while True:
            try:
                batch = await sub.fetch(BATCH, timeout=1.0)
            except NatsTimeoutError:
                break  # nothing (more) matches
            for msg in batch:
                meta = msg.metadata
                try:
                    body = orjson.loads(msg.data)
                except orjson.JSONDecodeError:
                    body = {"raw": msg.data.decode("utf-8", "replace")}
                if not isinstance(body, dict):
                    body = {"raw": body}
                out.append(StoredMessage(meta.sequence.stream, meta.timestamp.timestamp(), msg.subject, body))
            if batch and batch[-1].metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return out
