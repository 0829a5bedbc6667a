"""TurnRunner: what a session actor does with one staged inbound message.

Order of a turn (DESIGN "Flow"): generation check → restore the engine session
from the last checkpoint if not loaded → stage the user message (checkpoint)
→ ``run_pending_turn`` (a checkpoint after every durable step) → generation
check → outbound reply → turn bookkeeping → inbox mark. A message already
answered before a crash is re-delivered from the engine's journal under the
same ``Nats-Msg-Id``, so JetStream deduplicates it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Protocol

import orjson

from consumers.publisher import Publisher
from core.errors import CheckpointFailed, TurnstileError
from core.store.inbox import DONE, DROPPED, SqlInbox, StagedMessage
from schemas.wire import Checkpoint, InboundMessage, OutboundReply

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.2
MAX_ERROR_CHARS = 200


class EngineSession(Protocol):
    """The slice of core.engine.Session the runner drives."""

    @property
    def pending_turn(self) -> bool: ...

    async def begin_user_turn(self, text: str, metadata: dict[str, Any]) -> bool: ...

    async def run_pending_turn(self, operation_id: str, checkpoint: Any) -> str | None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def answer_for_external_event(self, external_event_id: str) -> dict[str, Any] | None: ...

    def pending_external_event_id(self) -> str | None: ...

    def current_turn_id(self) -> str | None: ...

    def usage_since_last_call(self) -> tuple[int, int]: ...

    async def interrupt_current_turn(self) -> None: ...

    def cancel(self, operation_id: str) -> None: ...


class EngineFactory(Protocol):
    """Opens engine sessions, fresh or from a checkpoint snapshot."""

    async def open(self, session_id: str, restored: dict[str, Any] | None) -> EngineSession: ...

    async def clear(self, session_id: str) -> None: ...


class SessionBook(Protocol):
    """What the runner needs from the session manager."""

    def generation_of(self, session_id: str) -> int: ...

    async def turn_started(self, session_id: str) -> None: ...

    async def turn_ended(self, session_id: str, outcome: str, error: str | None, ended_at: float) -> None: ...

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int) -> None: ...


def external_id_of(inbound: InboundMessage) -> str:
    """The id a turn is keyed by: the platform's event id, else the inbound message id."""
    return inbound.external_event_id or f"inbound:{inbound.platform}:{inbound.id}"


