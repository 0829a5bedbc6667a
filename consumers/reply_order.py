"""Per-session reply order: a reply is sent only once every earlier reply of its session is stored.

Replies are pipelined: sent without waiting for the broker's ack. One that reached a stream
leader which died before storing it is lost with its ack; if the session's next reply were sent
meanwhile, it would be stored first and the lost one only later (the finisher's republish), and
adapters deliver in stored order. ``ReplyOrder`` remembers a session's replies whose ack has not
come; before the next reply is sent it waits for those acks, and sends again those that failed
(after reading the outbound stream back, so none is stored twice). Costs: nothing when the earlier
acks are in (the usual case, the next reply comes a turn later); within one turn, one broker round
trip per reply after the first (docs/protocol.md#reply-order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumers.outbound_ledger import reply_msg_id, stored_reply_seqs
from consumers.publisher import Publisher
from core.errors import Unavailable
from schemas.wire import OutboundReply

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SentReply:
    """A reply handed to the broker whose ack has not confirmed it stored."""

    platform: str
    reply: OutboundReply
    acked: asyncio.Future[Any]
    sent_at: float  # wall time, where the read-back starts (minus the ledger's clock margin)

    @property
    def stored(self) -> bool:
        return self.acked.done() and not self.acked.cancelled() and self.acked.exception() is None

    @property
    def failed(self) -> bool:
        return self.acked.done() and (self.acked.cancelled() or self.acked.exception() is not None)


class ReplyOrder:
    """The unconfirmed replies of one session, keyed by ``Nats-Msg-Id``, in sending order."""

    def __init__(
        self, session_id: str, publisher: Publisher, generation_of: Callable[[str], int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session_id = session_id
        self._pub = publisher
        self._generation_of = generation_of
        self._clock = clock
        self._unconfirmed: dict[str, SentReply] = {}

    @property
    def all_stored(self) -> bool:
        """True when every reply sent was confirmed stored (nothing to send again before the next)."""
        return all(entry.stored for entry in self._unconfirmed.values())

    def sent(self, platform: str, reply: OutboundReply, acked: asyncio.Future[Any]) -> None:
        """Remember a reply just handed to the broker (a send again of the same id keeps its place)."""
        key = reply_msg_id(reply.session_id, reply.turn_id, reply.seq)
        previous = self._unconfirmed.get(key)
        # The read-back starts from the first send: the stream may hold that one.
        entry = SentReply(platform, reply, acked, previous.sent_at if previous is not None else self._clock())
        self._unconfirmed[key] = entry  # confirmed ones are dropped by the next look (no callback per reply)

    async def earlier_stored(self, msg_id: str) -> None:
        """Return once every reply sent before (other than ``msg_id`` itself) is stored: wait for
        their acks, send again what failed. Unavailable if the stream cannot confirm them now (the
        caller's message is retried; nothing later of the session is sent meanwhile)."""
        if not self._unconfirmed:
            return
        earlier: list[tuple[str, SentReply]] = []
        for key, entry in list(self._unconfirmed.items()):
            if key == msg_id:
                break  # sending one again: only what was produced before it goes first
            if entry.stored:
                del self._unconfirmed[key]
            else:
                earlier.append((key, entry))
        if not earlier:
            return
        if await self._pub.settle([entry.acked for _, entry in earlier]):
            for key, entry in earlier:
                self._forget(key, entry)
            return
        await self._send_again([entry for _, entry in earlier if entry.failed])

    async def _send_again(self, failed: list[SentReply]) -> None:
        by_turn: dict[tuple[str, str], list[SentReply]] = {}
        for entry in failed:
            by_turn.setdefault((entry.platform, entry.reply.turn_id), []).append(entry)
        resent: list[asyncio.Future[Any]] = []
        for (platform, turn_id), entries in by_turn.items():
            subject = self._pub.subjects.outbound(platform, self.session_id)
            since = datetime.fromtimestamp(min(e.sent_at for e in entries), UTC).isoformat()
            stored = await stored_reply_seqs(
                self._pub.js, self._pub.subjects.outbound_stream, subject, self.session_id, turn_id, since
            )
            for entry in sorted(entries, key=lambda e: e.reply.seq):
                key = reply_msg_id(self.session_id, turn_id, entry.reply.seq)
                if entry.reply.seq in stored:
                    self._forget(key, entry)  # stored; only its ack was lost
                    continue
                # SM-22 / MQ-5: a reply of a generation deleted since is never sent.
                if self._generation_of(self.session_id) != entry.reply.generation:
                    self._forget(key, entry)
                    continue
                log.warning("session %s: reply %s was not stored; sending it again before the next one",
                            self.session_id, key)
                acked = await self._pub.outbound(platform, entry.reply)
                if self._unconfirmed.get(key) is entry:  # nobody sent it again meanwhile
                    self.sent(platform, entry.reply, acked)
                resent.append(acked)
        if resent and not await self._pub.settle(resent):
            raise Unavailable(f"an earlier reply of session {self.session_id!r} is not stored yet; "
                              "its later replies wait for it")

    def _forget(self, key: str, entry: SentReply) -> None:
        if self._unconfirmed.get(key) is entry:
            del self._unconfirmed[key]
