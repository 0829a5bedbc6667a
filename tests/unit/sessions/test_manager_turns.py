"""Manager: turn bookkeeping fed by the session worker (SM-13, 14, 15, 16)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core.errors import InvalidInput
from core.sessions.manager import SessionManager
from core.sessions.ports import StoreChange
from core.sessions.records import JsonObject, LastTurn, TokenUsage
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink

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


def session_writes(repo: InMemorySessionRepository, session_id: str) -> int:
    """How many stored changes wrote ``session_id``'s record."""
    return sum(1 for change in repo.applied for r in change.sessions if r.id == session_id)


@pytest.mark.rule("SM-15", "SM-16", "SM-32")
async def test_bookkeeping_queued_behind_a_write_lands_as_the_newest_record_with_every_event(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-15, SM-16, SM-32: writes queued behind one another share one write task; each call
    # still returns after its change is stored, and each emits session.updated.
    record = await manager.create_session()
    sink.clear()
    writes = session_writes(repo, record.id)
    repo.gate = asyncio.Event()  # hold the first write in flight
    calls = [
        asyncio.ensure_future(manager.turn_started(record.id)),
        asyncio.ensure_future(manager.add_usage(record.id, 5, 7)),
        asyncio.ensure_future(manager.turn_ended(record.id, "replied", None, 40.0)),
    ]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not any(c.done() for c in calls)  # none returns before its change is stored
    repo.gate.set()
    results = await asyncio.gather(*calls)
    assert all(r is not None for r in results)
    stored = repo.sessions[record.id]
    assert stored.status == "completed" and stored.tokens == TokenUsage(5, 7) and stored.last_reply_at == 40.0
    assert 1 <= session_writes(repo, record.id) - writes < 3  # queued records were carried by newer ones
    assert sink.pairs() == [(record.id, "session.updated")] * 3
    assert [e.payload["change"] for e in sink.events] == ["turn_started", "usage", "turn_ended"]


@pytest.mark.rule("SM-15", "SM-32")
async def test_a_turns_usage_lands_with_its_end_in_one_write_and_one_session_updated(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-15: usage is added to the record and announced by session.updated; riding on the
    # turn's end it costs no write and no event of its own.
    record = await manager.create_session()
    await manager.turn_started(record.id)
    sink.clear()
    writes = session_writes(repo, record.id)
    ended = await manager.turn_ended(record.id, "replied", None, 40.0, usage=(5, 7))
    assert ended is not None and ended.tokens == TokenUsage(5, 7) and ended.status == "completed"
    assert repo.sessions[record.id].tokens == TokenUsage(5, 7)
    assert session_writes(repo, record.id) - writes == 1
    assert [e.payload["change"] for e in sink.events] == ["turn_ended"]
    assert sink.events[0].payload["session"]["tokens"] == {"input": 5, "output": 7}


@pytest.mark.rule("SM-21")
async def test_a_deletion_is_never_overtaken_by_an_older_bookkeeping_write(
    manager: SessionManager, repo: InMemorySessionRepository
) -> None:
    # SM-21: the deletion waits for the session's queued writes, so its row stays deleted.
    record = await manager.create_session()
    hold = asyncio.Event()
    write = repo.apply

    async def held_updates(change: StoreChange, *, lazy: bool = False) -> None:
        if change.sessions:  # hold the bookkeeping writes, not the deletion
            await hold.wait()
        await write(change, lazy=lazy)

    repo.apply = held_updates  # type: ignore[method-assign]
    started = asyncio.ensure_future(manager.turn_started(record.id))
    usage = asyncio.ensure_future(manager.add_usage(record.id, 1, 1))
    await asyncio.sleep(0)
    deletion = asyncio.ensure_future(manager.delete_session(record.id))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not deletion.done()  # waiting for the older writes
    hold.set()
    await asyncio.gather(started, usage, deletion)
    assert record.id not in repo.sessions and manager.get_session(record.id) is None
    assert await manager.turn_ended(record.id, "replied", None, 1.0) is None


async def test_a_failed_bookkeeping_write_is_a_warning_and_the_next_write_carries_it(
    manager: SessionManager, repo: InMemorySessionRepository, caplog: pytest.LogCaptureFixture
) -> None:
    # SM-15
    record = await manager.create_session()
    repo.fail_writes = True
    with caplog.at_level(logging.WARNING):
        usage = await manager.add_usage(record.id, 3, 4)
    assert usage is not None and usage.tokens == TokenUsage(3, 4)
    assert any(r.levelno == logging.WARNING and record.id in r.getMessage() for r in caplog.records)
    repo.fail_writes = False
    await manager.turn_started(record.id)
    assert repo.sessions[record.id].tokens == TokenUsage(3, 4) and repo.sessions[record.id].status == "active"


@pytest.mark.rule("SM-34")
async def test_reads_hand_out_the_held_record_with_its_current_children(manager: SessionManager) -> None:
    # SM-34: records are immutable, so reads copy nothing; a parent's children follow its children.
    parent = await manager.create_session()
    assert manager.get_session(parent.id) is manager.get_session(parent.id)
    first = await manager.create_child_session(parent.id)
    second = await manager.create_child_session(parent.id)
    await manager.turn_started(parent.id)
    assert manager.get_session(parent.id).children == (first.id, second.id)  # type: ignore[union-attr]
    await manager.delete_session(first.id)
    held = manager.get_session(parent.id)
    assert held is not None and held.children == (second.id,) and held.status == "active"
    assert [r.children for r in manager.list_sessions(parent_id=None)] == [(second.id,)]


@pytest.mark.rule("SM-16", "SM-32")
async def test_bookkeeping_behind_is_installed_at_once_and_announced_only_after_its_write(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-16, SM-32: the worker's variant returns a future at once (no task while the writer lock
    # is free); the record changes now, session.updated follows the stored write.
    record = await manager.create_session()
    sink.clear()
    repo.gate = asyncio.Event()
    written = manager.turn_started_behind(record.id)
    assert written is not None and not written.done()
    held = manager.get_session(record.id)
    assert held is not None and held.status == "active" and manager.running_turns(record.id) == 1
    for _ in range(5):
        await asyncio.sleep(0)
    assert sink.events == [] and not written.done()  # not announced before it is stored
    repo.gate.set()
    await written
    assert repo.sessions[record.id].status == "active"
    assert [(e.session_id, e.payload["change"]) for e in sink.events] == [(record.id, "turn_started")]
    assert manager.turn_started_behind(new_id()) is None


@pytest.mark.rule("SM-16", "SM-13")
async def test_bookkeeping_behind_waits_for_a_mutation_holding_the_writer_lock(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-16, SM-13: while a structural write holds the writer lock, the change waits its turn
    # (in a task) and still lands and is announced.
    parent = await manager.create_session()
    record = await manager.create_session()
    await manager.turn_started(record.id)
    sink.clear()
    repo.gate = asyncio.Event()
    child = asyncio.ensure_future(manager.create_child_session(parent.id))  # holds the lock across its write
    for _ in range(5):
        await asyncio.sleep(0)
    written = manager.turn_ended_behind(record.id, "replied", None, 30.0, usage=(2, 3))
    assert written is not None
    for _ in range(5):
        await asyncio.sleep(0)
    held = manager.get_session(record.id)
    assert held is not None and held.status == "active"  # not changed while the mutation runs
    repo.gate.set()
    await asyncio.gather(child, written)
    stored = repo.sessions[record.id]
    assert stored.status == "completed" and stored.last_reply_at == 30.0 and stored.tokens == TokenUsage(2, 3)
    assert ("turn_ended", record.id) in [(e.payload.get("change"), e.session_id) for e in sink.events]


async def holding_writes(repo: InMemorySessionRepository) -> asyncio.Event:
    """Hold every write at the repository's gate; the returned event is set once one is held there."""
    held = asyncio.Event()
    repo.gate = asyncio.Event()
    write = repo.apply

    async def noted(change: StoreChange, *, lazy: bool = False) -> None:
        held.set()
        await write(change, lazy=lazy)

    repo.apply = noted  # type: ignore[method-assign]
    return held


@pytest.mark.rule("SM-16", "SM-32")
async def test_bookkeeping_of_many_sessions_queued_during_a_write_lands_in_one_store_change(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-16, SM-32: records queued while a write is in flight go out together in the next round;
    # each change is still stored before its call returns and is announced once.
    records = [await manager.create_session({"status": "waiting"}) for _ in range(21)]
    sink.clear()
    before = len(repo.applied)
    in_flight = await holding_writes(repo)
    first = manager.turn_started_behind(records[0].id)
    await asyncio.wait_for(in_flight.wait(), 5)
    rest = [manager.turn_started_behind(r.id) for r in records[1:]]
    assert repo.gate is not None
    assert first is not None and all(w is not None for w in rest)
    repo.gate.set()
    await asyncio.gather(first, *rest)  # type: ignore[arg-type]
    rounds = [sorted(r.id for r in change.sessions) for change in repo.applied[before:]]
    assert rounds == [[records[0].id], sorted(r.id for r in records[1:])]
    assert all(repo.sessions[r.id].status == "active" for r in records)
    assert sorted((e.session_id, e.payload["change"]) for e in sink.events) == sorted(
        (r.id, "turn_started") for r in records
    )


@pytest.mark.rule("SM-16")
async def test_one_record_that_fails_to_write_does_not_fail_its_round(
    manager: SessionManager, repo: InMemorySessionRepository, caplog: pytest.LogCaptureFixture
) -> None:
    # SM-16: a round that fails is written again record by record, so only the bad record's
    # write fails (its caller is warned; the next write of the session carries it).
    good, bad, other = [await manager.create_session({"status": "waiting"}) for _ in range(3)]
    in_flight = await holding_writes(repo)
    write = repo.apply

    async def refusing_bad(change: StoreChange, *, lazy: bool = False) -> None:
        if any(r.id == bad.id for r in change.sessions):
            raise RuntimeError("constraint failed")
        await write(change, lazy=lazy)

    repo.apply = refusing_bad  # type: ignore[method-assign]
    held = manager.turn_started_behind(good.id)  # in flight at the gate: the others make the next round
    await asyncio.wait_for(in_flight.wait(), 5)
    assert repo.gate is not None
    calls = [asyncio.ensure_future(manager.turn_started(r.id)) for r in (bad, other)]
    repo.gate.set()
    with caplog.at_level(logging.WARNING):
        await asyncio.gather(held, *calls)  # type: ignore[arg-type]
    assert repo.sessions[good.id].status == "active" and repo.sessions[other.id].status == "active"
    assert repo.sessions[bad.id].status == "waiting"
    assert any(bad.id in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert not any(other.id in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.rule("SM-21", "SM-32")
async def test_a_deletion_follows_the_events_of_the_round_that_wrote_its_session(
    manager: SessionManager, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-21, SM-32: a deletion that starts while a round is being announced waits for the round,
    # so no session.updated of its session follows its session.deleted.
    records = [await manager.create_session({"status": "waiting"}) for _ in range(3)]
    sink.clear()
    first, last = records[0].id, records[-1].id  # announced first and last in their round
    emit = sink.emit
    deletions: list[asyncio.Future[None]] = []

    async def yielding(session_id: str, event_type: str, payload: JsonObject) -> None:
        if session_id == first and event_type == "session.updated":  # the round is written
            deletions.append(asyncio.ensure_future(manager.delete_session(last)))
        await asyncio.sleep(0)  # a real sink awaits the connection
        await emit(session_id, event_type, payload)

    sink.emit = yielding  # type: ignore[method-assign]
    written = [manager.turn_started_behind(r.id) for r in records]  # one round
    await asyncio.gather(*written)  # type: ignore[arg-type]
    assert len(deletions) == 1
    await deletions[0]
    assert [e.event_type for e in sink.events if e.session_id == last] == ["session.updated", "session.deleted"]
    assert last not in repo.sessions
