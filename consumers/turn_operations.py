"""Control operations of the turn area (documented in docs/protocol.md).

Every operation that touches a session's engine state runs inside that
session's actor as a ``Command`` (``ActorRegistry.call``), so it never overlaps
a turn; checkpoints and events are published exactly as for an inbound turn.
The knowledge operations read the committed store only and need no actor.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from consumers.actors import ActorRegistry, Reply
from consumers.api import Operation
from consumers.replies import ReplyTarget
from consumers.session_opener import SessionOpener
from consumers.turn_runner import TurnRunner
from consumers.turn_steps import TurnPlan, TurnResult
from core.engine import AgentMode, Session, SessionOptions, ingress_options
from core.errors import Conflict, InvalidInput, NotFound, TooLarge
from core.sessions.manager import SessionManager
from core.store.knowledge_repo import SqlKnowledgeStore
from schemas.turns_control import (
    FreeTimeRequest,
    GroupContextRequest,
    IngressRequest,
    InterruptRequest,
    KnowledgeGetRequest,
    KnowledgeListRequest,
    ModeTurnRequest,
    ObjectResolveRequest,
    RetryRequest,
    WakeupRequest,
)
from schemas.turns_results import (
    GroupContextOut,
    IngressOut,
    InterruptOut,
    KnowledgeListOut,
    KnowledgeNodeWithChildrenOut,
    ModeTurnOut,
    ResolvedObjectOut,
    RetryOut,
)

MAX_RESOLVED_BYTES = 512 * 1024  # base64 of it must fit a default 1 MiB NATS reply

Stage = Callable[[Session, Any], Awaitable[bool]]


def operations(actors: ActorRegistry, manager: SessionManager, opener: SessionOpener) -> list[Operation]:
    """The turn-area operations: commands run in the sessions' actors, knowledge read from the opener's store."""
    ops = TurnOperations(actors, manager, opener)
    return [
        Operation("session", "interrupt", InterruptRequest, ops.interrupt, "stop the session's running turn",
                  InterruptOut),
        Operation("session", "group_context", GroupContextRequest, ops.group_context,
                  "replace a group session's channel context (KS-15)", GroupContextOut),
        Operation("turn", "retry", RetryRequest, ops.retry, "reset an exhausted turn's rounds and run it again",
                  RetryOut),
        Operation("turn", "free_time", FreeTimeRequest, ops.free_time, "open and run a free-time slice", ModeTurnOut),
        Operation("turn", "wakeup", WakeupRequest, ops.wakeup, "open and run a wakeup session", ModeTurnOut),
        Operation("turn", "ingress", IngressRequest, ops.ingress,
                  "ingest a terminated conversation into the knowledge store (KS-16)", IngressOut),
        Operation("object", "resolve", ObjectResolveRequest, ops.resolve_object, "bytes and facts of an object",
                  ResolvedObjectOut),
        Operation("knowledge", "get", KnowledgeGetRequest, ops.knowledge_get, "one committed knowledge node",
                  KnowledgeNodeWithChildrenOut),
        Operation("knowledge", "list", KnowledgeListRequest, ops.knowledge_list, "children of a node, or a search",
                  KnowledgeListOut),
    ]


def _mode_options(req: ModeTurnRequest, mode: AgentMode, channel: dict[str, Any], **extra: Any) -> SessionOptions:
    changes: dict[str, Any] = {"mode": mode, "reference_root_node_ids": list(req.reference_roots),
                               "channel": channel, **extra}
    if req.max_rounds is not None:
        changes["max_rounds"] = req.max_rounds
    return SessionOptions.conversation(mode.kind, roots=list(req.roots)).with_changes(**changes)


@dataclass(frozen=True)
class ControlTurn:
    """The steps of a control-started turn for ``TurnRunner.serve_turn``: it runs on the generation it
    loads (no staged generation to check), and the control reply is what finishes it."""

    load: Callable[[], Awaitable[Session]]
    stage: Callable[[Session], Awaitable[TurnPlan]]
    answer: Callable[[Session, TurnResult], dict[str, Any]]

    async def current(self) -> bool:
        return True

    async def finish(self, engine: Session, result: TurnResult) -> dict[str, Any]:
        return self.answer(engine, result)


class TurnOperations:
    """The implementations; each engine-touching one is a command run inside the session's actor."""

    def __init__(self, actors: ActorRegistry, manager: SessionManager, opener: SessionOpener) -> None:
        self._actors_ = actors
        self._manager = manager
        self._opener = opener

    def _actors(self) -> ActorRegistry:
        return self._actors_

    async def _load_known(self, runner: TurnRunner, session_id: str) -> Session:
        """The session's engine; ``NotFound`` when it has neither history nor a record."""
        engine = await runner.load()
        if engine.state.next_seq == 0 and self._manager.get_session(session_id) is None:
            raise NotFound(f"session {session_id!r} not found")
        return engine

    async def _file(self, session_id: str) -> None:
        """File a mode turn's session by id once its opening is staged (kind ``owner``, no origin,
        like the seed's ensureSession for scheduled targets), so its status, tokens and last turn
        are kept (SM-13..16) and it is listed and deleted like any other session."""
        if self._manager.get_session(session_id) is None:
            await self._manager.ensure_session(session_id)

    # -- session.interrupt ------------------------------------------------------------
    async def interrupt(self, req: InterruptRequest) -> Any:
        sid = req.session_id
        actors = self._actors()
        actor = actors.get(sid)
        runner_before = actor.runner if actor is not None else None
        stops_before = runner_before.stops_applied if runner_before is not None else 0
        actors.request_stop(sid, "interrupt")  # cancels a running provider call / tool dispatch now

        async def command(runner: TurnRunner, reply: Reply) -> Any:
            engine = await self._load_known(runner, sid)
            stopped = runner is runner_before and runner.stops_applied > stops_before
            closed = False
            if engine.pending_turn:
                # A turn left pending (round limit, provider error, crash): close it the same way.
                checkpoint = runner.checkpointer(None)
                if engine.state.mode.kind == "free_time" and engine.state.free_time_result is None:
                    await engine.finalize_free_time("user-stop", checkpoint=checkpoint)
                    await engine.commit_current_write_session(checkpoint=checkpoint)
                else:
                    await engine.interrupt_current_turn(checkpoint=checkpoint)
                closed = True
            return {"session_id": sid, "interrupted": stopped or closed, "stopped_running": stopped,
                    "closed_pending": closed, "turn_id": engine.turn_id, "status": engine.status}

        return await actors.call(sid, "session.interrupt", command)

    # -- turn.retry ------------------------------------------------------------------------
    async def retry(self, req: RetryRequest) -> Any:
        sid = req.session_id

        async def command(runner: TurnRunner, reply: Reply) -> Any:
            async def load() -> Session:
                return await self._load_known(runner, sid)

            async def stage(engine: Session) -> TurnPlan:
                # KS-9: only an exhausted ordinary conversation can be reset.
                if not await engine.reset_exhausted_turn_rounds_for_retry(checkpoint=runner.checkpointer(None)):
                    raise Conflict(f"session {sid!r} has no exhausted conversation turn to retry ({engine.status})")
                target = None
                if req.platform:
                    target = ReplyTarget(req.platform, req.reply_to or str(engine.turn_id),
                                         engine.state.turn.external_event_id)
                trigger = {"trigger": "turn.retry"}
                return TurnPlan(runner.loaded_generation, target, started=trigger, ended=trigger)

            def answer(engine: Session, result: TurnResult) -> dict[str, Any]:
                return {"session_id": sid, "turn_id": engine.turn_id, "outcome": result.outcome,
                        "error": result.error, "status": engine.status, "delivered": result.delivered}

            return await runner.serve_turn(ControlTurn(load, stage, answer))

        return await self._actors().call(sid, "turn.retry", command)

    # -- session.group_context ----------------------------------------------------------
    async def group_context(self, req: GroupContextRequest) -> Any:
        sid = req.session_id

        async def command(runner: TurnRunner, reply: Reply) -> Any:
            engine = await self._load_known(runner, sid)
            if engine.completed:
                raise Conflict(f"session {sid!r} is completed")
            applied = await engine.refresh_group_context(
                req.context, req.current_message_id, checkpoint=runner.checkpointer(None)
            )
            result: dict[str, Any] = {"session_id": sid, "applied": applied}
            if not applied:
                result["reason"] = "not a group session (its chat is not multi-party): nothing changed"
            return result

        return await self._actors().call(sid, "session.group_context", command)

    # -- mode turns ------------------------------------------------------------------------
    async def free_time(self, req: FreeTimeRequest) -> Any:
        channel = {"instructions": req.instructions} if req.instructions else {}
        options = _mode_options(req, AgentMode.free_time(), channel, free_time=dict(req.free_time))

        async def stage(engine: Session, checkpoint: Any) -> bool:
            return await engine.stage_free_time_opening(checkpoint=checkpoint)

        return await self._mode_turn(req.session_id, options, stage, wait=req.wait, deadline_s=req.deadline_s)

    async def wakeup(self, req: WakeupRequest) -> Any:
        channel: dict[str, Any] = {"wakeup_marker": req.wakeup_marker}
        if req.instructions:
            channel["instructions"] = req.instructions
        options = _mode_options(req, AgentMode.wakeup(), channel)

        async def stage(engine: Session, checkpoint: Any) -> bool:
            return await engine.stage_wakeup_opening(checkpoint=checkpoint)

        return await self._mode_turn(req.session_id, options, stage, wait=req.wait, platform=req.platform)

    async def ingress(self, req: IngressRequest) -> Any:
        src = req.session_id
        target = req.ingress_session_id or f"{src}:ingress"
        if target == src:
            raise InvalidInput("ingress_session_id must differ from the source session_id")

        async def terminate(runner: TurnRunner, reply: Reply) -> Any:
            engine = await runner.load()
            if engine.state.next_seq == 0:
                raise NotFound(f"session {src!r} has no history to ingest")
            if not engine.state.mode.is_conversation:
                raise InvalidInput(f"only a conversation can be ingested, {src!r} is {engine.state.mode.kind}")
            if not engine.requires_history_ingress():
                if not req.final_text:
                    raise Conflict(f"the source of {src!r} has not terminated; pass final_text to terminate it")
                if engine.pending_turn:
                    raise Conflict(f"{src!r} has a pending turn; interrupt it before terminating its source")
                await engine.append_final_user_message(req.final_text, {}, checkpoint=runner.checkpointer(None))
            return engine.state.model_copy(deep=True)

        source_state = await self._actors().call(src, "turn.ingress", terminate)
        options = ingress_options(source_state, record_id=src, instructions=req.instructions)
        changes: dict[str, Any] = {}
        if req.roots is not None:
            changes["root_node_ids"] = list(req.roots)
        if req.reference_roots is not None:
            changes["reference_root_node_ids"] = list(req.reference_roots)
        if req.max_rounds is not None:
            changes["max_rounds"] = req.max_rounds
        if changes:
            options = options.with_changes(**changes)

        async def stage(engine: Session, checkpoint: Any) -> bool:
            await engine.publish(checkpoint)  # Session.open staged the history (KS-16)
            return bool(engine.pending_turn)

        result = await self._mode_turn(target, options, stage, wait=req.wait)
        return {"source_session_id": src, **result}

    async def _mode_turn(
        self, sid: str, options: SessionOptions, stage: Stage, *, wait: bool,
        deadline_s: float | None = None, platform: str | None = None,
    ) -> Any:
        kind = options.mode.kind

        async def command(runner: TurnRunner, reply: Reply) -> Any:
            started: dict[str, Any] = {"session_id": sid, "mode": kind}
            fresh = False

            async def load() -> Session:
                """The session with this mode's history to resume, or opened fresh with the mode's options."""
                nonlocal fresh
                engine = await runner.load()
                if engine.state.next_seq != 0:
                    resumable = engine.state.mode.kind == kind and engine.pending_turn and not engine.completed
                    if not resumable:
                        raise Conflict(
                            f"session {sid!r} already has history ({engine.state.mode.kind}, {engine.status}); "
                            f"{kind} needs a new session id"
                        )
                    return engine
                try:
                    engine = await runner.open_fresh(options)
                except Exception:
                    runner.unload()  # nothing of this mode was journaled: forget the mode options
                    raise
                fresh = True
                return engine

            async def stage_opening(engine: Session) -> TurnPlan:
                if fresh:
                    try:
                        staged = await stage(engine, runner.checkpointer(None, "message_staged"))
                    except Exception:
                        runner.unload()  # nothing of this mode was journaled: forget the mode options
                        raise
                    if not staged:
                        runner.unload()
                        raise Conflict(f"the {kind} opening of {sid!r} was not staged")
                    await self._file(sid)
                target = ReplyTarget(platform, str(engine.turn_id)) if platform else None

                def answer_now(turn: dict[str, Any]) -> None:
                    started.update(turn)
                    if not wait:
                        reply(dict(started))

                trigger = {"trigger": f"turn.{kind}"}
                return TurnPlan(runner.loaded_generation, target, started=trigger, ended=trigger,
                                deadline_s=deadline_s, on_started=answer_now)

            def answer(engine: Session, result: TurnResult) -> dict[str, Any]:
                commit = engine.state.commit
                return {
                    **started, "outcome": result.outcome, "error": result.error, "status": engine.status,
                    "completed": engine.completed, "delivered": result.delivered,
                    "committed": commit.model_dump() if commit is not None else None,
                    "free_time_result": engine.state.free_time_result,
                }

            return await runner.serve_turn(ControlTurn(load, stage_opening, answer))

        return await self._actors().call(sid, f"turn.{kind}", command)

    # -- object.resolve ---------------------------------------------------------------------
    async def resolve_object(self, req: ObjectResolveRequest) -> Any:
        async def command(runner: TurnRunner, reply: Reply) -> Any:
            engine = await runner.load()
            obj = await engine.resolve_object(req.object_id)
            if len(obj.data) > MAX_RESOLVED_BYTES:
                raise TooLarge(f"object {req.object_id!r} is {len(obj.data)} bytes; the control API returns "
                               f"at most {MAX_RESOLVED_BYTES}")
            return {
                "object_id": obj.object_id, "file_name": obj.file_name, "media_type": obj.media_type,
                "transport_kind": obj.transport_kind, "size": len(obj.data),
                "data_base64": base64.b64encode(obj.data).decode("ascii"),
            }

        return await self._actors().call(req.session_id, "object.resolve", command)

    # -- knowledge.* ----------------------------------------------------------------------------
    def _knowledge(self) -> SqlKnowledgeStore:
        return self._opener.knowledge

    async def knowledge_get(self, req: KnowledgeGetRequest) -> Any:
        store = self._knowledge()
        node = await store.get_node(req.node_id)
        if node is None:
            raise NotFound(f"no committed knowledge node {req.node_id!r}")
        children = await store.children(req.node_id)
        return {**node.model_dump(), "children": [c.id for c in children]}

    async def knowledge_list(self, req: KnowledgeListRequest) -> Any:
        store = self._knowledge()
        if req.query:
            roots = req.roots or [req.parent_id or ""]
            nodes = await store.search(req.query, roots, req.limit)
        else:
            nodes = (await store.children(req.parent_id or ""))[: req.limit]
        return {"nodes": [n.model_dump() for n in nodes]}
