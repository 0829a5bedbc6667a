"""The inbound hot path: a pull loop over the durable consumer.

Per pulled batch (what the open pull request has delivered, handed over as it arrives:
``consumers/inbound_pull.py``): validate each message (bad ones go whole to the dead-letter
stream and are terminated) and admit the good ones to the pipeline
(``consumers/inbound_pipeline.py``), which records, stages, acks and hands off
each message as soon as its own recording is done, in stream order per session.
The loop pulls while the pipeline has room (``TURNSTILE_MAX_INBOUND_IN_FLIGHT``)
and the store takes writes (not ``degraded``). Its own pull requests are used instead of a
FastStream subscriber because FastStream's ``PullSub()`` pulls one message per
request (~0.3x throughput measured) and ``PullSub(batch=True)`` stalled under
paced load (see DESIGN.md, "Known pitfalls"), and instead of nats-py's ``fetch``, whose
return waits on a status the server sometimes sends only with the next message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from consumers.backoff import compute_backoff_s
from consumers.health import ServiceHealth
from consumers.inbound_decoding import decode_inbound
from consumers.inbound_pipeline import Handoff, InboundPipeline, InboundRecorder, Prefetch
from consumers.inbound_pull import InboundPull
from consumers.metrics import Metrics
from consumers.publisher import Publisher
from consumers.settings import Settings
from consumers.streams import ensure_streams
from consumers.task_stop import cancel_and_wait
from core.store.inbox import SqlInbox, StagedMessage
from schemas.subjects import Subjects
from schemas.wire import ErrorBody, InboundMessage

log = logging.getLogger(__name__)

STAGE_RETRY_DELAY_S = 1.0
SILENT_CHECK_EVERY_S = 15.0
FETCH_RETRY_FIRST_S = 0.5
FETCH_RETRY_MAX_S = 2.0
FENCE_POLL_S = 0.05  # how often a loop whose partition is in doubt looks again

__all__ = ["Handoff", "InboundLoop", "InboundRecorder"]


class InboundLoop:
    """Fetch → validate → admit to the pipeline (record → stage → ack → hand off), until stopped."""

    def __init__(
        self,
        js: JetStreamContext,
        settings: Settings,
        subjects: Subjects,
        publisher: Publisher,
        recorder: InboundRecorder,
        inbox: SqlInbox,
        handoff: Handoff,
        metrics: Metrics | None = None,
        *,
        consumer_name: str | None = None,
        fence: Callable[[], bool] | None = None,
        prefetch: Prefetch | None = None,
    ) -> None:
        """``consumer_name``: the durable to read (default: the settings'; one per partition when
        partitioned). ``fence``: False once this process may no longer take the consumer's work
        (a lost partition): fetched messages are then nacked, not staged."""
        self._js = js
        self.consumer_name = consumer_name or settings.consumer_name
        self._fence = fence
        self._metrics = metrics or Metrics()
        staged_count = self._metrics.inbound_staged

        async def counted_handoff(staged: StagedMessage, inbound: InboundMessage) -> None:
            staged_count.inc()  # the pipeline hands off each message once, when first staged
            await handoff(staged, inbound)

        self._settings = settings
        self._subjects = subjects
        self._publisher = publisher
        self.health = ServiceHealth(publisher)
        self.pipeline = InboundPipeline(
            recorder,
            inbox,
            counted_handoff,
            self.health,
            max_in_flight=settings.max_inbound_in_flight,
            heartbeat_s=settings.ack_wait_s / 3,
            fence=fence,
            prefetch=prefetch,
        )
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        # Fetched batches and messages read from the stream after max deliveries are admitted one at a
        # time, in the order this process learned of them (a session's lane keeps admission order).
        self._admitting = asyncio.Lock()

    @property
    def degraded(self) -> bool:
        """True while the store refuses writes: nothing new is fetched, staging is retried in place."""
        return self.health.degraded

    def start(self, recover: Callable[[], Awaitable[object]] | None = None) -> None:
        """Start fetching; ``recover`` (the partition's in-flight recovery) runs first, once the
        consumer's partition is ours (at once when it is)."""
        self.pipeline.start()
        self._task = asyncio.create_task(self._run(recover), name="inbound-loop")

    async def stop(self, drain_timeout_s: float | None = None) -> None:
        """Stop fetching; finish what is in flight within ``drain_timeout_s`` (default: fetch timeout + 5 s).

        What is not staged by then stays unacked and is redelivered.
        """
        self._stopping.set()
        if self._task is not None:
            # Not ``wait_for``: past its bound it cancels once and then waits for ever, and a cancel can be
            # lost below us (nats-py's fetch waits with ``wait_for`` itself: ``consumers/task_stop.py``).
            done, _ = await asyncio.wait([self._task], timeout=self._settings.fetch_timeout_s + 5)
            if done:
                self._task.result()  # the loop's own failure is the stop's, as before
            else:
                await cancel_and_wait(self._task)
        if drain_timeout_s is None:
            drain_timeout_s = self._settings.fetch_timeout_s + 5
        await self.pipeline.close(drain_timeout_s)

    async def _bind(self) -> InboundPull:
        # A deleted consumer (or inbound stream) would leave us binding to nothing for ever:
        # recreate it, and any missing stream, with the configured settings.
        try:
            await self._js.consumer_info(self._subjects.inbound_stream, self.consumer_name)
        except NotFoundError:
            log.warning(
                "inbound consumer %s on %s is missing; recreating the streams and the consumer",
                self.consumer_name, self._subjects.inbound_stream,
            )
            await ensure_streams(self._js, self._settings, self._subjects)
            log.info("inbound consumer %s recreated", self.consumer_name)
        return await InboundPull(
            self._js._nc, self._js._prefix, self._subjects.inbound_stream, self.consumer_name,
            self._settings.fetch_timeout_s,
        ).open()

    async def _run(self, recover: Callable[[], Awaitable[object]] | None) -> None:
        if recover is not None:
            if not await self._ours():
                return  # stopped before the partition was ours: its next owner recovers the range
            await recover()
        pull = await self._bind()
        last_check = time.monotonic()
        failures = 0  # consecutive failed fetches (connection trouble)
        while not self._stopping.is_set():
            if self._fence is not None and not self._fence():
                # No longer ours: abandon the open request, give back what it delivered, wait.
                await self.process_batch(await pull.drop())
                if not await self._ours():
                    continue  # stopping
            room = self.pipeline.room()
            if not room and not pull.owed:  # full, or the store refuses writes: take no new work
                await self.pipeline.wait_for_room(self._settings.fetch_timeout_s)
                continue
            try:
                msgs = await pull.take(min(self._settings.fetch_batch, room), self._settings.fetch_timeout_s)
            except TimeoutError:
                # A consumer deleted under us, or a subscription gone silent after a server restart
                # (nats.py #504): if the consumer has work but nothing arrives, bind afresh.
                if time.monotonic() - last_check > SILENT_CHECK_EVERY_S:
                    last_check = time.monotonic()
                    pull = await self._rebind_if_silent(pull)
                continue
            except Exception as exc:  # connection trouble or a refused pull: back off and bind afresh
                if self._stopping.is_set():
                    break
                failures += 1
                log.warning("inbound fetch failed (%r, %d in a row); binding afresh", exc, failures)
                await asyncio.sleep(compute_backoff_s(failures, base_s=FETCH_RETRY_FIRST_S, max_s=FETCH_RETRY_MAX_S))
                await pull.close()
                try:
                    pull = await self._bind()
                except Exception as bind_exc:
                    log.warning("rebinding the inbound consumer failed: %r", bind_exc)
                continue
            failures = 0
            try:
                await self.process_batch(msgs)
            except Exception:
                log.exception("inbound batch failed; its messages will be redelivered")
                for m in msgs:
                    await _quietly(m.nak(delay=STAGE_RETRY_DELAY_S))
            self.batches += 1
        await pull.close()

    async def _ours(self) -> bool:
        """Wait while the consumer's partition is not ours (in doubt, or lost and not yet stopped);
        False once stopping. Nothing is fetched meanwhile: a fetched message could only be nacked
        back, and each delivery counts towards MaxDeliver — a storm of them during a NATS leader
        election once made messages reach it and be given up (then dropped by the fenced reader)."""
        while self._fence is not None and not self._fence():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), FENCE_POLL_S)
            if self._stopping.is_set():
                return False
        return not self._stopping.is_set()

    async def _rebind_if_silent(self, pull: InboundPull) -> InboundPull:
        try:
            info = await self._js.consumer_info(self._subjects.inbound_stream, self.consumer_name)
        except NotFoundError:
            await pull.close()
            return await self._bind()
        except Exception:
            return pull
        if info.num_pending:
            log.warning("inbound consumer has %d pending but fetch is silent; binding afresh", info.num_pending)
            await pull.close()
            return await self._bind()
        return pull

    async def process_batch(self, msgs: list[Msg]) -> None:
        """Validate one fetched batch and admit its good messages (public so tests can drive it)."""
        async with self._admitting:
            await self._admit_batch(msgs)

    async def process_read(self, read: Callable[[], Awaitable[list[Msg]]]) -> None:
        """Admit what ``read`` returns ahead of every batch this loop fetches after the call.

        The turn is taken before ``read`` is awaited: a message JetStream gave up on, learned of from
        the MAX_DELIVERIES advisory, is not overtaken by its session's next message fetched while it is
        read from the stream.
        """
        async with self._admitting:
            if not await self._ours():
                # Stopped before the partition was ours again: not read, so not dropped. The message
                # stays below the consumer's ack floor, where its next owner's in-flight recovery reads it.
                return
            await self._admit_batch(await read())

    async def _admit_batch(self, msgs: list[Msg]) -> None:
        if self._fence is not None and not self._fence():
            await asyncio.gather(*(_quietly(m.nak()) for m in msgs))  # the partition's new owner takes them
            return
        self._metrics.inbound_received.inc(len(msgs))
        for m in msgs:
            decoded = decode_inbound(
                self._settings.prefix, m.subject, m.data, self._settings.max_inbound_bytes,
                self._settings.max_attachment_bytes,
            )
            if isinstance(decoded, ErrorBody):
                await self._reject(m, decoded)
            else:
                self.pipeline.admit(m, decoded)

    async def _reject(self, m: Msg, error: ErrorBody) -> None:
        try:
            stream_seq: int | None = m.metadata.sequence.stream
        except Exception:  # not a JetStream delivery (tests drive process_batch directly)
            stream_seq = None
        try:
            await self._publisher.dead_letter(
                m.subject, m.data, m.headers, error.code, error.message, stream_seq=stream_seq
            )
        except Exception as exc:
            # Not on the DLQ yet: let JetStream redeliver rather than lose it.
            log.warning("dead-lettering failed (%r); redelivering", exc)
            await _quietly(m.nak(delay=STAGE_RETRY_DELAY_S))
            return
        self._metrics.inbound_dead_lettered.labels(error.code).inc()
        log.info("dead-lettered inbound on %s: %s %s", m.subject, error.code, error.message)
        await _quietly(m.term())


async def _quietly(aw: Awaitable[object]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("ack/nak failed: %r", exc)
