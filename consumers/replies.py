"""Delivering a turn's replies: ``ReplySender``, one per session runner, given its state.

Replies go to ``<prefix>.outbound.<platform>.<sid>`` with ``Nats-Msg-Id`` =
``<sid>:<turn_id>:<seq>``, pipelined; a new answer waits for the checkpoint that holds
it first. An event answered before a crash is delivered again from the engine's answers
(``Session.lookup_external_event``, durable), but only the replies the outbound stream
does not hold already (read back before any republish, so the duplicate window does not
matter); one whose first message the inbox already finished is recognised as delivered (KS-14).
Every reply is sent only once the session's earlier replies are stored (``ReplyOrder``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from consumers.checkpoints import CheckpointChain
from consumers.outbound_ledger import reply_msg_id, stored_reply_seqs
from consumers.publisher import Publisher
from consumers.reply_order import ReplyOrder
from consumers.runner_ports import SessionRecords
from core.engine import Session
from core.engine.answers import EventAnswers
from core.errors import StaleGeneration
from core.store.inbox import DONE, SqlInbox
from schemas.wire import InboundMessage, OutboundReply

Pending = list[asyncio.Future[Any]]


@dataclass
class ItemPublishes:
    """What the item in hand sent without waiting: broker acks (``unsettled``) and bookkeeping
    writes (``behind``); both land before the item is marked done."""

    unsettled: Pending = field(default_factory=list)
    behind: Pending = field(default_factory=list)

    def take(self) -> tuple[Pending, Pending]:
        """Hand over what is pending and start empty."""
        unsettled, behind = self.unsettled, self.behind
        self.unsettled, self.behind = [], []
        return unsettled, behind


@dataclass(frozen=True)
class ReplyTarget:
    """Where a turn's replies go: the platform's outbound subject, answering ``reply_to``."""

    platform: str
    reply_to: str
    external_event_id: str | None = None

    @classmethod
    def of(cls, inbound: InboundMessage) -> ReplyTarget:
        return cls(inbound.platform, inbound.id, inbound.external_event_id)


class ReplySender:
    """Publishes one session's replies, fenced on its generation at the last moment (SM-22)."""

    def __init__(
        self,
        session_id: str,
        *,
        publisher: Publisher,
        book: SessionRecords,
        inbox: SqlInbox,
        checkpoints: CheckpointChain,
        finished: deque[str],
        publishes: ItemPublishes,
    ) -> None:
        self.session_id = session_id
        self._pub = publisher
        self._book = book
        self._inbox = inbox
        self._checkpoints = checkpoints
        self._finished = finished
        self._publishes = publishes
        self._order = ReplyOrder(session_id, publisher, book.generation_of)

    @property
    def all_stored(self) -> bool:
        """True when every reply this session sent is confirmed stored (none waits to be sent again)."""
        return self._order.all_stored

    async def answer_was_delivered(self, answers: EventAnswers, inbound: InboundMessage) -> bool:
        """True when the message that began the answering turn is another one that is finished:
        marked done in the inbox, or no longer there (the inbox prunes finished rows only)."""
        original = answers.answering_inbound_id
        if not original or original == inbound.id:
            return False
        if original in self._finished:
            return True
        return await self._inbox.status_of(inbound.platform, original) in (DONE, None)

    async def deliver_outputs(self, engine: Session, target: ReplyTarget, generation: int) -> int:
        """Publish the turn's outputs (answer, reply texts, objects) in order; returns how many."""
        outputs = engine.turn_outputs
        for out in outputs:
            objects: list[dict[str, Any]] = []
            if out.kind == "object":
                objects.append({"object_id": out.object_id, "file_name": out.file_name, "media_type": out.media_type})
            await self.publish_reply(target, generation, str(engine.turn_id), out.seq, out.text or "", objects)
        return len(outputs)

    async def deliver_previous(
        self, target: ReplyTarget, generation: int, engine: Session, ext_id: str,
        sink: Pending, answers: EventAnswers | None = None,
    ) -> None:
        """Publish again what the outbound stream does not hold of the event's answer.

        The stream, not the duplicate window, decides: each turn's stored ``seq``s are read
        first (``consumers/outbound_ledger.py``), so a reply is never stored twice however
        long the process was down (within the stream's max age).
        """
        if answers is None:
            answers = await engine.lookup_external_event(ext_id)
        by_turn: dict[str, list[dict[str, Any]]] = {}
        for resp in answers.responses:
            if resp.get("terminal"):
                by_turn.setdefault(str(resp.get("turn_id") or engine.turn_id), []).append(resp)
        subject = self._pub.subjects.outbound(target.platform, self.session_id)
        for turn_id, replies in by_turn.items():
            times = [str(r["at"]) for r in replies if r.get("at")]
            since = min(times) if len(times) == len(replies) else None  # else: read from the stream's start
            stored = await stored_reply_seqs(
                self._pub.js, self._pub.subjects.outbound_stream, subject, self.session_id, turn_id, since
            )
            for resp in replies:
                if int(resp["seq"]) in stored:
                    continue
                objects = [{"object_id": resp["object_id"]}] if resp.get("object_id") else []
                await self.publish_reply(target, generation, turn_id, int(resp["seq"]),
                                         str(resp.get("text") or ""), objects, sink)

    async def publish_reply(
        self, target: ReplyTarget, generation: int, turn_id: str, seq: int,
        text: str, objects: list[dict[str, Any]], sink: Pending | None = None,
    ) -> None:
        """One reply; a new answer (no ``sink``) waits for the checkpoint that holds it. Every reply
        waits until the session's earlier replies are stored (``consumers/reply_order.py``)."""
        await self._order.earlier_stored(reply_msg_id(self.session_id, turn_id, seq))
        if sink is None:  # a new answer: the checkpoint holding it is stored before the reply goes out
            await self._checkpoints.settle()
        reply = OutboundReply(
            session_id=self.session_id,
            generation=generation,
            turn_id=turn_id,
            seq=seq,
            reply_to=target.reply_to,
            external_event_id=target.external_event_id,
            text=text,
            objects=objects,
        )
        # SM-22 / MQ-5, at the last moment: no await lies between this check and the reply entering
        # the connection's buffer, and a deletion changes the generation before it emits
        # session.deleted — so a reply either precedes its session's deletion or is never sent.
        if self._book.generation_of(self.session_id) != generation:
            raise StaleGeneration(f"session {self.session_id!r} was deleted; its reply is not sent")
        acked = await self._pub.outbound(target.platform, reply)
        self._order.sent(target.platform, reply, acked)
        (self._publishes.unsettled if sink is None else sink).append(acked)
