"""Manager: turn bookkeeping fed by the session worker (SM-13, 14, 15, 16)."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from core.sessions.manager import SessionManager
from core.sessions.memory_repo import InMemorySessionRepository, RecordingEventSink
from core.sessions.records import LastTurn, TokenUsage

from .conftest import FakeClock, ManagerFactory, new_id


@pytest.mark.rule("SM-16")
@pytest.mark.parametrize(
    ("outcome", "status"),
    [("replied", "completed"), ("silent", "completed"), ("aborted", "completed"), ("error", "error"), (None, "completed")],
)
async def test_the_last_running_turn_closes_an_active_session(
    manager: SessionManager, outcome: str | None, status: str
) -> None:
    # SM-16
    record = await manager.create_session({"status": "waiting"})
    started = await manager.turn_started(record.id)
    assert started is not None and started.status == "active"
    ended = await manager.turn_ended(record.id, outcome, "boom", 100.0)
    assert ended is not None and ended.status == status


@pytest.mark.rule("SM-16", "SM-13")
async def test_with_concurrent_turns_only_the_last_one_closes_the_status(manager: SessionManager) -> None:
    # SM-16, SM-13
    record = await manager.create_session()
    await manager.turn_started(record.id)
    await manager.turn_started(record.id)
    first = await manager.turn_ended(record.id, "replied", None, 10.0)
    assert first is not None and first.status == "active" and first.last_reply_at == 10.0
    assert manager.running_turns(record.id) == 1
    last = await manager.turn_ended(record.id, "error", "bad", 20.0)
    assert last is not None and last.status == "error" and last.last_reply_at == 10.0


@pytest.mark.rule("SM-16", "SM-33")
async def test_a_child_completed_with_its_reply_stays_completed_when_its_turn_ends(manager: SessionManager) -> None:
    # SM-16, SM-33
    parent = await manager.create_session()
    child = await manager.create_child_session(parent.id)
    await manager.turn_started(child.id)
    await manager.complete_session(child.id, "done: 42")
    ended = await manager.turn_ended(child.id, "error", "late failure", 5.0)
    assert ended is not None and ended.status == "completed" and ended.result == "done: 42"


@pytest.mark.rule("SM-13")
@pytest.mark.parametrize("outcome", ["silent", "aborted", "error"])
async def test_last_reply_at_is_written_only_for_replied(manager: SessionManager, outcome: str) -> None:
    # SM-13
    record = await manager.create_session()
    await manager.turn_ended(record.id, "replied", None, 50.0)
    after = await manager.turn_ended(record.id, outcome, None, 60.0)
    assert after is not None and after.last_reply_at == 50.0


@pytest.mark.rule("SM-14")
async def test_last_turn_keeps_an_error_only_for_error_outcomes_cut_to_200_chars(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-14
    record = await manager.create_session()
    sink.clear()
    long_error = "x" * 500
    ended = await manager.turn_ended(record.id, "error", long_error, 7.0)
    assert ended is not None and ended.last_turn == LastTurn("error", 7.0, "x" * 200)
    assert repo.sessions[record.id].last_turn == ended.last_turn
    assert sink.pairs() == [(record.id, "session.updated")]
    empty = await manager.turn_ended(record.id, "error", "", 8.0)
    assert empty is not None and empty.last_turn == LastTurn("error", 8.0, None)
    silent = await manager.turn_ended(record.id, "silent", "ignored", 9.0)
    assert silent is not None and silent.last_turn == LastTurn("silent", 9.0, None)
    blocked = await manager.turn_ended(record.id, None, None, 10.0)
    assert blocked is not None and blocked.last_turn == LastTurn("silent", 10.0, None)
    with pytest.raises(InvalidInput):
        await manager.turn_ended(record.id, "exploded", None, 11.0)


@pytest.mark.rule("SM-14", "SM-16")
async def test_a_stopped_session_ends_completed_with_an_aborted_last_turn(manager: SessionManager) -> None:
    # SM-14, SM-16
    record = await manager.create_session()
    await manager.turn_started(record.id)
    stopped = await manager.turn_ended(record.id, "aborted", None, 3.0)
    assert stopped is not None and stopped.status == "completed" and stopped.last_turn == LastTurn("aborted", 3.0)


@pytest.mark.rule("SM-15")
async def test_tokens_sum_own_usage_without_touching_updated_at_and_persist(
    manager: SessionManager,
    sink: RecordingEventSink,
    clock: FakeClock,
    make_manager: ManagerFactory,
    repo: InMemorySessionRepository,
) -> None:
    # SM-15
    parent = await manager.create_session()
    child = await manager.create_child_session(parent.id)
    clock.advance(60)
    sink.clear()
    await manager.add_usage(parent.id, 100, 20)  # chat
    await manager.add_usage(parent.id, 30, 5)  # summary
    await manager.add_usage(child.id, 1000, 1000)  # the child's own, not the parent's
    record = manager.get_session(parent.id)
    assert record is not None and record.tokens == TokenUsage(130, 25)
    assert record.updated_at == parent.updated_at
    assert sink.pairs() == [(parent.id, "session.updated")] * 2 + [(child.id, "session.updated")]
    assert await manager.add_usage(new_id(), 1, 1) is None  # usage never creates a session
    restarted = await make_manager()
    assert restarted.get_session(parent.id).tokens == TokenUsage(130, 25)  # type: ignore[union-attr]
    await restarted.delete_session(parent.id)
    assert parent.id not in repo.sessions
