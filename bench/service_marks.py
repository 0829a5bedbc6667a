"""In-service wall-clock marks on one message's serial path (``python -m bench.timeline --marks``).

Installed by bench/profiled_service.py when ``BENCH_MARKS`` is set, before the service starts. It
wraps, without changing what they do, the steps a plain message's turn goes through and records
``time.time()`` at each (the clock the bench stamps its NATS observations with), while ``active``:

- ``pulled``: the inbound pull sorts a delivered message (``InboundPull._sort``; ``status`` for a
  pull status);
- ``record>`` / ``record<``: its recording (``InboundPipeline._record``: ``record_inbound``);
- ``stagebatch>`` / ``stagebatch<``: its staging in the inbox, the ack and the hand-off
  (``InboundPipeline._stage``);
- ``lastck>`` / ``lastck<``: a session's last checkpoint is read (``Publisher.last_checkpoint``: a
  cold restore's read, started by the prefetch when the message is admitted);
- ``open>`` / ``open<``: a session's engine is opened from it (``SessionOpener.open``);
- ``item>`` / ``item<``: the session actor's item (``TurnRunner.handle``) begins / ends;
- ``stage>`` / ``stage<``: the user message is staged (``Session.begin_user_turn``: its journal
  append and commit, then checkpoint 1);
- ``turn>`` / ``turn<``: the model-and-tools loop (``Session.run_pending_turn``: the answer's
  journal commit, then checkpoint 2);
- ``ck publish>``: a checkpoint is handed to its chain (``CheckpointChain.publish``; it first waits
  for the previous checkpoint's ack, the fence); ``ck wait>`` / ``ck wait<``: the chain is waited
  for (``CheckpointChain.settle``: before the next checkpoint, the reply and the end of the item);
- ``reply>`` / ``reply<``: a reply is published (``ReplySender.publish_reply``: it waits for the
  session's earlier replies and the checkpoint holding it, then enters the connection's buffer);
- ``ended>`` / ``ended<``: the turn's end is booked (``TurnEvents.ended``: ``usage``, the record
  write behind, ``turn.ended``);
- ``write big`` / ``write small``: nats-py writes to the socket (``writelines``; big ≥ 20 kB: a
  checkpoint is in it);
- ``ack checkpoint`` / ``ack``: a JetStream publish ack reaches the service's ack handler
  (``StreamAcks._on_ack``, in nats-py's read loop): its round trip ended.

Diagnosis only: the wrappers cost a few µs each, so use the marks for order and gaps, not CPU.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

BIG_WRITE_BYTES = 20_000


class ServiceMarks:
    """``[time, name]`` pairs recorded while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.marks: list[list[Any]] = []

    def mark(self, name: str) -> None:
        if self.active:
            self.marks.append([time.time(), name])

    def install(self) -> None:
        import nats.aio.transport as transport

        from consumers.checkpoints import CheckpointChain
        from consumers.inbound_pipeline import InboundPipeline
        from consumers.inbound_pull import InboundPull
        from consumers.publisher import Publisher, StreamAcks
        from consumers.replies import ReplySender
        from consumers.session_opener import SessionOpener
        from consumers.turn_events import TurnEvents
        from consumers.turn_runner import TurnRunner
        from core.engine.session import Session

        self._around(TurnRunner, "handle", "item")
        self._around(Session, "begin_user_turn", "stage")
        self._around(Session, "run_pending_turn", "turn")
        self._around(CheckpointChain, "settle", "ck wait")
        self._before(CheckpointChain, "publish", "ck publish>")
        self._around(ReplySender, "publish_reply", "reply")
        self._around(TurnEvents, "ended", "ended")
        self._around(Publisher, "last_checkpoint", "lastck")
        self._around(SessionOpener, "open", "open")
        self._around(InboundPipeline, "_record", "record")
        self._around(InboundPipeline, "_stage", "stagebatch")
        marks = self
        sort = InboundPull._sort

        def timed_sort(self: Any, msg: Any, msgs: list[Any]) -> None:
            marks.mark("pulled" if not msg.headers or "Status" not in msg.headers else "status")
            sort(self, msg, msgs)

        InboundPull._sort = timed_sort  # type: ignore[method-assign]
        writelines = transport.TcpTransport.writelines

        def timed_writelines(self: Any, payload: list[bytes]) -> None:
            marks.mark("write big" if sum(len(p) for p in payload) >= BIG_WRITE_BYTES else "write small")
            writelines(self, payload)

        transport.TcpTransport.writelines = timed_writelines  # type: ignore[method-assign]
        on_ack = StreamAcks._on_ack

        def timed_on_ack(self: StreamAcks, subject: bytes, data: bytes, headers: dict[str, str] | None) -> None:
            marks.mark("ack checkpoint" if b"CHECKPOINT" in data[:200] else "ack")
            on_ack(self, subject, data, headers)

        # Bound at subscribe time (consumers/inline_delivery.py): installed before the service starts.
        StreamAcks._on_ack = timed_on_ack  # type: ignore[method-assign]

    def _around(self, cls: type, attr: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(cls, attr)
        marks = self

        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            marks.mark(name + ">")
            try:
                return await fn(*args, **kwargs)
            finally:
                marks.mark(name + "<")

        setattr(cls, attr, timed)

    def _before(self, cls: type, attr: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(cls, attr)
        marks = self

        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            marks.mark(name)
            return await fn(*args, **kwargs)

        setattr(cls, attr, timed)
