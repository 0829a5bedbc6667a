"""The inbound hot path: a raw nats-py fetch loop over the durable pull consumer.

Per fetched batch: validate each message (bad ones go whole to the dead-letter
stream and are terminated), await ``record_inbound`` for the good ones, stage
them in one transaction with their generation, ack, then hand the new ones to
their session actors in arrival order. A raw fetch loop is used instead of a
FastStream subscriber because FastStream's ``PullSub()`` pulls one message per
request (~0.3x throughput measured) and ``PullSub(batch=True)`` stalled under
paced load (see DESIGN.md, "Known pitfalls").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from consumers.codec import decode_inbound
from consumers.publisher import Publisher
from consumers.settings import Settings
from consumers.streams import ensure_streams
from core.store.inbox import SqlInbox, StagedMessage
from schemas.subjects import Subjects
from schemas.wire import ErrorBody, InboundMessage

log = logging.getLogger(__name__)

STAGE_RETRY_DELAY_S = 1.0
SILENT_CHECK_EVERY_S = 15.0


class InboundRecorder(Protocol):
    """What the loop needs from the session manager."""

    async def record_inbound(self, message: InboundMessage) -> None: ...

    def generation_of(self, session_id: str) -> int: ...


Handoff = Callable[[StagedMessage, InboundMessage], Awaitable[None]]


class InboundLoop:
    """Fetch → validate → record → stage → ack → hand off, until stopped."""

    def __init__(
        self,
        js: JetStreamContext,
        settings: Settings,
        subjects: Subjects,
        publisher: Publisher,
        recorder: InboundRecorder,
        inbox: SqlInbox,
        handoff: Handoff,
    ) -> None:
        self._js = js
        self._settings = settings
        self._subjects = subjects
        self._publisher = publisher
        self._recorder = recorder
        self._inbox = inbox
        self._handoff = handoff
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="inbound-loop")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self._settings.fetch_timeout_s + 5)
            except TimeoutError:
                self._task.cancel()

    async def _bind(self) -> JetStreamContext.PullSubscription:
        # A deleted consumer (or inbound stream) would leave us binding to nothing for ever:
        # recreate it, and any missing stream, with the configured settings.
        try:
            await self._js.consumer_info(self._subjects.inbound_stream, self._settings.consumer_name)
        except NotFoundError:
            log.warning(
                "inbound consumer %s on %s is missing; recreating the streams and the consumer",
                self._settings.consumer_name, self._subjects.inbound_stream,
            )
            await ensure_streams(self._js, self._settings, self._subjects)
            log.info("inbound consumer %s recreated", self._settings.consumer_name)
        return await self._js.pull_subscribe_bind(
            durable=self._settings.consumer_name, stream=self._subjects.inbound_stream
        )

    async def _run(self) -> None:
        psub = await self._bind()
        last_check = time.monotonic()
        while not self._stopping.is_set():
            try:
                msgs = await psub.fetch(self._settings.fetch_batch, timeout=self._settings.fetch_timeout_s)
            except (NatsTimeoutError, TimeoutError):
                # A pull subscription can go silent after a server restart (nats.py #504):
                # if the consumer has work but we keep timing out, bind afresh.
                if time.monotonic() - last_check > SILENT_CHECK_EVERY_S:
                    last_check = time.monotonic()
                    psub = await self._rebind_if_silent(psub)
                continue
            except Exception as exc:  # connection trouble: back off and bind afresh
                if self._stopping.is_set():
                    break
                log.warning("inbound fetch failed (%r); binding afresh", exc)
                await asyncio.sleep(0.5)
                try:
                    await psub.unsubscribe()
                except Exception:
                    pass
                try:
                    psub = await self._bind()
                except Exception as bind_exc:
                    log.warning("rebinding the inbound consumer failed: %r", bind_exc)
                continue
            try:
                await self.process_batch(msgs)
            except Exception:
                log.exception("inbound batch failed; its messages will be redelivered")
                for m in msgs:
                    await _quietly(m.nak(delay=STAGE_RETRY_DELAY_S))
            self.batches += 1
        try:
            await psub.unsubscribe()
        except Exception:
            pass

    async def _rebind_if_silent(
        self, psub: JetStreamContext.PullSubscription
    ) -> JetStreamContext.PullSubscription:
        try:
            info = await self._js.consumer_info(self._subjects.inbound_stream, self._settings.consumer_name)
        except NotFoundError:
            return await self._bind()
        except Exception:
            return psub
        if info.num_pending or info.num_ack_pending:
            if info.num_pending:
                log.warning("inbound consumer has %d pending but fetch is silent; binding afresh", info.num_pending)
                try:
                    await psub.unsubscribe()
                except Exception:
                    pass
                return await self._bind()
        return psub

    async def process_batch(self, msgs: list[Msg]) -> None:
        """Handle one fetched batch (public so tests can drive it directly)."""
        good: list[tuple[Msg, InboundMessage]] = []
        for m in msgs:
            decoded = decode_inbound(self._settings.prefix, m.subject, m.data, self._settings.max_inbound_bytes)
            if isinstance(decoded, ErrorBody):
                await self._reject(m, decoded)
            else:
                good.append((m, decoded))
        if not good:
            return
        # SM-17 / MQ-1: record_inbound is awaited before any handoff. Concurrent calls
        # for one session share one recording inside the manager.
        await asyncio.gather(*(self._recorder.record_inbound(inb) for _, inb in good))
        staged = [
            StagedMessage(
                platform=inb.platform,
                message_id=inb.id,
                session_id=inb.session_id,
                generation=self._recorder.generation_of(inb.session_id) if inb.session_id else 0,
                payload=m.data,
            )
            for m, inb in good
        ]
        try:
            fresh = await self._inbox.stage(staged)
        except Exception as exc:
            log.warning("staging %d inbound messages failed (%r); redelivering", len(staged), exc)
            for m, _ in good:
                await _quietly(m.nak(delay=STAGE_RETRY_DELAY_S))
            return
        # MQ-8: ack only after the batch is durably staged.
        await asyncio.gather(*(_quietly(m.ack()) for m, _ in good))
        for (_, inb), item, is_new in zip(good, staged, fresh):
            if is_new:
                await self._handoff(item, inb)

    async def _reject(self, m: Msg, error: ErrorBody) -> None:
        try:
            await self._publisher.dead_letter(m.subject, m.data, m.headers, error.code, error.message)
        except Exception as exc:
            # Not on the DLQ yet: let JetStream redeliver rather than lose it.
            log.warning("dead-lettering failed (%r); redelivering", exc)
            await _quietly(m.nak(delay=STAGE_RETRY_DELAY_S))
            return
        log.info("dead-lettered inbound on %s: %s %s", m.subject, error.code, error.message)
        await _quietly(m.term())


async def _quietly(aw: Awaitable[object]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("ack/nak failed: %r", exc)
