"""Completion (KS-17, KS-18): finalizing a free-time slice and committing a write session."""

from __future__ import annotations

from core.engine.drafts import Checkpoint, interrupted_result
from core.engine.journal import EntryKind
from core.engine.session_port import SessionPort
from core.errors import Conflict, InvalidInput

FREE_TIME_REASONS = ("tool", "deadline", "hard-stop", "user-stop")
WRITE_MODES = ("free_time", "wakeup", "ingress")


async def finalize_free_time(session: SessionPort, reason: str, result: str, checkpoint: Checkpoint | None) -> None:
    """KS-17: exactly tool | deadline | hard-stop | user-stop; records the result, clears the turn."""
    if reason not in FREE_TIME_REASONS:
        raise InvalidInput(f"free-time finalize reason must be one of {', '.join(FREE_TIME_REASONS)}, not {reason!r}")
    state = session.state
    if state.mode.kind != "free_time":
        raise InvalidInput(f"finalize_free_time needs free_time mode, not {state.mode.kind}")
    if session.running:
        raise Conflict("a run is in progress: cancel it first")
    if state.free_time_result is not None:
        raise Conflict("this free-time slice is already finalized")
    drafts = [
        session.draft(EntryKind.TOOL_RESULT, interrupted_result(c.id, c.name, f"free time ended ({reason})"))
        for c in state.turn.open_calls
    ]
    drafts.append(session.draft(EntryKind.EVENT, {"type": "finalized", "reason": reason, "result": result}))
    await session.commit(drafts, checkpoint)


async def commit_write_session(session: SessionPort, checkpoint: Checkpoint | None) -> None:
    """KS-18: only free_time / wakeup / ingress; atomic, revalidated knowledge commit, then completed."""
    state = session.state
    if state.mode.kind not in WRITE_MODES:
        raise InvalidInput(f"commit_current_write_session is not valid in {state.mode.kind} mode")
    if state.commit is not None:
        return
    if state.turn.pending:
        raise Conflict("a turn is still pending; finalize or interrupt it before committing")
    plan = state.knowledge_plan
    await session.knowledge.commit(plan.write_session_id, list(plan.ops))
    payload = {"type": "committed", "write_session_id": plan.write_session_id, "op_count": len(plan.ops)}
    await session.commit([session.draft(EntryKind.EVENT, payload)], checkpoint)
