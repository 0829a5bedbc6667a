"""TurnRunner: what a session actor does with one staged inbound message.

Order of a turn (DESIGN "Flow"): generation check → restore the engine session
from the last checkpoint if not loaded → stage the user message (checkpoint)
→ ``run_pending_turn`` (a checkpoint after every durable step) → generation
check → outbound replies → turn bookkeeping → inbox mark. A message answered
before a crash is delivered again from the engine's state under the same
``Nats-Msg-Id`` (``<sid>:<turn_id>:<seq>``), which JetStream deduplicates.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Protocol

import orjson

from consumers.publisher import Publisher
from core.engine import Session
from core.errors import Cancelled, CheckpointFailed, TurnstileError
from core.store.inbox import DONE, DROPPED, SqlInbox, StagedMessage
from schemas.wire import Checkpoint, InboundMessage, OutboundReply

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.2
MAX_ERROR_CHARS = 200


class EngineFactory(Protocol):
    """Opens engine sessions, fresh or from a checkpoint snapshot."""

    async def open(self, session_id: str, restored: dict[str, Any] | None) -> Session: ...

    async def clear(self, session_id: str) -> None: ...


class SessionBook(Protocol):
    """What the runner needs from the session manager (turn bookkeeping, generations)."""

    def generation_of(self, session_id: str) -> int: ...

    async def turn_started(self, session_id: str) -> None: ...

    async def turn_ended(self, session_id: str, outcome: str, error: str | None, ended_at: float) -> None: ...

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int) -> None: ...


def external_id_of(inbound: InboundMessage) -> str:
    """The id a turn is keyed by: the platform's event id, else one derived from the inbound message id."""
    return inbound.external_event_id or f"inbound:{inbound.platform}:{inbound.id}"