class TurnRunner:
    """Runs the turns of one session, one message at a time."""

    def __init__(
        self,
        session_id: str,
        *,
        engines: EngineFactory,
        book: SessionBook,
        publisher: Publisher,
        inbox: SqlInbox,
        turn_slots: asyncio.Semaphore,
        mid_turn_policy: str = "enqueue",
    ) -> None:
        self.session_id = session_id
        self._engines = engines
        self._book = book
        self._pub = publisher
        self._inbox = inbox
        self._slots = turn_slots
        self.mid_turn_policy = mid_turn_policy
        self._engine: EngineSession | None = None
        self._generation: int | None = None
        self._checkpoint_seq: int | None = None
        self._operation: str | None = None
        self._turn_task: asyncio.Task[str | None] | None = None
        self._interrupt_requested = False
        self._rejected: set[tuple[str, str]] = set()

    # -- arrival policy -------------------------------------------------------
    def notice_arrival(self, inbound: InboundMessage, *, busy: bool) -> None:
        """Apply the mid-turn policy when a message arrives while a turn runs."""
        if not busy:
            return
        if self.mid_turn_policy == "interrupt" and self._turn_task is not None:
            self._interrupt_requested = True
            self._turn_task.cancel()
        elif self.mid_turn_policy == "reject":
            self._rejected.add((inbound.platform, inbound.id))

    # -- lifecycle --------------------------------------------------------------
    def unload(self) -> None:
        self._engine = None
        self._generation = None
        self._checkpoint_seq = None

    async def stop_running_turn(self) -> None:
        task = self._turn_task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except BaseException:
                pass

    async def _load(self, generation: int) -> EngineSession:
        if self._engine is not None and self._generation == generation:
            return self._engine
        last = await self._pub.last_checkpoint(self.session_id)
        restored: dict[str, Any] | None = None
        self._checkpoint_seq = 0
        if last is not None:
            seq, payload = last
            self._checkpoint_seq = seq
            try:
                cp = Checkpoint.model_validate(orjson.loads(payload))
            except Exception as exc:
                log.warning("session %s: unreadable checkpoint at %d (%r); starting fresh", self.session_id, seq, exc)
            else:
                if cp.generation == generation:
                    restored = cp.snapshot
        self._engine = await self._engines.open(self.session_id, restored)
        self._generation = generation
        return self._engine

    async def _checkpoint(self, snapshot: dict[str, Any], transition: str, inbound_id: str | None) -> None:
        assert self._generation is not None
        cp = Checkpoint(
            session_id=self.session_id,
            generation=self._generation,
            format_version=int(snapshot.get("format_version", 1)),
            state_version=int(snapshot.get("state_version", 0)),
            transition=str(snapshot.get("last_transition") or transition),
            inbound_id=inbound_id,
            at=time.time(),
            snapshot=snapshot,
        )
        self._checkpoint_seq = await self._pub.checkpoint(
            self.session_id, orjson.dumps(cp.model_dump()), self._checkpoint_seq
        )

    # -- one message --------------------------------------------------------------
    async def handle(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Serve one staged message; retried on transient failures, never raises for bad luck."""
        if staged.key in self._rejected:
            self._rejected.discard(staged.key)
            await self._drop(staged, inbound, "busy")
            return
        for attempt in range(RETRY_ATTEMPTS):
            try:
                await self._handle_once(staged, inbound)
                return
            except CheckpointFailed as exc:
                # Another writer, or the broker is unreachable: forget what we hold and reload.
                log.warning("session %s: %s (attempt %d)", self.session_id, exc.message, attempt + 1)
                self.unload()
                await asyncio.sleep(RETRY_BASE_DELAY_S * 2**attempt)
        log.error("session %s: giving up on %s for now; it stays staged", self.session_id, staged.message_id)

    async def _handle_once(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        sid = self.session_id
        # SM-22 / MQ-5: a message of an older generation is dropped before its turn.
        if staged.generation != self._book.generation_of(sid):
            await self._drop(staged, inbound, "stale_generation")
            return
        engine = await self._load(staged.generation)
        ext_id = external_id_of(inbound)
        previous = engine.answer_for_external_event(ext_id)
        if previous is not None:
            # Answered before a crash: deliver again; JetStream dedups on Nats-Msg-Id.
            await self._deliver(staged, inbound, previous)
            self._inbox.mark(staged, DONE)
            return
        if not (engine.pending_turn and engine.pending_external_event_id() == ext_id):
            if engine.pending_turn:
                # A turn from before a crash that nobody is waiting for any more: finish it first.
                await self._run_turn(engine, staged, None)
            metadata = {
                "external_event_id": ext_id,
                "inbound_id": inbound.id,
                "platform": inbound.platform,
                "sender": inbound.sender.model_dump() if inbound.sender else None,
                "attachments": [a.model_dump() for a in inbound.attachments],
            }
            if not await engine.begin_user_turn(inbound.text, metadata):
                await self._drop(staged, inbound, "empty_or_refused")
                return
            await self._checkpoint(engine.snapshot(), "message_staged", inbound.id)
        await self._book.turn_started(sid)
        await self._pub.emit(sid, "turn.started", {"inbound_id": inbound.id, "generation": staged.generation})
        outcome, error, answer = "error", None, None
        try:
            answer = await self._run_turn(engine, staged, inbound)
            outcome = "replied" if answer is not None else "silent"
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the actor itself is being shut down
            # The turn task alone was cancelled: an interrupt (mid-turn policy) or a deletion.
            self._interrupt_requested = False
            await engine.interrupt_current_turn()
            if self._book.generation_of(sid) == staged.generation:
                await self._checkpoint(engine.snapshot(), "interrupted", inbound.id)
            outcome = "aborted"
        except CheckpointFailed:
            raise
        except TurnstileError as exc:
            outcome, error = "error", f"{exc.code}: {exc.message}"[:MAX_ERROR_CHARS]
        except Exception as exc:
            log.exception("session %s: turn failed", sid)
            outcome, error = "error", repr(exc)[:MAX_ERROR_CHARS]
        # SM-22 / MQ-5: deleted while running → no outbound delivery.
        if self._book.generation_of(sid) != staged.generation:
            await self._drop(staged, inbound, "stale_generation")
            return
        if answer is not None:
            reply = engine.answer_for_external_event(ext_id) or {"text": answer}
            await self._deliver(staged, inbound, reply)
        tokens_in, tokens_out = engine.usage_since_last_call()
        if tokens_in or tokens_out:
            await self._book.add_usage(sid, tokens_in, tokens_out)
            await self._pub.emit(sid, "usage", {"input": tokens_in, "output": tokens_out})
        ended = time.time()
        await self._book.turn_ended(sid, outcome, error, ended)
        await self._pub.emit(
            sid,
            "turn.ended",
            {"inbound_id": inbound.id, "outcome": outcome, "error": error, "generation": staged.generation},
        )
        self._inbox.mark(staged, DONE)

    async def _run_turn(
        self, engine: EngineSession, staged: StagedMessage, inbound: InboundMessage | None
    ) -> str | None:
        inbound_id = inbound.id if inbound else None

        async def checkpoint(snapshot: dict[str, Any]) -> None:
            await self._checkpoint(snapshot, "step", inbound_id)

        self._operation = uuid.uuid4().hex
        async with self._slots:
            self._turn_task = asyncio.create_task(engine.run_pending_turn(self._operation, checkpoint))
            try:
                return await self._turn_task
            finally:
                self._turn_task = None
                self._operation = None

    async def _deliver(self, staged: StagedMessage, inbound: InboundMessage, answer: dict[str, Any]) -> None:
        assert self._generation is not None
        reply = OutboundReply(
            session_id=self.session_id,
            generation=staged.generation,
            turn_id=str(answer.get("turn_id") or external_id_of(inbound)),
            seq=int(answer.get("seq") or 1),
            reply_to=inbound.id,
            external_event_id=inbound.external_event_id,
            text=str(answer.get("text", "")),
            objects=list(answer.get("objects") or []),
        )
        await self._pub.outbound(inbound.platform, reply)

    async def _drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str) -> None:
        await self._pub.emit(
            self.session_id,
            "message.dropped",
            {"inbound_id": inbound.id, "reason": reason, "generation": staged.generation},
        )
        self._inbox.mark(staged, DROPPED)
