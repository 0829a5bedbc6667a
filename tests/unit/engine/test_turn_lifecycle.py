"""Turn lifecycle: begin, stage, interrupt, retry (KS-4, KS-5, KS-6, KS-8, KS-9)."""

from __future__ import annotations

import asyncio

import pytest

from core.engine import TurnExhausted
from core.errors import Cancelled, CheckpointFailed, Conflict, InvalidInput
from tests.waiting import wait_for

from .conftest import Recorder, SessionFactory


@pytest.mark.rule("KS-4")
async def test_begin_user_turn_rejects_pending_turn_and_empty_input(make_session: SessionFactory) -> None:
    # KS-4
    session = await make_session()
    assert await session.begin_user_turn("   ") is False
    assert await session.begin_user_turn("hello", {"external_event_id": "ev-1"}) is True
    assert session.pending_turn and session.pending_external_event_id == "ev-1"
    assert await session.begin_user_turn("second") is False


@pytest.mark.rule("KS-4")
async def test_begin_user_turn_stages_text_and_attachments_durably(make_session: SessionFactory, journal) -> None:
    # KS-4
    session = await make_session()
    attachment = {"id": "att-1", "file_name": "note.txt", "media_type": "text/plain", "data_base64": "aGk="}
    assert await session.begin_user_turn("see file", {"attachments": [attachment], "inbound_id": "in-1"})
    kinds = [e.kind.value for e in await journal.load(session.session_id)]
    assert kinds == ["event", "event", "object", "user_message"]
    resolved = await session.resolve_object("att-1")
    assert resolved.data == b"hi" and resolved.file_name == "note.txt"
    assert "note.txt" in session.snapshot()["chatend_text"]


@pytest.mark.rule("KS-4")
async def test_begin_user_turn_resets_round_count(make_session: SessionFactory) -> None:
    # KS-4
    session = await make_session()
    await session.begin_user_turn('/tool knowledge_search {"query": "x"}')
    await session.run_pending_turn("op-1", Recorder())
    assert session.rounds_used == 2
    await session.begin_user_turn("next")
    assert session.rounds_used == 0


async def test_staging_is_idempotent_on_inbound_id(make_session: SessionFactory) -> None:
    session = await make_session()
    assert await session.begin_user_turn("hi", {"inbound_id": "m-1"})
    await session.run_pending_turn("op", Recorder())
    assert await session.begin_user_turn("hi", {"inbound_id": "m-1"}) is False


@pytest.mark.rule("KS-5")
async def test_append_final_user_message_stages_without_opening_a_turn(make_session: SessionFactory) -> None:
    # KS-5
    session = await make_session()
    assert await session.append_final_user_message("bye", {"external_event_id": "ev-9"})
    assert not session.pending_turn
    assert session.transcript[-1]["payload"]["text"] == "bye"
    assert await session.append_final_user_message("again") is False


@pytest.mark.rule("KS-6")
async def test_stage_source_message_marks_owner_and_recovers_context(make_session: SessionFactory) -> None:
    # KS-6
    from core.engine import RuntimeModel

    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=100))
    await session.stage_source_message(False, "user said " + "u" * 300)
    await session.stage_source_message(True, "agent said " + "a" * 300)
    await session.stage_source_message(False, "user again")
    kinds = [i["kind"] for i in session.transcript]
    assert kinds[0] == "summary"
    messages = session.snapshot()["projection"]
    assert messages[-1] == {"role": "user", "content": "user again"}
    with pytest.raises(InvalidInput):
        await session.stage_source_message(True, "")


@pytest.mark.rule("KS-6")
async def test_agent_owned_source_message_is_an_assistant_message(make_session: SessionFactory) -> None:
    # KS-6
    session = await make_session()
    await session.stage_source_message(True, "I already answered that")
    assert session.snapshot()["projection"] == [{"role": "assistant", "content": "I already answered that"}]


