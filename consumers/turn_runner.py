"""TurnRunner: what a session actor does with one staged inbound message or control command.

Order of a turn (DESIGN "Flow"), written once in ``serve_turn``: generation check →
restore the engine session from the last checkpoint if not loaded → stage (the user
message, or a control turn's opening; a checkpoint) → ``run_pending_turn`` (a
checkpoint after every durable step) → generation check → outbound replies → turn
bookkeeping → settle → finish (inbox mark, or the control reply); what differs between
an inbound message (``inbound_turn.py``) and a control turn is passed in as ``TurnSteps``
(``turn_steps.py``). Retries and dead letters: ``message_retries.py``. A message answered
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
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson

from consumers.checkpoint_prefetch import CheckpointPrefetch, CheckpointRead, read_checkpoint
from consumers.checkpoint_transitions import transition_of
from consumers.checkpoints import CheckpointChain
from consumers.inbound_turn import InboundTurn
from consumers.logs import clear_log_context, log_context
from consumers.message_finisher import TurnFinisher
from consumers.message_retries import MAX_ERROR_CHARS, MessageRetries
from consumers.metrics import Metrics
from consumers.publisher import Publisher
from consumers.replies import ItemPublishes, ReplySender, ReplyTarget
from consumers.retry_policy import TurnRetryPolicy
from consumers.runner_ports import EngineOpener, SessionRecords
from consumers.turn_events import TurnEvents
from consumers.turn_inputs import chat_of, external_id_of, work_of
from consumers.turn_steps import Checkpointer, TurnPlan, TurnResult, TurnSteps
from core.engine import FORMAT_VERSION, JournalOfGeneration, Session, SessionOptions, TurnExhausted
from core.engine.policy import MidTurnAction, MidTurnPolicy, decide_mid_turn
from core.engine.snapshot import EncodedSnapshot
from core.errors import Cancelled, CheckpointFailed, StaleGeneration, TurnstileError, Unavailable
from core.sessions.rules import from_elsewhere
from core.store.inbox import SqlInbox, StagedMessage
from schemas.wire import Checkpoint, InboundMessage

log = logging.getLogger(__name__)

BUSY_REASON = "busy"
POLICIES = tuple(p.value for p in MidTurnPolicy)
FINISHED_REMEMBERED = 256
# Checkpoints of these steps are stored before the engine goes on: a tool runs next.
BARRIER_STEPS = frozenset({"model_response", "tool_call"})
FALLBACK_SEQ = -1  # the seq of the TURNSTILE_PROVIDER_FAILURE_REPLY reply (never a journal seq)
_UNMETERED = Metrics()  # for runners built without the service's metrics (tests)

R = TypeVar("R")


def _weakly(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` through a weak reference: a part holding its runner's bound method made every runner a
    reference cycle, freed only by a full gc collection (rare under TURNSTILE_GC_THRESHOLD)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


class TurnRunner:
    """Runs the turns and control commands of one session, one item at a time."""

    def __init__(
        self,
        session_id: str,
        *,
        engines: EngineOpener,
        book: SessionRecords,
        publisher: Publisher,
        inbox: SqlInbox,
        turn_slots: asyncio.Semaphore,
        mid_turn_policy: str = "enqueue",
        retry: TurnRetryPolicy | None = None,
        still_owner: Callable[[], Awaitable[bool]] | None = None,
        metrics: Metrics | None = None,
        failure_reply: str = "",
        clock: Callable[[], float] = time.time,
        prefetch: CheckpointPrefetch | None = None,
    ) -> None:
        self.session_id = session_id
        self._prefetch = prefetch  # the last checkpoint read while this session's message was staged
        self._clock = clock  # wall time of checkpoints and turn ends
        self._metrics = metrics or _UNMETERED
        self._failure_reply = failure_reply
        self.received_at: float | None = None  # monotonic time the item in hand was queued (reply latency)
        self._engines = engines
        self._book = book
        self._pub = publisher
        self._inbox = inbox
        self._slots = turn_slots
        self.mid_turn_policy = mid_turn_policy
        self._engine: Session | None = None
        self._generation: int | None = None
        self._ticket: int | None = None  # of the latest open (KnownTails.opened)
        self._checkpoints = CheckpointChain(session_id, publisher, self._metrics)
        self._version_seen = 0
        self._operation: str | None = None
        self._stop_reason: str | None = None
        self._unload_pending = False
        self.stops_applied = 0
        # Inbound ids this runner finished (delivered): the inbox writes its marks in batches.
        self._finished: deque[str] = deque(maxlen=FINISHED_REMEMBERED)
        # Pipelined publishes (events, replies) of the current message, settled before it is marked done.
        self._publishes = ItemPublishes()
        self.replies = ReplySender(
            session_id, publisher=publisher, book=book, inbox=inbox, checkpoints=self._checkpoints,
            finished=self._finished, publishes=self._publishes,
        )
        self._events = TurnEvents(
            session_id, book=book, publisher=publisher, metrics=self._metrics, publishes=self._publishes, clock=clock
        )
        self._finisher = TurnFinisher(session_id, publisher, inbox, self._finished.append)
        self._retries = MessageRetries(
            session_id, publisher=publisher, inbox=inbox, publishes=self._publishes,
            retry=retry or TurnRetryPolicy(), still_owner=still_owner, forget=_weakly(self.unload),
        )

    # -- arrival policy ---------------------------------------------------------------
    def policy(self) -> str:
        """The session's mid-turn policy now: ``metadata.mid_turn_policy`` of its record, else the default."""
        record = self._book.get_session(self.session_id)
        metadata = record.metadata if record is not None else None
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
        await self.drop(staged, inbound, BUSY_REASON, "a turn was running and the session's policy is reject")

    def begin_item(self) -> None:
        """The actor starts a new item: a stop requested while idle does not carry over."""
        self._stop_reason = None
        clear_log_context()
        log_context(session_id=self.session_id)
        if self._unload_pending:
            self.unload()

    def request_stop(self, reason: str) -> None:
        """Cancel the running operation now; a turn about to start in this item starts cancelled."""
        self._stop_reason = reason
        if self._engine is not None and self._operation is not None:
            self._engine.cancel(self._operation)

    # -- lifecycle ----------------------------------------------------------------------
    def unload(self, *, keep_tail: bool = False) -> None:
        """Forget the loaded session; the next item restores it from its last checkpoint.

        ``keep_tail`` (the registry evicting an idle session): when the engine is exactly its
        journal and its last checkpoint, the next reopen here may skip reading the journal past
        that checkpoint (``consumers/known_tails.py``). Any other unload forgets that."""
        tails = self._engines.tails
        if self._ticket is not None:
            tails.unloaded(self.session_id, self._ticket, self._exact_tail() if keep_tail else None)
            self._ticket = None
        else:
            tails.drop(self.session_id)
        if self._engine is not None:
            self._engine.forget_caches()
        self._engine = None
        self._generation = None
        self._unload_pending = False
        self._checkpoints.reset(None)

    def _exact_tail(self) -> tuple[int, int, int] | None:
        """(generation, next_seq, checkpoint sequence) when the loaded engine is exactly the journal
        (every append returned, none under way or uncertain) and the last checkpoint, acknowledged
        with nothing in flight, holds that same ``next_seq``; else None."""
        engine, chain = self._engine, self._checkpoints
        if engine is None or self._generation is None or self._unload_pending:
            return None
        journal = engine.journal
        if not (isinstance(journal, JournalOfGeneration) and journal.exact and chain.settled):
            return None
        if chain.seq is None or chain.version is None or chain.version != engine.state.next_seq:
            return None
        return self._generation, chain.version, chain.seq

    def stop_timers(self) -> None:
        """Its actor ends: the checkpoint chain's and the finisher's idle timers go with it."""
        self._checkpoints.stop_timer()
        self._finisher.stop_timer()

    def unload_before_next_item(self) -> None:
        """Forget the loaded session once the item running now is over (it still uses it)."""
        self._unload_pending = True

    async def stop_running_turn(self) -> None:
        """Cancel the running turn, if any (deletion stops it before the data clear); the
        turn ends ``aborted`` without repairs and without a reply (SM-21)."""
        self.request_stop("deleted")

    async def release(self) -> None:
        """The actor ends (evicted idle, or shutdown): finish what is settling, then release the
        session's file leases (KS-19) — unless a turn is still pending, whose resumption (here
        after a restart, or in another process) must keep its write leases."""
        await self.wait_finished()
        if self._engine is not None and not self._engine.pending_turn:
            await self._engine.release_managed_sources()

    @property
    def generation(self) -> int:
        """The session's current generation (the manager's)."""
        return self._book.generation_of(self.session_id)

    @property
    def loaded_generation(self) -> int:
        """The generation of the loaded engine session (after ``load``)."""
        if self._generation is None:
            raise RuntimeError(f"session {self.session_id!r} is not loaded")
        return self._generation

    async def load(self, inbound: InboundMessage | None = None) -> Session:
        """The session's engine for the current generation, restored from its last checkpoint."""
        generation = self.generation
        if self._engine is not None and self._generation == generation:
            self._engine.bind_work(work_of(self._book, self.session_id))
            return self._engine
        # A session this process just created has no checkpoint of its generation and no journal.
        new = self._engine is None and self._engines.pop_created(self.session_id)
        if new and self._prefetch is not None:
            self._prefetch.discard(self.session_id)  # nothing to restore: the read is not needed
        # A session this process unloaded itself, exactly as journaled and checkpointed: if its last
        # checkpoint is still that one, nothing was journaled past it (consumers/known_tails.py).
        tails = self._engines.tails
        tail = None if new else tails.take(self.session_id, generation)
        if self._ticket is not None:
            tails.unloaded(self.session_id, self._ticket, None)  # a reload of a generation changed under it
        self._ticket = tails.opened(self.session_id)
        # The newest journal rows are read while the checkpoint is fetched (PostgreSQL); the open
        # takes the tail past the checkpoint from them when they cover it. Not with a tail kept:
        # it usually holds, and when it does not the open reads the range itself.
        ahead = None if new or tail is not None else self._engines.read_ahead(self.session_id, generation)
        try:
            last = None if new else await self._last_checkpoint()
            restored: dict[str, Any] | None = None
            known = False
            self._checkpoints.reset(0)  # fenced on "no checkpoint yet" unless one is found
            if last is not None:
                seq, payload = last
                version: int | None = None  # the state version of the snapshot continued from, when known
                try:
                    cp = Checkpoint.model_validate(orjson.loads(payload))
                except Exception as exc:
                    log.warning("session %s: unreadable checkpoint at %d (%r); folding the journal", self.session_id, seq, exc)
                else:
                    if cp.generation == generation:
                        restored = cp.snapshot
                        next_seq = restored.get("next_seq")
                        version = next_seq if type(next_seq) is int else None
                        known = (
                            tail is not None and tail.checkpoint_seq == seq and tail.generation == cp.generation
                            and tail.next_seq == version
                        )
                self._checkpoints.reset(seq, version)
            self._engine = await self._engines.open(
                self.session_id, restored, generation=generation, chat=chat_of(self._book, self.session_id, inbound),
                new=new, known_tail=known, read_ahead=ahead,
            )
            # Counted here, not in the opener: it also builds throwaway engines (state_operations' headers).
            self._metrics.session_opened(journal_read=not (new or known))  # the opener's journal_empty rule
        finally:
            if ahead is not None:
                _drop(ahead)
        self._engine.bind_work(work_of(self._book, self.session_id))
        self._generation = generation
        self._version_seen = self._engine.state.next_seq
        return self._engine

    async def _last_checkpoint(self) -> CheckpointRead:
        """The last checkpoint: the prefetch's (read while the message was staged), else read now."""
        sid = self.session_id
        taken = self._prefetch.take(sid) if self._prefetch is not None else None
        self._metrics.restore_read(prefetched=taken is not None)
        return await read_checkpoint(taken, lambda: self._pub.last_checkpoint(sid))

    async def open_fresh(self, options: SessionOptions) -> Session:
        """Reopen a session that has no history yet with ``options`` (a mode other than conversation)."""
        engine = await self.load()
        if engine.state.next_seq != 0:
            raise RuntimeError("open_fresh on a session with history")
        assert self._generation is not None  # set by the load above
        self._engine = await self._engines.open(self.session_id, None, generation=self._generation, options=options)
        self._engine.bind_work(work_of(self._book, self.session_id))
        self._version_seen = 0
        return self._engine

    def checkpointer(self, inbound_id: str | None = None, transition: str | None = None) -> Checkpointer:
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
                "at": self._clock(),
            })
            # Sent now, fenced on the previous checkpoint; its ack is awaited before the next
            # one, a tool call, a reply or the end of the item (consumers/checkpoints.py).
            # In pieces: the snapshot (hundreds of kB in a long session) is not copied into one payload.
            await self._checkpoints.publish(
                (envelope[:-1], b',"snapshot":', snapshot.raw, b"}"), barrier=step in BARRIER_STEPS,
                version=snapshot.state_version,
            )
            self._version_seen = snapshot.state_version

        return checkpoint

    # -- one message ----------------------------------------------------------------------
    async def handle(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Serve one staged message, retried and at last dead-lettered by ``MessageRetries``."""
        log_context(session_id=self.session_id, inbound_id=inbound.id)
        await self._retries.serve(staged, inbound, lambda: self.serve_turn(InboundTurn(staged, inbound, self)))

    # -- the turn sequence, shared by inbound messages and control-started turns ---------------
    async def serve_turn(self, steps: TurnSteps[R]) -> R | None:
        """generation check → load → stage → turn.started → run → generation check → deliver →
        turn.ended → settle → finish, with what differs passed in ``steps`` (``turn_steps.py``).
        None when the item ended before its turn (dropped, or answered before)."""
        if not await steps.current():
            return None
        engine = await steps.load()
        plan = await steps.stage(engine)
        if plan is None:
            return None
        result = await self._run_turn(engine, plan)
        return await steps.finish(engine, result)

    async def _run_turn(self, engine: Session, plan: TurnPlan) -> TurnResult:
        """turn.started → run → generation check → deliver to ``plan.target`` → turn.ended. A turn
        whose session was deleted meanwhile ends ``aborted`` without delivery (``stale``;
        SM-21/SM-22/MQ-5)."""
        checkpoint = self.checkpointer(plan.inbound_id)
        generation, target = plan.generation, plan.target
        stream_to = target.platform if plan.answers_inbound and target is not None else None
        await self._events.started(engine, self._generation, platform=stream_to, **plan.started)
        # The step's checkpoint, ``turn.started`` and the typing signal sit in the connection's
        # buffer until this task yields: let the client's flusher write them now, so the
        # checkpoint's round trip (which the next checkpoint waits for) overlaps building the
        # model request and the model call instead of following them.
        await asyncio.sleep(0)
        if plan.on_started is not None:
            plan.on_started({"turn_id": engine.turn_id, "status": engine.status})
        deadline = None
        if plan.deadline_s is not None:
            deadline = asyncio.get_running_loop().call_later(plan.deadline_s, self.request_stop, "deadline")
        try:
            outcome, error = await self.run(engine, checkpoint)
        except CheckpointFailed:
            if self.generation == generation:
                raise
            outcome, error = "aborted", None  # its checkpoints were purged by the deletion: refused
        finally:
            if deadline is not None:
                deadline.cancel()
        # Deleted while running (or while its replies were going out) → the turn ends aborted
        # (old generation), no outbound delivery; the events are stored before the deletion's
        # clear goes on.
        stale = self.generation != generation
        delivered = 0
        if not stale and outcome == "replied" and target is not None:
            try:
                delivered = await self.replies.deliver_outputs(engine, target, generation)
            except StaleGeneration:
                stale = True
            if delivered:
                # As after turn.started: the reply waits in the connection's buffer until this task
                # yields; let the flusher write it before turn.ended's bookkeeping, not after.
                await asyncio.sleep(0)
        if stale:
            await self._events.ended(engine, self._generation, "aborted", None, **plan.ended)
            return TurnResult("aborted", None, delivered, stale=True)
        if plan.answers_inbound and outcome == "replied" and self.received_at is not None:
            self._metrics.reply_latency.observe(time.monotonic() - self.received_at)
        elif (
            plan.answers_inbound and target is not None and outcome == "error" and self._failure_reply
            and (error or "").startswith("provider_error")
        ):
            # TURNSTILE_PROVIDER_FAILURE_REPLY: the user hears something; seq -1 is never a journal seq.
            await self.replies.publish_reply(target, generation, str(engine.turn_id), FALLBACK_SEQ,
                                             self._failure_reply, [])
        await self._events.ended(engine, self._generation, outcome, error, **plan.ended)
        return TurnResult(outcome, error, delivered)

    # -- what an inbound turn's steps use (InboundHost) ------------------------------------------
    def from_elsewhere(self, inbound: InboundMessage) -> bool:
        """SM-11: ``inbound`` entered through another platform than its room's origin."""
        return from_elsewhere(inbound, self._book.get_session)

    async def drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str, detail: str = "") -> None:
        """Drop ``staged`` without a turn (``message.dropped`` and the inbox mark)."""
        await self._retries.drop(staged, inbound, reason, detail)

    async def settle_dropped(self) -> None:
        """Wait until the item's pipelined publishes (its ``message.dropped``) are stored."""
        unsettled, _ = self._publishes.take()
        await self._pub.settle(unsettled)

    async def finish_turn(self, staged: StagedMessage, inbound: InboundMessage, engine: Session) -> None:
        """Settle the checkpoints; the finisher marks the message once its publishes and writes landed."""
        await self._checkpoints.settle()
        unsettled, behind = self._publishes.take()
        self._spawn_finisher(staged, inbound, engine, unsettled, behind)

    def finish_answered(
        self, staged: StagedMessage, inbound: InboundMessage, engine: Session, sent: list[asyncio.Future[Any]]
    ) -> None:
        """Finish a message answered before (its missing replies were published again: ``sent``)."""
        self._spawn_finisher(staged, inbound, engine, sent, [])

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
            await self.replies.deliver_previous(ReplyTarget.of(inbound), staged.generation, engine, ext_id, sink)

        self._finisher.spawn(staged, unsettled, behind, republish)

    async def settle_checkpoints(self) -> None:
        """Wait until the last checkpoint sent is stored (before replies, at the end of every item)."""
        await self._checkpoints.settle()

    def can_unload(self) -> bool:
        """True when nothing of a finished item is still landing and no turn is pending (may be evicted)."""
        # A reply not confirmed stored is sent again before the session's next one (reply order): keep it.
        return not self._finisher.busy and self.replies.all_stored and (
            self._engine is None or not self._engine.pending_turn
        )

    async def wait_finished(self) -> None:
        """Wait until every finished turn's publishes and writes have landed (tests, shutdown)."""
        await self._finisher.wait()

    # -- running the pending turn ----------------------------------------------------------
    async def run(self, engine: Session, checkpoint: Checkpointer) -> tuple[str, str | None]:
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
        except (CheckpointFailed, Unavailable):  # OwnershipLost is an Unavailable
            # Not the turn's failure: a checkpoint or journal write refused or unreachable (the store
            # away, or the partition moved: OwnershipLost). The message stays staged and is retried,
            # or served by the new owner; finishing it as a failed turn would leave it unanswered.
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

    async def _stopped(self, engine: Session, checkpoint: Checkpointer) -> tuple[str, str | None]:
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


def _drop(future: asyncio.Future[Any]) -> None:
    """A read ahead the open did not take (it failed first, or did not read the journal): stop it, or
    retrieve its outcome so a failure is not reported as never retrieved."""
    if not future.done():
        future.cancel()
    elif not future.cancelled():
        future.exception()
