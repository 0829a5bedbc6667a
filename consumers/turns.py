"""TurnRunner: what a session actor does with one staged inbound message or control command.

Order of a turn (DESIGN "Flow"): generation check → restore the engine session
from the last checkpoint if not loaded → stage the user message (checkpoint)
→ ``run_pending_turn`` (a checkpoint after every durable step) → generation
check → outbound replies → turn bookkeeping → inbox mark. A message answered
before a crash is delivered again from the engine's state under the same
``Nats-Msg-Id`` (``<sid>:<turn_id>:<seq>``), which JetStream deduplicates; a
replay of an event whose first message was delivered is dropped (KS-14).

Turn outcomes: ``replied``, ``silent``, ``aborted`` (interrupted: open tool
calls repaired, KS-8), ``error`` (provider failure, round limit, …; the user
message stays in the transcript and the turn stays pending — the next message
of the session closes it first, a redelivery of the same event retries it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from typing import Any

import orjson

from consumers.checkpoints import CheckpointChain
from consumers.delivery import ReplyDelivery
from consumers.finisher import TurnFinisher
from consumers.publisher import Publisher
from consumers.transitions import transition_of
from consumers.turn_ports import EngineFactory, SessionBook, chat_of, external_id_of, turn_usage
from core.engine import FORMAT_VERSION, Session, SessionOptions, TurnExhausted
from core.engine.snapshot import EncodedSnapshot
from core.engine.policy import MidTurnAction, MidTurnPolicy, decide_mid_turn
from core.errors import Cancelled, CheckpointFailed, TurnstileError, Unavailable
from core.store.inbox import DROPPED, SqlInbox, StagedMessage
from schemas.wire import Checkpoint, InboundMessage

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.2
MAX_ERROR_CHARS = 200
BUSY_REASON = "busy"
POLICIES = tuple(p.value for p in MidTurnPolicy)
FINISHED_REMEMBERED = 256
# Checkpoints of these steps are stored before the engine goes on: a tool runs next.
BARRIER_STEPS = frozenset({"model_response", "tool_call"})


class TurnRunner(ReplyDelivery):
    """Runs the turns and control commands of one session, one item at a time."""

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
        self._checkpoints = CheckpointChain(session_id, publisher)
        self._version_seen = 0
        self._operation: str | None = None
        self._stop_reason: str | None = None
        self.stops_applied = 0
        # Inbound ids this runner finished (delivered): the inbox writes its marks in batches.
        self._finished: deque[str] = deque(maxlen=FINISHED_REMEMBERED)
        # Pipelined publishes (events, replies) of the current message, settled before it is marked done.
        self._unsettled: list[asyncio.Future[Any]] = []
        self._behind: list[asyncio.Future[Any]] = []
        self._usage_reported: dict[str, tuple[int, int]] = {}
        self._finisher = TurnFinisher(session_id, publisher, inbox, self._finished.append)

    # -- arrival policy ---------------------------------------------------------------
    def policy(self) -> str:
        """The session's mid-turn policy now: ``metadata.mid_turn_policy`` of its record, else the default."""
        get_session = getattr(self._book, "get_session", None)
        record = get_session(self.session_id) if callable(get_session) else None
        metadata = getattr(record, "metadata", None)
        chosen = metadata.get("mid_turn_policy") if isinstance(metadata, dict) else None
        return chosen if chosen in POLICIES else self.mid_turn_policy

    def notice_arrival(self, inbound: InboundMessage, *, busy: bool) -> MidTurnAction:
        """Apply the mid-turn policy to a message arriving while the session is busy.

        ``interrupt`` cancels the running turn now; ``reject`` is answered by the caller
        with ``reject`` (the message never waits behind the running turn).
        """
        action = decide_mid_turn(self.policy(), turn_running=busy, turn_pending=False)
        if action is MidTurnAction.INTERRUPT_THEN_BEGIN:
            self.request_stop("interrupt")
        return action

    async def reject(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Drop a message refused by the ``reject`` policy (``message.dropped`` reason ``busy``)."""
        await self._drop(staged, inbound, BUSY_REASON, "a turn was running and the session's policy is reject")

    def begin_item(self) -> None:
        """The actor starts a new item: a stop requested while idle does not carry over."""
        self._stop_reason = None

    def request_stop(self, reason: str) -> None:
        """Cancel the running operation now; a turn about to start in this item starts cancelled."""
        self._stop_reason = reason
        if self._engine is not None and self._operation is not None:
            self._engine.cancel(self._operation)

    # -- lifecycle ----------------------------------------------------------------------
    def unload(self) -> None:
        """Forget the loaded session; the next item restores it from its last checkpoint."""
        self._engine = None
        self._generation = None
        self._checkpoints.reset(None)

    async def stop_running_turn(self) -> None:
        """Cancel the running turn, if any (deletion stops it before the data clear)."""
        self.request_stop("deleted")

    async def release(self) -> None:
        await self.wait_finished()
        if self._engine is not None:
            await self._engine.release_managed_sources()

    @property
    def generation(self) -> int:
        return self._book.generation_of(self.session_id)

    async def load(self, inbound: InboundMessage | None = None) -> Session:
        """The session's engine for the current generation, restored from its last checkpoint."""
        generation = self.generation
        if self._engine is not None and self._generation == generation:
            return self._engine
        # A session this process just created has no checkpoint of its generation and no journal.
        new = self._engine is None and self._engines.take_new(self.session_id)
        last = None if new else await self._pub.last_checkpoint(self.session_id)
        restored: dict[str, Any] | None = None
        self._checkpoints.reset(0)  # fenced on "no checkpoint yet" unless one is found
        if last is not None:
            seq, payload = last
            self._checkpoints.reset(seq)
            try:
                cp = Checkpoint.model_validate(orjson.loads(payload))
            except Exception as exc:
                log.warning("session %s: unreadable checkpoint at %d (%r); folding the journal", self.session_id, seq, exc)
            else:
                if cp.generation == generation:
                    restored = cp.snapshot
        self._engine = await self._engines.open(
            self.session_id, restored, chat=chat_of(self._book, self.session_id, inbound), new=new
        )
        self._generation = generation
        self._version_seen = self._engine.state.next_seq
        return self._engine

    async def open_fresh(self, options: SessionOptions) -> Session:
        """Reopen a session that has no history yet with ``options`` (a mode other than conversation)."""
        engine = await self.load()
        if engine.state.next_seq != 0:
            raise RuntimeError("open_fresh on a session with history")
        self._engine = await self._engines.open(self.session_id, None, options=options)
        self._version_seen = 0
        return self._engine

    def checkpointer(self, inbound_id: str | None = None, transition: str | None = None) -> Any:
        """The checkpoint callback: publish each snapshot, fenced on the previous subject sequence."""

        async def checkpoint(snapshot: EncodedSnapshot) -> None:
            assert self._generation is not None
            # The wire model is schemas.wire.Checkpoint. The snapshot arrives encoded (the engine
            # splices memoised per-item JSON) and is not parsed again: the envelope is spliced around it.
            if not isinstance(snapshot, EncodedSnapshot):
                raise TypeError("checkpoints are published through Session.publish (an EncodedSnapshot)")
            step = transition or transition_of(snapshot, self._version_seen)
            envelope = orjson.dumps({
                "session_id": self.session_id,
                "generation": self._generation,
                "format_version": FORMAT_VERSION,
                "state_version": snapshot.state_version,
                "transition": step,
                "inbound_id": inbound_id,
                "at": time.time(),
            })
            # Sent now, fenced on the previous checkpoint; its ack is awaited before the next
            # one, a tool call, a reply or the end of the item (consumers/checkpoints.py).
            await self._checkpoints.publish(
                b"".join((envelope[:-1], b',"snapshot":', snapshot.raw, b"}")), barrier=step in BARRIER_STEPS
            )
            self._version_seen = snapshot.state_version

        return checkpoint

    # -- one message ----------------------------------------------------------------------
    async def handle(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Serve one staged message; transient failures are retried, then it stays staged."""
        for attempt in range(RETRY_ATTEMPTS):
            try:
                await self._handle_once(staged, inbound)
                return
            except (CheckpointFailed, Unavailable) as exc:
                # Another writer, or the broker is unreachable: forget what we hold and reload.
                log.warning("session %s: %s (attempt %d)", self.session_id, exc.message, attempt + 1)
                self.unload()
                await asyncio.sleep(RETRY_BASE_DELAY_S * 2**attempt)
        log.error("session %s: giving up on %s for now; it stays staged", self.session_id, staged.message_id)

    async def _handle_once(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        # SM-22 / MQ-5: a message of an older generation is dropped before its turn.
        if staged.generation != self.generation:
            await self._drop(staged, inbound, "stale_generation")
            return
        engine = await self.load(inbound)
        checkpoint = self.checkpointer(inbound.id)
        ext_id = external_id_of(inbound)
        answers = None if engine.pending_external_event_id == ext_id else await engine.lookup_external_event(ext_id)
        if answers is not None and answers.answer is not None:
            # KS-14: this event was answered already (durably looked up) — a redelivery or a replay.
            if await self._answer_was_delivered(answers, inbound):
                await self._drop(staged, inbound, "duplicate", f"event {ext_id!r} was already answered")
                return
            # Answered before a crash, maybe not delivered: publish what the outbound stream lacks.
            sent: list[asyncio.Future[Any]] = []
            await self._deliver_previous(staged, inbound, engine, ext_id, sent, answers)
            if not sent and answers.answering_inbound_id not in (None, inbound.id):
                # A replay while its first message is still finishing: the stream holds the whole answer.
                await self._drop(staged, inbound, "duplicate", f"event {ext_id!r} was already answered")
                return
            self._spawn_finisher(staged, inbound, engine, sent, [])
            return
        if not (engine.pending_turn and engine.pending_external_event_id == ext_id):
            if engine.pending_turn:
                # A turn left pending (crash, provider error, round limit) whose message is done: close it.
                await engine.interrupt_current_turn(checkpoint=self.checkpointer(inbound.id, "interrupted"))
            metadata = {
                "external_event_id": ext_id,
                "inbound_id": inbound.id,
                "principal": inbound.sender.user_id if inbound.sender else None,
                "attachments": [a.model_dump(exclude_none=True) for a in inbound.attachments],
            }
            try:
                began = await engine.begin_user_turn(
                    inbound.text, metadata, checkpoint=self.checkpointer(inbound.id, "message_staged")
                )
            except CheckpointFailed:
                raise
            except TurnstileError as exc:
                await self._drop(staged, inbound, exc.code, exc.message)
                return
            if not began:
                await self._drop(staged, inbound, "not_staged", "empty input, a completed session or a duplicate")
                return
        await self.turn_started(engine, inbound_id=inbound.id)
        outcome, error = await self.run(engine, checkpoint)
        # SM-22 / MQ-5: deleted while running → no outbound delivery.
        if self.generation != staged.generation:
            await self._drop(staged, inbound, "stale_generation")
            return
        if outcome == "replied":
            await self._deliver_outputs(staged, inbound, engine)
        await self.turn_ended(engine, outcome, error, inbound_id=inbound.id)
        await self._checkpoints.settle()
        # The replies and events were pipelined and the bookkeeping writes run behind: the
        # message is finished (inbox mark) once all of them landed, while the actor goes on.
        unsettled, self._unsettled = self._unsettled, []
        behind, self._behind = self._behind, []
        self._spawn_finisher(staged, inbound, engine, unsettled, behind)

    def _spawn_finisher(
        self,
        staged: StagedMessage,
        inbound: InboundMessage,
        engine: Session,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
    ) -> None:
        ext_id = external_id_of(inbound)

        async def republish(sink: list[asyncio.Future[Any]]) -> None:
            await self._deliver_previous(staged, inbound, engine, ext_id, sink)

        self._finisher.spawn(staged, unsettled, behind, republish)

    async def settle_checkpoints(self) -> None:
        """Wait until the last checkpoint sent is stored (before replies, at the end of every item)."""
        await self._checkpoints.settle()

    async def wait_finished(self) -> None:
        """Wait until every finished turn's publishes and writes have landed (tests, shutdown)."""
        await self._finisher.wait()

    # -- turn steps shared with control commands ------------------------------------------
    async def turn_started(self, engine: Session, **data: Any) -> None:
        """SM-16 bookkeeping (written behind; the manager's lock keeps the order) and ``turn.started``."""
        self._behind.append(asyncio.ensure_future(self._book.turn_started(self.session_id)))
        self._unsettled.append(await self._pub.emit(self.session_id, "turn.started", {
            **data, "turn_id": engine.turn_id, "mode": engine.state.mode.kind, "generation": self._generation,
        }))

    async def turn_ended(self, engine: Session, outcome: str, error: str | None, **data: Any) -> None:
        """SM-15 usage, SM-13/14/16 bookkeeping and the ``turn.ended`` event."""
        # Report what this turn used and was not reported yet (a turn can run more than once:
        # retried after a provider error or the round limit, or resumed after a crash).
        total_in, total_out = turn_usage(engine)
        seen_in, seen_out = self._usage_reported.get(str(engine.turn_id), (0, 0))
        tokens_in, tokens_out = max(total_in - seen_in, 0), max(total_out - seen_out, 0)
        self._usage_reported[str(engine.turn_id)] = (max(total_in, seen_in), max(total_out, seen_out))
        while len(self._usage_reported) > FINISHED_REMEMBERED:
            self._usage_reported.pop(next(iter(self._usage_reported)))
        if tokens_in or tokens_out:
            self._behind.append(asyncio.ensure_future(self._book.add_usage(self.session_id, tokens_in, tokens_out)))
            self._unsettled.append(
                await self._pub.emit(self.session_id, "usage", {"input": tokens_in, "output": tokens_out})
            )
        self._behind.append(
            asyncio.ensure_future(self._book.turn_ended(self.session_id, outcome, error, time.time()))
        )
        self._unsettled.append(await self._pub.emit(self.session_id, "turn.ended", {
            **data, "turn_id": engine.turn_id, "outcome": outcome, "error": error, "mode": engine.state.mode.kind,
            "status": engine.status, "generation": self._generation,
        }))

    async def run(self, engine: Session, checkpoint: Any) -> tuple[str, str | None]:
        """Run the pending turn; map its result onto (outcome, error)."""
        operation = f"{self.session_id}:{engine.turn_id}:{uuid.uuid4().hex[:8]}"
        self._operation = operation
        if self._stop_reason is not None:
            engine.cancel(operation)  # requested before the run started: it starts cancelled
        try:
            async with self._slots:
                await engine.run_pending_turn(operation, checkpoint)
        except Cancelled:
            self._operation = None
            return await self._stopped(engine, checkpoint)
        except CheckpointFailed:
            raise
        except TurnExhausted as exc:
            # The turn stays pending and exhausted (KS-9): the next message closes it, or session.interrupt.
            return "error", f"rounds_exhausted: {exc.message}"[:MAX_ERROR_CHARS]
        except TurnstileError as exc:
            return "error", f"{exc.code}: {exc.message}"[:MAX_ERROR_CHARS]
        except Exception as exc:
            log.exception("session %s: turn failed", self.session_id)
            return "error", repr(exc)[:MAX_ERROR_CHARS]
        finally:
            self._operation = None
        return ("replied" if engine.turn_outputs else "silent"), None

    async def _stopped(self, engine: Session, checkpoint: Any) -> tuple[str, str | None]:
        """After a cancel: repair orphaned tool calls, user-stop notice, idle (KS-8); a free-time
        slice is finalized (``user-stop`` / ``deadline``, KS-17) and its writes committed (KS-18)."""
        reason = self._stop_reason or "interrupt"
        self.stops_applied += 1
        if reason == "deleted" or self.generation != self._generation:
            return "aborted", None
        if engine.state.mode.kind == "free_time" and engine.state.free_time_result is None:
            await engine.finalize_free_time("deadline" if reason == "deadline" else "user-stop", checkpoint=checkpoint)
            await engine.commit_current_write_session(checkpoint=checkpoint)
        else:
            await engine.interrupt_current_turn(checkpoint=checkpoint)
        return "aborted", None

    async def _drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str, detail: str = "") -> None:
        data: dict[str, Any] = {"inbound_id": inbound.id, "reason": reason, "generation": staged.generation}
        if detail:
            data["detail"] = detail
        self._unsettled.append(await self._pub.emit(self.session_id, "message.dropped", data))
        self._inbox.mark(staged, DROPPED)