def transition_of(snapshot: dict[str, Any]) -> str:
    """Name the durable step a snapshot was taken after: the kind of its newest journal entry."""
    transcript = snapshot.get("transcript") or []
    if not transcript:
        return "opened"
    last = transcript[-1]
    kind = str(last.get("kind") or "step")
    if kind == "event":
        return str((last.get("payload") or {}).get("type") or kind)
    return kind


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
        self._engine: Session | None = None
        self._generation: int | None = None
        self._checkpoint_seq: int | None = None
        self._operation: str | None = None
        self._stop_reason: str | None = None
        self._rejected: set[tuple[str, str]] = set()

    # -- arrival policy ---------------------------------------------------------------
    def notice_arrival(self, inbound: InboundMessage, *, busy: bool) -> None:
        """Apply the mid-turn policy to a message that arrives while a turn runs."""
        if not busy:
            return
        if self.mid_turn_policy == "interrupt":
            self._cancel_running("interrupt")
        elif self.mid_turn_policy == "reject":
            self._rejected.add((inbound.platform, inbound.id))

    def _cancel_running(self, reason: str) -> None:
        if self._engine is not None and self._operation is not None:
            self._stop_reason = reason
            self._engine.cancel(self._operation)

    # -- lifecycle ----------------------------------------------------------------------
    def unload(self) -> None:
        """Forget the loaded session; the next message restores it from its last checkpoint."""
        self._engine = None
        self._generation = None
        self._checkpoint_seq = None

    async def stop_running_turn(self) -> None:
        """Cancel the running turn, if any (deletion stops it before the data clear)."""
        self._cancel_running("deleted")

    async def release(self) -> None:
        if self._engine is not None:
            await self._engine.release_managed_sources()

    async def _load(self, generation: int) -> Session:
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
                log.warning("session %s: unreadable checkpoint at %d (%r); folding the journal", self.session_id, seq, exc)
            else:
                if cp.generation == generation:
                    restored = cp.snapshot
        self._engine = await self._engines.open(self.session_id, restored)
        self._generation = generation
        return self._engine

    def _checkpointer(self, inbound_id: str | None, transition: str | None = None) -> Any:
        async def checkpoint(snapshot: dict[str, Any]) -> None:
            assert self._generation is not None
            cp = Checkpoint(
                session_id=self.session_id,
                generation=self._generation,
                format_version=int(snapshot.get("format_version", 1)),
                state_version=int(snapshot.get("state_version", 0)),
                transition=transition or transition_of(snapshot),
                inbound_id=inbound_id,
                at=time.time(),
                snapshot=snapshot,
            )
            self._checkpoint_seq = await self._pub.checkpoint(
                self.session_id, orjson.dumps(cp.model_dump()), self._checkpoint_seq
            )

        return checkpoint

    # -- one message ----------------------------------------------------------------------
    async def handle(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Serve one staged message; transient failures are retried, then it stays staged."""
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
        checkpoint = self._checkpointer(inbound.id)
        ext_id = external_id_of(inbound)
        if engine.answer_for_external_event(ext_id) is not None and engine.pending_external_event_id != ext_id:
            # Answered before a crash or replayed: deliver again; JetStream dedups on Nats-Msg-Id.
            await self._deliver_previous(staged, inbound, engine, ext_id)
            self._inbox.mark(staged, DONE)
            return
        if not (engine.pending_turn and engine.pending_external_event_id == ext_id):
            if engine.pending_turn:
                # A turn left pending by a crash whose message is no longer waiting: close it first.
                await engine.interrupt_current_turn(checkpoint=checkpoint)
            metadata = {
                "external_event_id": ext_id,
                "inbound_id": inbound.id,
                "principal": inbound.sender.user_id if inbound.sender else None,
                "attachments": [a.model_dump(exclude_none=True) for a in inbound.attachments],
            }
            try:
                began = await engine.begin_user_turn(
                    inbound.text, metadata, checkpoint=self._checkpointer(inbound.id, "message_staged")
                )
            except CheckpointFailed:
                raise
            except TurnstileError as exc:
                await self._drop(staged, inbound, exc.code, exc.message)
                return
            if not began:
                await self._drop(staged, inbound, "not_staged", "empty input, a completed session or a duplicate")
                return
        await self._book.turn_started(sid)
        await self._pub.emit(sid, "turn.started", {"inbound_id": inbound.id, "turn_id": engine.turn_id,
                                                    "generation": staged.generation})
        outcome, error = await self._run(engine, checkpoint)
        # SM-22 / MQ-5: deleted while running → no outbound delivery.
        if self._book.generation_of(sid) != staged.generation:
            await self._drop(staged, inbound, "stale_generation")
            return
        if outcome == "replied":
            await self._deliver_outputs(staged, inbound, engine)
        usage = engine.last_usage
        if usage.input_tokens or usage.output_tokens:
            await self._book.add_usage(sid, usage.input_tokens, usage.output_tokens)
            await self._pub.emit(sid, "usage", {"input": usage.input_tokens, "output": usage.output_tokens})
        await self._book.turn_ended(sid, outcome, error, time.time())
        await self._pub.emit(
            sid,
            "turn.ended",
            {"inbound_id": inbound.id, "turn_id": engine.turn_id, "outcome": outcome, "error": error,
             "generation": staged.generation},
        )
        self._inbox.mark(staged, DONE)

    async def _run(self, engine: Session, checkpoint: Any) -> tuple[str, str | None]:
        """Run the pending turn; map its result onto (outcome, error)."""
        self._operation = f"{self.session_id}:{engine.turn_id}:{uuid.uuid4().hex[:8]}"
        self._stop_reason = None
        try:
            async with self._slots:
                await engine.run_pending_turn(self._operation, checkpoint)
        except Cancelled:
            # Mid-turn interrupt or deletion: repair orphaned tool calls, user-stop notice, idle (KS-8).
            if self._book.generation_of(self.session_id) == self._generation:
                await engine.interrupt_current_turn(checkpoint=checkpoint)
            return "aborted", None
        except CheckpointFailed:
            raise
        except TurnstileError as exc:
            return "error", f"{exc.code}: {exc.message}"[:MAX_ERROR_CHARS]
        except Exception as exc:
            log.exception("session %s: turn failed", self.session_id)
            return "error", repr(exc)[:MAX_ERROR_CHARS]
        finally:
            self._operation = None
        return ("replied" if engine.turn_outputs else "silent"), None

    async def _deliver_outputs(self, staged: StagedMessage, inbound: InboundMessage, engine: Session) -> None:
        for out in engine.turn_outputs:
            objects: list[dict[str, Any]] = []
            if out.kind == "object":
                objects.append({"object_id": out.object_id, "file_name": out.file_name, "media_type": out.media_type})
            await self._publish_reply(staged, inbound, str(engine.turn_id), out.seq, out.text or "", objects)

    async def _deliver_previous(
        self, staged: StagedMessage, inbound: InboundMessage, engine: Session, ext_id: str
    ) -> None:
        for resp in engine.responses_for_external_event(ext_id):
            objects = [{"object_id": resp["object_id"]}] if resp.get("object_id") else []
            turn_id = str(resp.get("turn_id") or engine.turn_id)
            await self._publish_reply(staged, inbound, turn_id, int(resp["seq"]), str(resp.get("text") or ""), objects)

    async def _publish_reply(
        self, staged: StagedMessage, inbound: InboundMessage, turn_id: str, seq: int, text: str,
        objects: list[dict[str, Any]],
    ) -> None:
        reply = OutboundReply(
            session_id=self.session_id,
            generation=staged.generation,
            turn_id=turn_id,
            seq=seq,
            reply_to=inbound.id,
            external_event_id=inbound.external_event_id,
            text=text,
            objects=objects,
        )
        await self._pub.outbound(inbound.platform, reply)

    async def _drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str, detail: str = "") -> None:
        data: dict[str, Any] = {"inbound_id": inbound.id, "reason": reason, "generation": staged.generation}
        if detail:
            data["detail"] = detail
        await self._pub.emit(self.session_id, "message.dropped", data)
        self._inbox.mark(staged, DROPPED)
