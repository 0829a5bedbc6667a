"""Create or update turnstile's JetStream streams and the inbound consumer, idempotently."""

from __future__ import annotations

import logging
from dataclasses import replace

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import NotFoundError

from consumers.partitions import inbound_transform, partition_consumer, partition_filters
from consumers.settings import Settings
from consumers.startup import EXIT_SETTINGS, StartupError
from schemas.subjects import Subjects

log = logging.getLogger(__name__)


# Events carry a Nats-Msg-Id so that a copy sent again after a lost answer is dropped; copies are
# sent only while the publish's ack is awaited (consumers/publisher.py: PUBLISH_TIMEOUT_S, 10 s), so
# the window covers that three times over, and holds ~a quarter of the ids of the server's default.
EVENTS_DUPLICATE_WINDOW_S = 30.0


def stream_configs(settings: Settings, subjects: Subjects) -> list[StreamConfig]:
    """The stream table of docs/protocol.md, built from settings in one place."""
    # What every stream shares; each one below replaces what is its own.
    common = StreamConfig(storage=StorageType.FILE, retention=RetentionPolicy.LIMITS,
                          num_replicas=settings.stream_replicas)
    return [
        replace(
            common,
            name=subjects.inbound_stream,
            subjects=[subjects.inbound_all],
            max_age=settings.inbound_max_age_s,
            duplicate_window=settings.duplicate_window_s,
            subject_transform=(
                SubjectTransform(**inbound_transform(subjects, settings.partitions))
                if settings.partitions > 1 else None
            ),
        ),
        replace(
            common,
            name=subjects.checkpoint_stream,
            subjects=[subjects.checkpoint_all],
            max_msgs_per_subject=settings.checkpoints_per_session,
            discard=DiscardPolicy.OLD,
            allow_direct=True,
        ),
        replace(
            common,
            name=subjects.events_stream,
            subjects=[subjects.events_all],
            max_age=settings.events_max_age_s,
            duplicate_window=EVENTS_DUPLICATE_WINDOW_S,
        ),
        replace(
            common,
            name=subjects.outbound_stream,
            subjects=[subjects.outbound_all],
            max_age=settings.outbound_max_age_s,
            duplicate_window=settings.duplicate_window_s,
        ),
        replace(common, name=subjects.dlq_stream, subjects=[subjects.dlq_all]),
    ]


def inbound_consumer_config(
    settings: Settings, name: str | None = None, filter_subjects: list[str] | None = None
) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=name or settings.consumer_name,
        filter_subjects=filter_subjects,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=max(settings.fetch_batch * 8, 1024),
        max_waiting=64,
    )


async def ensure_streams(js: JetStreamContext, settings: Settings, subjects: Subjects) -> None:
    """Add each stream, or update it to the configured settings when it exists."""
    for config in stream_configs(settings, subjects):
        try:
            info = await js.stream_info(config.name or "")
        except NotFoundError:
            await js.add_stream(config)
            log.info("created stream %s", config.name)
        else:
            if config.name == subjects.inbound_stream:
                _check_partitions(info.config.subject_transform, config.subject_transform, settings)
            await js.update_stream(config)
    if settings.partitions <= 1:
        await js.add_consumer(subjects.inbound_stream, inbound_consumer_config(settings))
        return
    for partition in range(settings.partitions):
        await ensure_partition_consumer(js, settings, subjects, partition)


def _check_partitions(
    stored: SubjectTransform | None, wanted: SubjectTransform | None, settings: Settings
) -> None:
    """The partition count is fixed when the inbound stream is created: refuse to start with another."""
    if (stored.dest if stored else None) == (wanted.dest if wanted else None):
        return
    raise StartupError(
        f"the inbound stream was created with another partition count than TURNSTILE_PARTITIONS={settings.partitions} "
        f"(stored transform: {stored.dest if stored else 'none'}); the count is fixed at creation: see "
        "docs/protocol.md#partitioned-ownership for how to change it",
        EXIT_SETTINGS,
    )


async def ensure_partition_consumer(js: JetStreamContext, settings: Settings, subjects: Subjects, partition: int) -> None:
    """Partition ``partition``'s durable pull consumer (one per partition; see consumers/partitions.py)."""
    name = partition_consumer(settings.consumer_name, partition)
    await js.add_consumer(
        subjects.inbound_stream, inbound_consumer_config(settings, name, partition_filters(subjects, partition))
    )
