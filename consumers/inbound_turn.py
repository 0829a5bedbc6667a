"""The steps of an inbound message's turn, passed to ``TurnRunner.serve_turn``.

Generation check: a message of an older generation is dropped (SM-22 / MQ-5). Stage: an
event answered already is dropped as a duplicate (KS-14) or its missing replies are
published again; a turn left pending by an earlier message is closed; then the user message
is staged. Finish: the checkpoints are settled and the message is finished (inbox mark) by
the finisher once its pipelined publishes and writes landed; a turn whose session was deleted
meanwhile drops its message instead.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from consumers.replies import ReplySender, ReplyTarget
from consumers.turn_inputs import external_id_of, principal_of
from consumers.turn_steps import Checkpointer, TurnPlan, TurnResult
from core.engine import Session
from core.errors import CheckpointFailed, StaleGeneration, TurnstileError, Unavailable
from core.store.inbox import StagedMessage
from schemas.wire import InboundMessage


class InboundHost(Protocol):
    """What an inbound turn's steps use of its session's runner."""

    @property
    def replies(self) -> ReplySender: ...

    @property
    def generation(self) -> int: ...

    async def load(self, inbound: InboundMessage | None = None) -> Session: ...

    def checkpointer(self, inbound_id: str | None = None, transition: str | None = None) -> Checkpointer: ...

    def from_elsewhere(self, inbound: InboundMessage) -> bool: ...

    async def drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str, detail: str = "") -> None: ...

    async def settle_dropped(self) -> None: ...

    async def finish_turn(self, staged: StagedMessage, inbound: InboundMessage, engine: Session) -> None: ...

    def finish_answered(
        self, staged: StagedMessage, inbound: InboundMessage, engine: Session, sent: list[asyncio.Future[Any]]
    ) -> None: ...


@dataclass(frozen=True)
class InboundTurn:
    """The turn of one staged inbound message."""

    staged: StagedMessage
    inbound: InboundMessage
    host: InboundHost

    async def current(self) -> bool:
        # SM-22 / MQ-5: a message of an older generation is dropped before its turn.
        if self.staged.generation != self.host.generation:
            await self.host.drop(self.staged, self.inbound, "stale_generation")
            return False
        return True

    async def load(self) -> Session:
        return await self.host.load(self.inbound)

    async def stage(self, engine: Session) -> TurnPlan | None:
        staged, inbound, host = self.staged, self.inbound, self.host
        ext_id = external_id_of(inbound)
        answers = None if engine.pending_external_event_id == ext_id else await engine.lookup_external_event(ext_id)
        if answers is not None and answers.answer is not None:
            # KS-14: this event was answered already (durably looked up) — a redelivery or a replay.
            if await host.replies.answer_was_delivered(answers, inbound):
                await host.drop(staged, inbound, "duplicate", f"event {ext_id!r} was already answered")
                return None
            # Answered before a crash, maybe not delivered: publish what the outbound stream lacks.
            sent: list[asyncio.Future[Any]] = []
            try:
                await host.replies.deliver_previous(
                    ReplyTarget.of(inbound), staged.generation, engine, ext_id, sent, answers
                )
            except StaleGeneration:  # deleted while this message was being served: SM-22
                await host.drop(staged, inbound, "stale_generation")
                return None
            if not sent and answers.answering_inbound_id not in (None, inbound.id):
                # A replay while its first message is still finishing: the stream holds the whole answer.
                await host.drop(staged, inbound, "duplicate", f"event {ext_id!r} was already answered")
                return None
            host.finish_answered(staged, inbound, engine, sent)
            return None
        if not (engine.pending_turn and engine.pending_external_event_id == ext_id):
            if engine.pending_turn:
                # A turn left pending (crash, provider error, round limit) whose message is done: close it.
                await engine.interrupt_current_turn(checkpoint=host.checkpointer(inbound.id, "interrupted"))
            metadata = {
                "external_event_id": ext_id,
                "inbound_id": inbound.id,
                "principal": principal_of(inbound),
                # SM-11: entered through another platform than the room's origin (a relayed message).
                "from_elsewhere": host.from_elsewhere(inbound),
                "attachments": [a.model_dump(exclude_none=True) for a in inbound.attachments],
            }
            try:
                began = await engine.begin_user_turn(
                    inbound.text, metadata, checkpoint=host.checkpointer(inbound.id, "message_staged")
                )
            except (CheckpointFailed, Unavailable):
                # Not the message's fault: retried (MessageRetries), or, when the partition moved
                # (OwnershipLost: the journal append refused by the epoch fence), left staged for the new owner.
                raise
            except TurnstileError as exc:
                await host.drop(staged, inbound, exc.code, exc.message)
                return None
            if not began:
                await host.drop(staged, inbound, "not_staged", "empty input, a completed session or a duplicate")
                return None
        return TurnPlan(
            staged.generation, ReplyTarget.of(inbound), inbound_id=inbound.id, answers_inbound=True,
            started={"inbound_id": inbound.id, "from_elsewhere": host.from_elsewhere(inbound)},
            ended={"inbound_id": inbound.id},
        )

    async def finish(self, engine: Session, result: TurnResult) -> None:
        if result.stale:
            await self.host.drop(self.staged, self.inbound, "stale_generation")
            await self.host.settle_dropped()
            return
        # The replies and events were pipelined and the bookkeeping writes run behind: the
        # message is finished (inbox mark) once all of them landed, while the actor goes on.
        await self.host.finish_turn(self.staged, self.inbound, engine)
