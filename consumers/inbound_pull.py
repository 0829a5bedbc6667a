"""The inbound consumer's pull: one open pull request at a time, each message handed over as it arrives.

Why not nats-py's ``PullSubscription.fetch``: its first request is a no-wait probe with an expiry,
which nats-server holds open until a message arrives and then ends with a "404 No Messages" status,
and ``fetch`` returns only on that status (or a full batch, or the expiry). The server does not always
send the status at once: in about a third of the 1-session bench runs it came only when the *next*
message arrived, so at 50 msg/s every other message waited ~20 ms for its successor (traced with
``bench.timeline --marks``: delivered at once, status 20 ms later).

Here a request (``batch``, ``expires``) stays open on the server, and ``take`` returns what it has
delivered as soon as there is anything. The next request goes out when this one is served in full,
ends with a status (408 expired, 409 leadership change), or is past its expiry plus a grace with
neither (the server lost it, e.g. a restart). Each request has its own reply subject under one
wildcard inbox, so a late status of an abandoned request ends nothing. A request asks at most the
caller's ``room``: messages in flight plus messages still owed stay within it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError

__all__ = ["InboundPull", "PullRefused"]

LOST_REQUEST_GRACE_S = 1.0  # past its expiry by this much with no status: the server no longer has it
SUB_PENDING_MSGS = 512 * 1024  # nats-py's JetStream pull default; a request never asks more than the room
SUB_PENDING_BYTES = 256 * 1024 * 1024


class PullRefused(Exception):
    """The server refused the pull (consumer deleted, bad request, a limit), or it is closed: bind afresh."""


@dataclass(slots=True)
class _Request:
    reply: str
    owed: int  # messages it may still deliver
    lost_at: float  # monotonic: after this with no status, it is taken for lost


class InboundPull:
    """Pull requests on one durable consumer, over one subscription (see the module doc)."""

    def __init__(self, nc: Client, api_prefix: str, stream: str, consumer: str, expires_s: float) -> None:
        self._nc = nc
        self._next_subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._expires_s = expires_s
        self._sub: Subscription | None = None
        self._inbox = ""
        self._sent = 0
        self._request: _Request | None = None
        self._refused: PullRefused | None = None

    @property
    def owed(self) -> int:
        """Messages the open request may still deliver (0 when none is open)."""
        return self._request.owed if self._request is not None else 0

    async def open(self) -> InboundPull:
        """Subscribe a fresh inbox; an open request of an earlier inbox is abandoned."""
        await self._unsubscribe()
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(
            f"{self._inbox}.*", pending_msgs_limit=SUB_PENDING_MSGS, pending_bytes_limit=SUB_PENDING_BYTES
        )
        self._request = None
        return self

    async def take(self, room: int, timeout: float) -> list[Msg]:  # noqa: ASYNC109 (the fetch timeout)
        """What the open request has delivered, at once if anything; else wait up to ``timeout`` for the
        first message (``TimeoutError`` if none). A new request, for at most ``room``, goes out only when
        none is open; with ``room`` 0 only what is already owed is taken."""
        sub = self._sub
        if sub is None:  # closed, and a rebind failed: the caller backs off and binds again
            raise PullRefused("not subscribed: open() first")
        give_up = time.monotonic() + timeout
        msgs: list[Msg] = []
        while True:
            self._sort_queued(sub, msgs)
            if msgs:
                return msgs  # a refusal sorted with them is raised by the next call
            if self._refused is not None:
                refused, self._refused = self._refused, None
                raise refused
            now = time.monotonic()
            request = self._request
            if request is not None and now >= request.lost_at:
                request = self._request = None
            if request is None and room > 0:
                request = await self._ask(room, now)  # also when a status just sorted ended the last one
            if now >= give_up:
                raise TimeoutError("no inbound message")
            wait = give_up - now if request is None else min(give_up, request.lost_at) - now
            with contextlib.suppress(NatsTimeoutError):
                self._sort(await sub.next_msg(timeout=max(wait, 0.001)), msgs)

    async def drop(self) -> list[Msg]:
        """Abandon the open request (a partition no longer ours): its later deliveries find no
        interest. Returns what it had already delivered, for the caller to give back."""
        msgs: list[Msg] = []
        if self._sub is not None:
            self._sort_queued(self._sub, msgs)
            await self.open()
        return msgs

    async def close(self) -> None:
        await self._unsubscribe()
        self._request = None

    async def _ask(self, room: int, now: float) -> _Request:
        self._sent += 1
        request = _Request(f"{self._inbox}.{self._sent}", room, now + self._expires_s + LOST_REQUEST_GRACE_S)
        body = orjson.dumps({"batch": room, "expires": int(self._expires_s * 1e9)})
        await self._nc.publish(self._next_subject, body, reply=request.reply)
        self._request = request
        return request

    def _sort_queued(self, sub: Subscription, msgs: list[Msg]) -> None:
        """Everything already queued, with nats-py's bookkeeping, and without nats-py's ``next_msg``:
        it wraps even a queued message in two tasks, a timer and a ``uuid4`` (~20 µs each)."""
        queue = sub._pending_queue
        while not queue.empty():
            msg: Msg = queue.get_nowait()
            sub._pending_size -= len(msg.data)
            queue.task_done()
            self._sort(msg, msgs)

    def _sort(self, msg: Msg, msgs: list[Msg]) -> None:
        """A delivered message joins ``msgs``; a status ends the request it answers (if still open)."""
        status = msg.headers.get("Status") if msg.headers else None
        request = self._request
        if status is None:
            msgs.append(msg)
            if request is not None:
                request.owed -= 1
                if request.owed <= 0:
                    self._request = None  # served in full: the server sends nothing more for it
            return
        if status == "100":  # an idle heartbeat (not asked for)
            return
        if request is None or msg.subject != request.reply:
            return  # the late status of a request already given up
        self._request = None
        description = (msg.headers or {}).get("Description", "")
        if status in ("404", "408") or (status == "409" and "Leadership Change" in description):
            return
        self._refused = PullRefused(f"{status} {description}".strip())

    async def _unsubscribe(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
