"""Publishing to JetStream: checkpoints (fenced), events, outbound replies, dead letters."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from consumers.backoff import compute_backoff_s
from consumers.buffered_publish import BufferedPublish, Payload, header_block, subject_bytes
from consumers.dead_letters import dead_letter_payload
from consumers.deadline import Deadline
from consumers.inline_delivery import subscribe_inline
from core.errors import CheckpointFailed, SubjectTooLong
from schemas.subjects import Subjects
from schemas.wire import OutboundReply

log = logging.getLogger(__name__)

WRONG_LAST_SEQUENCE = 10071
NO_RESPONDERS = "503"
# nats-server closes a connection whose protocol line passes max_control_line (4096 by
# default); nats-py does not check. The line also holds "HPUB", the reply and two sizes.
MAX_CONTROL_LINE_BYTES = 4096
CONTROL_LINE_RESERVE_BYTES = 64
SWEEP_MIN = 1024  # unanswered acks kept before the given-up ones are swept
# A publish answered "no responders" (its stream has no leader for a moment: an election after a
# node died or stepped down) is sent again after 0.25 s, then 0.5 s, then every 1 s (nats.go
# waits 250 ms between such retries, ADR-22).
RETRY_FIRST_WAIT_S = 0.25
RETRY_MAX_WAIT_S = 1.0
# A publish that can be sent twice without being stored twice (it carries a header: a fenced checkpoint,
# or a reply or an event with ``Nats-Msg-Id``) and has had no answer for 2–4 s is sent again: the answer
# can be lost when the leader it reached steps down or dies, or with the connection to a killed node.
RESEND_UNANSWERED_S = 2.0
# How long a publish's ack is waited for; a publish is sent again (above) only within it.
PUBLISH_TIMEOUT_S = 10.0
# header_block({"Nats-Expected-Last-Subject-Sequence": str(seq)}), formatted with the sequence in one step
FENCE_HEADER = b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: %d\r\n\r\n"
# An event's ``Nats-Msg-Id``: this publisher's random id and the event's number, formatted in one step.
EVENT_ID_HEADER = b"NATS/1.0\r\nNats-Msg-Id: %b%d\r\n\r\n"


class AckWaiter(Protocol):
    """What an ack resolves: an ``asyncio.Future[int]`` or a ``KeptAck``."""

    def done(self) -> bool: ...

    def set_result(self, result: int, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def exception(self) -> BaseException | None: ...


class KeptAck:
    """The ack of one publish, resolved in place by the ack handler and kept when the task waiting
    for it is cancelled (shutdown): the next ``result`` finds it. What ``asyncio.shield`` around a
    future gave, without its second future and loop callback, and with one timer per wait."""

    __slots__ = ("_done", "_error", "_seq", "_waiter", "payload", "resent")

    def __init__(self, payload: Payload | None = None) -> None:
        self.payload = payload  # what was published (a checkpoint: to recognise it stored when its answer was lost)
        self.resent = False  # set by ``StreamAcks`` when the publish is sent again
        self._done = False
        self._seq = 0
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, result: int, /) -> None:
        if not self._done:
            self._done, self._seq = True, result
            self._wake()

    def set_exception(self, exception: BaseException, /) -> None:
        if not self._done:
            self._done, self._error = True, exception
            self._wake()

    def exception(self) -> BaseException | None:
        return self._error

    def cancel(self) -> None:
        """Given up on (the chain reloaded): a late ack is ignored, the ack table forgets it."""
        self.set_exception(asyncio.CancelledError())

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def result(self, timeout_s: float, deadline: Deadline | None = None) -> int:
        """The stream sequence; the broker's refusal raised; TimeoutError when no ack came within ``timeout_s``.

        With ``deadline`` (a checkpoint chain's, kept across its waits) the timeout re-uses its timer
        instead of arming and cancelling one per wait."""
        if not self._done:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = None
            if deadline is None:
                timer = loop.call_later(timeout_s, _expire, waiter)
            else:
                deadline.start(timeout_s, functools.partial(_expire, waiter))
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                elif deadline is not None:
                    deadline.stop()
                self._waiter = None
        if self._error is not None:
            raise self._error
        return self._seq


# A publish whose ack is awaited: its waiter (None: nobody waits), whether a refusal is logged, and what
# was sent (subject, payload, header), kept to send it again.
Awaited = tuple[AckWaiter | None, bool, bytes, Payload, bytes | None]


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class StreamAcks:
    """JetStream publishes whose acks arrive on one reply subscription, matched by a counter.

    What ``JetStreamContext.publish_async`` does, without its per-publish costs on this hot
    path (a semaphore wait wrapped in a task and random bytes for every reply token; a
    turn makes ~10 publishes): one wildcard inbox whose acks are handled in the client's
    read loop (``consumers/inline_delivery.py``), an integer token per publish written
    straight into the connection's buffer (``consumers/buffered_publish.py``), the ack
    parsed with orjson into the stream sequence. Errors are nats-py's own (``APIError``
    with the server's ``err_code``; ``NoStreamResponseError`` when no stream listens).

    A publish answered "no responders" reached no stream, so nothing was stored: it is sent
    again, with the same reply token, until it is stored or ``retry_s`` has passed since the
    first such answer (then it fails with ``NoStreamResponseError``), or until its waiter
    gives up. A stream electing a leader (a node killed: seconds; a leader stepping down:
    tens of milliseconds) then delays its publishes instead of failing them, as nats.go's
    publish does. A retried publish keeps its place for ``stored_so_far``; a publish to
    the same stream sent after it may be stored before it.

    A publish with a header (its fence or its ``Nats-Msg-Id`` makes a second copy harmless)
    that has had no answer at all for ``resend_s`` to twice that is sent again the same way,
    until answered or given up on (one nobody waits for: ``retry_s`` after its first resend):
    one timer checks, every ``resend_s`` while acks are awaited. A publish without a header is
    never sent twice.
    """

    def __init__(
        self, nc: Client, *, retry_s: float = PUBLISH_TIMEOUT_S, resend_s: float = RESEND_UNANSWERED_S,
        retried: Callable[[], None] | None = None,
    ) -> None:
        self._nc = nc
        self.wire = BufferedPublish(nc)
        self._prefix = b""
        self._next = 0
        self._waiting: dict[int, Awaited] = {}  # by token, in the order sent
        self._retry_s = retry_s
        self._retried = retried
        # token -> (when its retries end, the number of its next retry): publishes answered "no responders"
        self._retrying: dict[int, tuple[float, int]] = {}
        self._resending: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references to tasks
        self._unwatched_resent: dict[int, float] = {}  # token -> when a publish nobody waits for was first resent
        self._resend_s = resend_s
        self._watch: asyncio.TimerHandle | None = None  # the unanswered-publish check, armed while acks are awaited
        self._watched_up_to = 0  # the newest token at the check before: older ones unanswered since are resent
        self._sweep_at = SWEEP_MIN
        # (token, future): resolved once no publish with a token up to ``token`` awaits its ack
        self._barriers: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def retrying(self) -> int:
        """Publishes answered "no responders" and not yet stored, each waiting to be sent again."""
        return len(self._retrying)

    async def _ensure_inbox(self) -> None:
        """The ack subscription, made on the first publish."""
        if not self._prefix:
            prefix = f"{self._nc.new_inbox()}."
            await subscribe_inline(self._nc, prefix + "*", self._on_ack)
            self._prefix = prefix.encode()

    async def send(
        self, subject: str, payload: bytes, header: bytes | None = None, *, log_failure: bool = False
    ) -> asyncio.Future[int]:
        """Publish now; the future resolves to the stored message's stream sequence.

        ``header``: a header block (``buffered_publish.header_block``). ``log_failure``: a
        refusal is logged here (pipelined publishes, whose callers only learn that one of a
        batch failed). SubjectTooLong (nothing sent) when the subject would not fit the
        server's control line.
        """
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        await self.send_to(future, subject, payload, header, log_failure=log_failure)
        return future

    async def send_unwatched(self, subject: str, payload: bytes, header: bytes | None = None) -> None:
        """Publish now with an ack nobody waits for (no future): a refusal is only logged."""
        await self.send_to(None, subject, payload, header, log_failure=True)

    async def send_to(
        self, waiter: AckWaiter | None, subject: str, payload: Payload, header: bytes | None = None,
        *, log_failure: bool = False,
    ) -> None:
        """``send`` whose ack resolves ``waiter`` (a future, a ``KeptAck``, or None: nobody waits)."""
        if not self._prefix:
            await self._ensure_inbox()
        subj, reply, token = self._register(subject, waiter, log_failure, payload, header)
        if self._watch is None:
            self._arm_watch()
        try:
            await self.wire.publish(subj, payload, reply, header)
        except BaseException:
            self._forget(token)  # not sent (or not known to be): no ack will name it
            raise

    def _forget(self, token: int) -> Awaited | None:
        """Stop awaiting ``token``'s ack (answered, failed or given up on): its entry, or None if it had none."""
        waiting = self._waiting.pop(token, None)
        if self._retrying:
            self._retrying.pop(token, None)
        if self._unwatched_resent:
            self._unwatched_resent.pop(token, None)
        if self._barriers:
            self._pass_barriers()
        return waiting

    def _register(
        self, subject: str, waiter: AckWaiter | None, log_failure: bool, payload: Payload, header: bytes | None
    ) -> tuple[bytes, bytes, int]:
        """The encoded subject, the reply and the token of the next publish, its ack now awaited.
        SubjectTooLong when the subject would not fit the control line."""
        subj = subject_bytes(subject)
        self._next += 1
        token = self._next
        reply = b"%b%d" % (self._prefix, token)
        if len(subj) + len(reply) + CONTROL_LINE_RESERVE_BYTES > MAX_CONTROL_LINE_BYTES:
            raise SubjectTooLong(f"subject of {len(subj)} bytes does not fit the server's control line")
        if len(self._waiting) >= self._sweep_at:
            self._sweep()
        # No done-callbacks on the hot path (each costs a loop callback when the ack lands): the
        # ack handler forgets the token; a future given up on (cancelled) is swept later.
        self._waiting[token] = (waiter, log_failure, subj, payload, header)
        return subj, reply, token

    def _sweep(self) -> None:
        """Forget acks nobody waits for any more (cancelled after a timeout; unwatched ones not
        answered by now: the broker answers a stored publish at once)."""
        self._waiting = {t: w for t, w in self._waiting.items() if w[0] is not None and not w[0].done()}
        self._retrying = {t: r for t, r in self._retrying.items() if t in self._waiting}
        self._unwatched_resent = {t: r for t, r in self._unwatched_resent.items() if t in self._waiting}
        self._sweep_at = max(SWEEP_MIN, 2 * len(self._waiting))
        if self._barriers:
            self._pass_barriers()

    async def stored_so_far(self, timeout_s: float) -> bool:
        """Wait until every publish sent before this call is answered (stored or refused); False if
        some are not within ``timeout_s``. Streams store independently, so the order of publishes on
        the connection is not the order in which different streams store them: a publish that must
        be stored after all earlier ones (``session.deleted`` after the session's last replies)
        waits for this first."""
        if not self._waiting:
            return True
        barrier: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._next, barrier)
        self._barriers.append(entry)
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: it can lose a cancel (task_stop.py)
                await barrier
        except TimeoutError:
            return False
        finally:
            if entry in self._barriers:
                self._barriers.remove(entry)
        return True

    def _pass_barriers(self) -> None:
        """Resolve the barriers no earlier publish holds up (tokens enter ``_waiting`` in order, so
        its first key is the oldest ack still awaited)."""
        oldest = next(iter(self._waiting), None)
        kept = []
        for token, barrier in self._barriers:
            if oldest is None or oldest > token:
                if not barrier.done():
                    barrier.set_result(None)
            else:
                kept.append((token, barrier))
        self._barriers = kept

    def _on_ack(self, subject: bytes, data: bytes, headers: dict[str, str] | None) -> None:
        """An ack, in the client's read loop: resolve (or fail) its publish's future."""
        try:
            token = int(subject[len(self._prefix):])
        except ValueError:
            return
        if headers and headers.get("Status") == NO_RESPONDERS and self._retry_later(token):
            return
        waiting = self._forget(token)
        if waiting is None:
            return
        future, log_failure = waiting[0], waiting[1]
        if future is None:
            if log_failure:
                self._log_refusal(data, headers)
            return
        if future.done():
            return
        if headers and headers.get("Status") == NO_RESPONDERS:
            self._fail(future, NoStreamResponseError(), log_failure)
            return
        try:
            ack = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            self._fail(future, exc, log_failure)
            return
        if "error" in ack:
            try:
                APIError.from_error(ack["error"])  # raises the matching nats-py error
            except APIError as exc:
                self._fail(future, exc, log_failure)
        else:
            future.set_result(int(ack.get("seq", 0)))

    def _retry_later(self, token: int) -> bool:
        """A "no responders" answer to ``token``: schedule its publish again and keep it awaited;
        False when it is not awaited any more, its waiter gave up, or its retries are over."""
        waiting = self._waiting.get(token)
        if waiting is None or (waiting[0] is not None and waiting[0].done()):
            return False
        loop = asyncio.get_running_loop()
        now = loop.time()
        ends, attempt = self._retrying.get(token, (now + self._retry_s, 1))
        wait = compute_backoff_s(attempt, base_s=RETRY_FIRST_WAIT_S, max_s=RETRY_MAX_WAIT_S)
        if now + wait > ends:
            return False
        if not self._retrying:
            log.warning("a stream answered no responders (electing a leader?): its publishes are sent again "
                        "for up to %.1f s", self._retry_s)
        self._retrying[token] = (ends, attempt + 1)
        loop.call_later(wait, self._send_again, token)
        return True

    def _arm_watch(self) -> None:
        self._watched_up_to = self._next - 1  # the publish being registered is looked at from the next check on
        self._watch = asyncio.get_running_loop().call_later(self._resend_s, self._check_unanswered)

    def _check_unanswered(self) -> None:
        """Send again the header-carrying publishes unanswered since the check before; re-arm while
        acks are awaited."""
        up_to, self._watched_up_to = self._watched_up_to, self._next
        now = asyncio.get_running_loop().time()
        unanswered, given_up = [], []
        for token, waiting in self._waiting.items():
            if token > up_to:
                break
            waiter, header = waiting[0], waiting[4]
            if header is None or token in self._retrying:
                continue
            if waiter is None:  # nobody waits to give up on it: resent for ``retry_s``
                if now - self._unwatched_resent.setdefault(token, now) > self._retry_s:
                    given_up.append(token)
                    continue
            elif waiter.done():
                continue
            unanswered.append(token)
        if given_up:
            log.error("%d pipelined publishes were not acknowledged: no answer in %.0f s", len(given_up), self._retry_s)
            for token in given_up:
                self._forget(token)
        if unanswered:
            log.warning("%d publishes had no answer for %.0f s (their stream's leader gone?): sent again",
                        len(unanswered), self._resend_s)
            for token in unanswered:
                self._send_again(token)
        if self._waiting:
            self._watch = asyncio.get_running_loop().call_later(self._resend_s, self._check_unanswered)
        else:
            self._watch = None

    def _send_again(self, token: int) -> None:
        """Publish ``token``'s message again (its reply token unchanged), unless it is settled or given up on."""
        waiting = self._waiting.get(token)
        if waiting is None:
            self._retrying.pop(token, None)
            return
        if waiting[0] is not None and waiting[0].done():  # its waiter gave up: nothing holds a barrier for it
            self._forget(token)
            return
        if self._retried is not None:
            self._retried()
        if isinstance(waiting[0], KeptAck):
            waiting[0].resent = True
        task = asyncio.get_running_loop().create_task(self._publish_again(token, waiting))
        self._resending.add(task)
        task.add_done_callback(self._resending.discard)

    async def _publish_again(
        self, token: int, waiting: Awaited
    ) -> None:
        waiter, log_failure, subj, payload, header = waiting
        try:
            await self.wire.publish(subj, payload, b"%b%d" % (self._prefix, token), header)
        except Exception as exc:  # the connection closed or is draining: fail as a first send would
            if self._forget(token) is not None:
                if waiter is None:
                    log.error("a pipelined publish was not acknowledged: %r", exc)
                elif not waiter.done():
                    self._fail(waiter, exc, log_failure)

    @staticmethod
    def _log_refusal(data: bytes, headers: dict[str, str] | None) -> None:
        """An unwatched publish's ack: log it when it says the publish was not stored."""
        if headers and headers.get("Status") == NO_RESPONDERS:
            log.error("a pipelined publish was not acknowledged: %r", NoStreamResponseError())
            return
        try:
            ack = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            log.error("a pipelined publish was not acknowledged: %r", exc)
            return
        if "error" in ack:
            log.error("a pipelined publish was not acknowledged: %r", ack["error"])

    @staticmethod
    def _fail(future: AckWaiter, exc: Exception, log_failure: bool) -> None:
        if log_failure:
            log.error("a pipelined publish was not acknowledged: %r", exc)
        future.set_exception(exc)
        future.exception()  # retrieved: a caller that only counts failures leaves no "never retrieved" warning


