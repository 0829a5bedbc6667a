"""Subject and stream names, in one place. Every name derives from the prefix."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.tokens import encode_sid


@dataclass(frozen=True)
class StreamSpec:
    """One JetStream stream turnstile owns."""

    name: str
    subjects: tuple[str, ...]
    purpose: str


@dataclass(frozen=True)
class Subjects:
    """Subject builder for one prefix (default ``turnstile``)."""

    prefix: str = "turnstile"

    # -- inbound / outbound -------------------------------------------------
    def inbound(self, platform: str, session_id: str | None) -> str:
        return f"{self.prefix}.inbound.{_platform(platform)}.{encode_sid(session_id)}"

    @property
    def inbound_all(self) -> str:
        return f"{self.prefix}.inbound.>"

    def outbound(self, platform: str, session_id: str | None) -> str:
        return f"{self.prefix}.outbound.{_platform(platform)}.{encode_sid(session_id)}"

    @property
    def outbound_all(self) -> str:
        return f"{self.prefix}.outbound.>"

    def stream(self, platform: str, session_id: str | None) -> str:
        """Ephemeral turn progress (typing, partial text): core NATS, captured by no stream."""
        return f"{self.prefix}.stream.{_platform(platform)}.{encode_sid(session_id)}"

    @property
    def stream_all(self) -> str:
        return f"{self.prefix}.stream.>"

    # -- checkpoints / events -------------------------------------------------
    def checkpoint(self, session_id: str) -> str:
        return f"{self.prefix}.checkpoint.{encode_sid(session_id)}"

    @property
    def checkpoint_all(self) -> str:
        return f"{self.prefix}.checkpoint.>"

    def event(self, session_id: str | None, event_type: str) -> str:
        return f"{self.prefix}.events.{encode_sid(session_id)}.{event_type}"

    def events_of(self, session_id: str | None) -> str:
        return f"{self.prefix}.events.{encode_sid(session_id)}.>"

    @property
    def events_all(self) -> str:
        return f"{self.prefix}.events.>"

    # -- dead letters / control -------------------------------------------------
    @property
    def dlq_inbound(self) -> str:
        return f"{self.prefix}.dlq.inbound"

    @property
    def dlq_turn(self) -> str:
        return f"{self.prefix}.dlq.turn"

    @property
    def dlq_all(self) -> str:
        return f"{self.prefix}.dlq.>"

    def api(self, resource: str, verb: str) -> str:
        return f"{self.prefix}.api.{resource}.{verb}"

    @property
    def api_all(self) -> str:
        return f"{self.prefix}.api.>"

    def relay(self, member: str) -> str:
        """Control requests forwarded to the process owning a session's partition (partitioned ownership)."""
        return f"{self.prefix}.relay.{member}"

    @property
    def relay_all(self) -> str:
        return f"{self.prefix}.relay.>"

    # -- streams ---------------------------------------------------------------
    @property
    def stream_prefix(self) -> str:
        return self.prefix.upper().replace(".", "_").replace("-", "_")

    @property
    def inbound_stream(self) -> str:
        return f"{self.stream_prefix}_INBOUND"

    @property
    def checkpoint_stream(self) -> str:
        return f"{self.stream_prefix}_CHECKPOINTS"

    @property
    def events_stream(self) -> str:
        return f"{self.stream_prefix}_EVENTS"

    @property
    def outbound_stream(self) -> str:
        return f"{self.stream_prefix}_OUTBOUND"

    @property
    def dlq_stream(self) -> str:
        return f"{self.stream_prefix}_DLQ"

    def streams(self) -> tuple[StreamSpec, ...]:
        return (
            StreamSpec(self.inbound_stream, (self.inbound_all,), "inbound chat events; replayable"),
            StreamSpec(self.checkpoint_stream, (self.checkpoint_all,), "complete snapshots; last one restores"),
            StreamSpec(self.events_stream, (self.events_all,), "session, turn and message events"),
            StreamSpec(self.outbound_stream, (self.outbound_all,), "replies to deliver"),
            StreamSpec(self.dlq_stream, (self.dlq_all,), "rejected raw input + error"),
        )


def _platform(platform: str) -> str:
    if not platform or any(c in platform for c in ".*> \t\r\n"):
        raise ValueError(f"platform {platform!r} is not a valid subject token")
    return platform


def parse_inbound_subject(prefix: str, subject: str) -> tuple[str, str]:
    """Split ``<prefix>.inbound.<platform>.<sid-token>`` into (platform, token).

    The partitioned form the inbound stream stores (``<prefix>.inpart.<p>.<platform>.<sid-token>``,
    see consumers/partitions.py) is read the same way.
    """
    head = f"{prefix}.inbound."
    partitioned = f"{prefix}.inpart."
    if subject.startswith(partitioned):
        rest = subject[len(partitioned):].split(".")
        if len(rest) != 3 or not rest[0].isdigit():
            raise ValueError(f"partitioned inbound subject must be {partitioned}<p>.<platform>.<sid-token>: {subject}")
        return rest[1], rest[2]
    if not subject.startswith(head):
        raise ValueError(f"not an inbound subject: {subject}")
    rest = subject[len(head):].split(".")
    if len(rest) != 2:
        raise ValueError(f"inbound subject must be {head}<platform>.<sid-token>: {subject}")
    return rest[0], rest[1]