@pytest.mark.rule("KS-8")
async def test_interrupt_repairs_orphaned_tool_calls(make_session: SessionFactory) -> None:
    # KS-8
    session = await make_session()
    await session.begin_user_turn('/tool knowledge_search {"query": "x"}\n/stall 30')
    recorder = Recorder()
    op = "op-int"
    run = asyncio.create_task(session.run_pending_turn(op, recorder))
    # wait until the tool result is checkpointed and the stalled second model call started
    await wait_for(
        lambda: session.running and session.state.turn.phase == "tools" and not session.state.turn.open_calls,
        timeout_s=5, interval_s=0, what="the stalled second model call",
    )
    session.cancel(op)
    with pytest.raises(Cancelled):
        await run
    assert session.pending_turn
    assert await session.interrupt_current_turn(checkpoint=recorder)
    snap = recorder.snapshots[-1]
    assert snap["turn"]["pending"] is False
    assert snap["orchestration"]["state"] == "idle"
    assert snap["transcript"][-1]["kind"] == "notice"
    assert snap["last_turn"]["outcome"] == "aborted"


@pytest.mark.rule("KS-8")
async def test_interrupt_mid_tool_call_writes_interrupted_results(make_session: SessionFactory) -> None:
    # KS-8
    session = await make_session()
    await session.begin_user_turn('/tool knowledge_search {"query": "a"}\n/tool+ knowledge_search {"query": "b"}')
    recorder = Recorder(fail_at=1)  # checkpoints: model response, then the first call marker fails
    with pytest.raises(CheckpointFailed):
        await session.run_pending_turn("op", recorder)
    open_ids = [c.id for c in session.state.turn.open_calls]
    assert len(open_ids) == 2
    assert await session.interrupt_current_turn()
    results = [i for i in session.transcript if i["kind"] == "tool_result"]
    assert [r["payload"]["id"] for r in results] == open_ids
    assert all(r["payload"]["interrupted"] for r in results)
    calls = {c["id"] for i in session.transcript if i["kind"] == "agent_message" for c in i["payload"]["tool_calls"]}
    assert calls == {r["payload"]["id"] for r in results}, "no tool call stays without a result"
    assert session.transcript[-1]["payload"]["code"] == "user_stop"
    assert not session.pending_turn


async def test_interrupt_while_running_is_refused(make_session: SessionFactory) -> None:
    session = await make_session()
    await session.begin_user_turn("/stall 30")
    run = asyncio.create_task(session.run_pending_turn("op", Recorder()))
    await wait_for(lambda: session.running, timeout_s=5, interval_s=0, what="the turn to run")
    with pytest.raises(Conflict):
        await session.interrupt_current_turn()
    session.cancel("op")
    with pytest.raises(Cancelled):
        await run


@pytest.mark.rule("KS-9")
async def test_reset_exhausted_rounds_only_for_exhausted_conversation(make_session: SessionFactory) -> None:
    # KS-9
    from core.engine import SessionOptions

    options = SessionOptions.conversation("im-dm", ["root"]).with_changes(max_rounds=2)
    session = await make_session(options=options)
    await session.begin_user_turn(
        '/tool knowledge_search {"query": "a"}\n/tool knowledge_search {"query": "b"}\n/say done'
    )
    assert await session.reset_exhausted_turn_rounds_for_retry() is False  # not exhausted yet
    with pytest.raises(TurnExhausted):
        await session.run_pending_turn("op-1", Recorder())
    assert session.exhausted and session.pending_turn and session.status == "exhausted"
    assert await session.reset_exhausted_turn_rounds_for_retry() is True
    assert session.rounds_used == 0
    assert await session.run_pending_turn("op-2", Recorder()) == "done"


@pytest.mark.rule("KS-9")
async def test_reset_exhausted_rounds_refused_outside_conversation(make_session: SessionFactory) -> None:
    # KS-9
    from core.engine import AgentMode, SessionOptions

    options = SessionOptions.conversation("ft", ["root"]).with_changes(
        mode=AgentMode.free_time(), max_rounds=1,
        channel={"instructions": '/tool knowledge_search {"query": "a"}'},
    )
    session = await make_session(options=options)
    assert await session.stage_free_time_opening()
    with pytest.raises(TurnExhausted):
        await session.run_pending_turn("op", Recorder())
    assert session.exhausted
    assert await session.reset_exhausted_turn_rounds_for_retry() is False
    assert session.exhausted