class Publisher:
    """Thin JetStream publisher: checkpoints fenced, their acks awaited by the caller
    (``consumers/checkpoints.py``); events and replies pipelined and settled later."""

    def __init__(
        self, nc: Client, js: JetStreamContext, subjects: Subjects, timeout_s: float = PUBLISH_TIMEOUT_S,
        dlq_raw_max_bytes: int = 16_384, retried: Callable[[], None] | None = None,
        resend_s: float = RESEND_UNANSWERED_S, direct_gets: bool = False,
    ) -> None:
        """``retried``: called each time a publish is sent again (answered "no responders", or unanswered).
        ``direct_gets``: read checkpoints with a direct get (``last_checkpoint``); only where the
        checkpoint stream has one replica, so the answer cannot come from a follower behind its leader."""
        self.js = js
        self._direct_gets = direct_gets
        self.subjects = subjects
        self.timeout_s = timeout_s
        self.dlq_raw_max_bytes = dlq_raw_max_bytes
        self._nc = nc
        self._acks = StreamAcks(nc, retry_s=timeout_s, resend_s=resend_s, retried=retried)
        # Events' Nats-Msg-Id: unique to this publisher (a random id) and the event (a count).
        self._event_ids = f"{uuid.uuid4().hex[:16]}-".encode()
        self._events = 0

    def _event_header(self) -> bytes:
        self._events += 1
        return EVENT_ID_HEADER % (self._event_ids, self._events)

    async def stored_so_far(self) -> bool:
        """Wait until every publish sent so far is answered (``StreamAcks.stored_so_far``); False
        if some are not within ``timeout_s``."""
        return await self._acks.stored_so_far(self.timeout_s)

    async def settle(self, futures: list[asyncio.Future[Any]]) -> bool:
        """Wait for the acks of ``futures``; False if any failed or did not come within ``timeout_s``."""
        pending = [f for f in futures if not f.done()]
        if any(f.cancelled() or f.exception() is not None for f in futures if f.done()):
            return False
        if not pending:
            return True
        done, not_done = await asyncio.wait(pending, timeout=self.timeout_s)
        for future in not_done:
            future.cancel()
        ok = not not_done
        for future in done:
            if future.cancelled() or future.exception() is not None:
                ok = False
        return ok

    async def send_checkpoint(self, session_id: str, payload: Payload, expected_last_seq: int | None) -> KeptAck:
        """Send a checkpoint fenced on ``expected_last_seq``; ``checkpoint_acked`` awaits its ack."""
        header = None if expected_last_seq is None else FENCE_HEADER % expected_last_seq
        acked = KeptAck(payload)
        try:
            await self._acks.send_to(acked, self.subjects.checkpoint(session_id), payload, header)
        except Exception as exc:
            raise CheckpointFailed(f"checkpoint for {session_id!r} not sent: {exc!r}") from exc
        return acked

    async def checkpoint_acked(
        self, session_id: str, acked: KeptAck, expected_last_seq: int | None, deadline: Deadline | None = None
    ) -> int:
        """The stored checkpoint's subject sequence; CheckpointFailed if the broker refused or never answered
        within ``timeout_s``. A cancelled wait leaves the ack to the next call."""
        try:
            return await acked.result(self.timeout_s, deadline)
        except APIError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                stored = await self._stored_before_its_resend(session_id, acked, expected_last_seq)
                if stored is not None:
                    return stored
                raise CheckpointFailed(
                    f"checkpoint for {session_id!r} refused: another worker wrote one since sequence {expected_last_seq}"
                ) from exc
            raise CheckpointFailed(f"checkpoint for {session_id!r} refused by the broker: {exc}") from exc
        except Exception as exc:
            raise CheckpointFailed(f"checkpoint for {session_id!r} not acknowledged: {exc!r}") from exc

    async def _stored_before_its_resend(
        self, session_id: str, acked: KeptAck, expected_last_seq: int | None
    ) -> int | None:
        """A resent checkpoint refused by its fence: its first copy may be the one stored, its answer lost
        (a leader stepping down). The stored sequence when the session's last checkpoint, written after
        the fence, is this very payload; else None (another writer)."""
        if not acked.resent or acked.payload is None:
            return None
        try:
            last = await self.last_checkpoint(session_id)
        except Exception:  # unreadable now: the refusal stands, the runner reloads
            return None
        payload = acked.payload if isinstance(acked.payload, bytes) else b"".join(acked.payload)
        if last is not None and last[0] > (expected_last_seq or 0) and last[1] == payload:
            return last[0]
        return None

    async def last_checkpoint(self, session_id: str) -> tuple[int, bytes] | None:
        """The newest checkpoint of a session as (subject sequence, payload), or None.

        With ``direct_gets`` a ``DIRECT.GET``: the stream answers with the stored message itself, where
        the JetStream API's message get answers with JSON holding it in base64 (a cold reopen's get
        0.55 → 0.37 ms, bench/README.md). Otherwise the API's get, which the stream's leader answers.
        A direct get nobody answers (the stream's ``allow_direct`` turned off since start-up: it times
        out) is asked again through the API; if that answers, this process reads through the API from
        then on."""
        stream, subject = self.subjects.checkpoint_stream, self.subjects.checkpoint(session_id)
        try:
            try:
                msg = await self.js.get_last_msg(stream, subject, direct=self._direct_gets)
            except (NoRespondersError, NatsTimeoutError) as exc:
                if not self._direct_gets:
                    raise
                msg = await self.js.get_last_msg(stream, subject)
                self._direct_gets = False
                log.warning("a direct get on %s was not answered (%r) and the API's was: reading checkpoints "
                            "through the API from now on (allow_direct off?)", stream, exc)
        except NotFoundError:
            return None
        return int(msg.seq or 0), bytes(msg.data or b"")

    async def emit(self, session_id: str | None, event_type: str, data: dict[str, Any]) -> asyncio.Future[Any]:
        """Publish an event (wire model ``schemas.wire.Event``) on ``<prefix>.events.<sid>.<type>``; pipelined:
        sent now, its ack collected later (``settle``), so publishes keep their order on the connection and
        a turn does not wait one broker round trip (and fsync) per event. A refusal is logged. Its
        ``Nats-Msg-Id`` lets a copy sent again after a lost answer be dropped by the stream."""
        event = {"type": event_type, "session_id": session_id, "at": time.time(), "data": data}
        return await self._acks.send(
            self.subjects.event(session_id, event_type), orjson.dumps(event), self._event_header(), log_failure=True
        )

    async def emit_unwatched(self, session_id: str | None, event_type: str, data: dict[str, Any]) -> None:
        """``emit`` whose ack nobody waits for (no future is made); a refusal is logged."""
        event = {"type": event_type, "session_id": session_id, "at": time.time(), "data": data}
        await self._acks.send_unwatched(
            self.subjects.event(session_id, event_type), orjson.dumps(event), self._event_header()
        )

    async def outbound(self, platform: str, reply: OutboundReply) -> asyncio.Future[Any]:
        """Publish a reply with ``Nats-Msg-Id`` = ``<sid>:<turn>:<seq>`` (a resumed turn cannot duplicate it); pipelined."""
        msg_id = f"{reply.session_id}:{reply.turn_id}:{reply.seq}"
        return await self._acks.send(
            self.subjects.outbound(platform, reply.session_id),
            orjson.dumps(reply.model_dump()),
            header_block({"Nats-Msg-Id": msg_id}),
            log_failure=True,
        )

    async def ephemeral(self, subject: str, payload: bytes) -> None:
        """Publish on core NATS only (no stream stores it, no ack): turn progress (``consumers/turn_stream.py``)."""
        await self._acks.wire.publish(subject_bytes(subject), payload)

    async def dead_letter(
        self, subject: str, raw: bytes, headers: dict[str, str] | None, code: str, message: str,
        *, stream_seq: int | None = None, session_id: str | None = None, dlq_subject: str | None = None,
        msg_id: str | None = None,
    ) -> None:
        """Put a rejected raw input on the dead-letter stream with its error (default subject
        ``<prefix>.dlq.inbound``; a message given up after its turn kept failing: ``dlq_subject``).
        The letter always fits (a bounded prefix of ``raw`` plus its size, sha256 and
        ``stream_seq``: ``consumers/dead_letters.py``)."""
        payload = dead_letter_payload(
            subject=subject,
            raw=raw,
            headers=headers,
            code=code,
            message=message,
            stream_seq=stream_seq,
            session_id=session_id,
            raw_max_bytes=self.dlq_raw_max_bytes,
            max_payload_bytes=self._nc.max_payload,
        )
        dlq_headers = {"Turnstile-Error-Code": code}
        if msg_id is not None:
            dlq_headers["Nats-Msg-Id"] = msg_id
        await self.js.publish(
            dlq_subject or self.subjects.dlq_inbound, payload, timeout=self.timeout_s, headers=dlq_headers,
        )
