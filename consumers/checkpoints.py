"""A session's checkpoint chain: each checkpoint fenced on the one before, acks awaited late.

Every durable step of a turn publishes a complete checkpoint (MQ-3, KS-10), fenced with
``Nats-Expected-Last-Subject-Sequence`` on the previous checkpoint's sequence so a stale
owner's write is refused. Waiting for each ack right after sending put a broker round
trip (and fsync) on the turn's path at every step. The chain sends a checkpoint at once
and waits for its ack only when the sequence is needed — just before the next checkpoint
is sent (its fence) — or when the next thing is an effect outside turnstile: a tool runs
(``barrier``), a reply is published, or the item ends (``settle``). Between two steps the
ack arrives while the engine calls the model and journals the next step.

Nothing is delayed for subscribers: every checkpoint is on the wire when its step is
journaled. A refused or unanswered checkpoint raises ``CheckpointFailed`` at the next
``publish`` or ``settle``, and the runner reloads from the last stored checkpoint plus the
journal (the journal, committed before each checkpoint, is the write-ahead record).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from consumers.buffered_publish import Payload, payload_size
from consumers.deadline import Deadline
from consumers.publisher import KeptAck

if TYPE_CHECKING:
    from consumers.metrics import Metrics


class CheckpointPublisher(Protocol):
    """Sends checkpoints; their acks are ``KeptAck``s, which a cancelled wait leaves for the next one."""

    async def send_checkpoint(self, session_id: str, payload: Payload, expected_last_seq: int | None) -> KeptAck: ...

    async def checkpoint_acked(
        self, session_id: str, acked: KeptAck, expected_last_seq: int | None, deadline: Deadline | None = None
    ) -> int: ...


class CheckpointChain:
    """One session's fence (the last stored sequence) and its checkpoint still awaiting an ack."""

    def __init__(self, session_id: str, publisher: CheckpointPublisher, metrics: Metrics | None = None) -> None:
        self._session_id = session_id
        self._pub = publisher
        self._metrics = metrics
        self._sent_at = 0.0
        self._inflight: tuple[KeptAck, int | None, int | None] | None = None
        self._deadline = Deadline()  # the ack wait's timeout, one timer across the waits
        self.seq: int | None = None  # subject sequence of the last acknowledged checkpoint
        self.version: int | None = None  # its snapshot's state version (None: not known here)

    @property
    def settled(self) -> bool:
        """True when no checkpoint is in flight (the last one sent was acknowledged, or none was sent)."""
        return self._inflight is None

    def reset(self, seq: int | None, version: int | None = None) -> None:
        """Continue from the stored checkpoint at ``seq`` (after a load), whose snapshot has state
        version ``version`` when known; an unacked one is dropped."""
        self._drop_inflight()
        self.seq = seq
        self.version = version

    async def publish(self, payload: Payload, *, barrier: bool = False, version: int | None = None) -> None:
        """Send ``payload`` (a snapshot of state version ``version``, bytes or its pieces) fenced on the
        previous checkpoint (whose ack is awaited first)."""
        await self.settle()
        acked = await self._pub.send_checkpoint(self._session_id, payload, self.seq)
        if self._metrics is not None:
            self._metrics.checkpoint_bytes.observe(payload_size(payload))
            self._sent_at = time.monotonic()
        self._inflight = (acked, self.seq, version)
        if barrier:
            await self.settle()

    async def settle(self) -> None:
        """Wait for the checkpoint in flight; raises CheckpointFailed if it was not stored."""
        if self._inflight is None:
            return
        acked, fence, version = self._inflight
        try:
            # A cancelled waiter (shutdown) leaves the ack to the next ``settle`` (a ``KeptAck``).
            self.seq = await self._pub.checkpoint_acked(self._session_id, acked, fence, self._deadline)
        except asyncio.CancelledError:
            raise
        except BaseException:
            acked.cancel()  # unanswered: a late ack is ignored and the ack table forgets it
            self._inflight = None  # refused or unanswered: reported once; the runner reloads
            raise
        self._inflight = None
        self.version = version
        if self._metrics is not None:
            self._metrics.checkpoint_publish.observe(time.monotonic() - self._sent_at)

    def stop_timer(self) -> None:
        """Its session's actor ends: the ack wait's timer goes (an armed one, holding its handle,
        context and deadline until it fires, is what thousands of idle sessions would keep)."""
        self._deadline.close()

    def _drop_inflight(self) -> None:
        if self._inflight is not None:
            self._inflight[0].cancel()
            self._inflight = None

