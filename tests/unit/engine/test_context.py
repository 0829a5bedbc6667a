"""External events, group context, context recovery, mid-turn policy (KS-14, KS-15, KS-21)."""

from __future__ import annotations

import pytest

from core.engine import MidTurnAction, MidTurnPolicy, RuntimeModel, SessionOptions, decide_mid_turn
from core.engine.recovery import projected_tokens

from .conftest import PROMPT, Recorder, SessionFactory


@pytest.mark.rule("KS-14")
async def test_answers_are_found_by_exact_external_event(make_session: SessionFactory) -> None:
    # KS-14
    session = await make_session()
    await session.begin_user_turn('/tool reply {"text": "first"}\n/say second', {"external_event_id": "ev-1"})
    await session.run_pending_turn("op", Recorder())
    first_turn = session.turn_id
    await session.begin_user_turn("other", {"external_event_id": "ev-10"})
    await session.run_pending_turn("op-2", Recorder())
    responses = session.responses_for_external_event("ev-1")
    assert [r["text"] for r in responses] == ["first", "second"]
    assert {r["turn_id"] for r in responses} == {first_turn}
    assert session.answer_for_external_event("ev-1")["text"] == "second"
    assert session.answer_for_external_event("ev-10")["text"] == "echo: other"
    assert session.answer_for_external_event("ev") is None
    assert session.responses_for_external_event("ev-2") == []


@pytest.mark.rule("KS-14")
async def test_notices_are_responses_but_not_answers(make_session: SessionFactory) -> None:
    # KS-14
    session = await make_session()
    await session.begin_user_turn("/stall 5", {"external_event_id": "ev-stop"})
    await session.interrupt_current_turn()
    assert [r["kind"] for r in session.responses_for_external_event("ev-stop")] == ["notice"]
    assert session.answer_for_external_event("ev-stop") is None


@pytest.mark.rule("KS-15")
async def test_group_context_refresh_is_a_noop_outside_groups(make_session: SessionFactory) -> None:
    # KS-15
    session = await make_session()
    before = session.snapshot()
    assert await session.refresh_group_context({"title": "x"}, "m1") is False
    assert session.snapshot() == before


@pytest.mark.rule("KS-15")
async def test_group_context_refresh_replaces_context_with_one_box(make_session: SessionFactory) -> None:
    # KS-15
    options = SessionOptions.conversation("group", ["root"]).with_changes(
        channel={"chat": {"multi_party": True}}, group_context={"title": "old"}
    )
    session = await make_session(options=options)
    recorder = Recorder()
    assert await session.refresh_group_context({"title": "new", "members": 3}, "msg-9", checkpoint=recorder)
    snap = recorder.snapshots[-1]
    assert snap["group_context"] == {"title": "new", "members": 3}
    assert len(snap["boxes"]) == 1 and snap["boxes"][0]["current_message_id"] == "msg-9"
    assert [i["kind"] for i in snap["transcript"]] == ["box"]
    assert "[controller update (current message msg-9)]" in snap["chatend_text"]


@pytest.mark.rule("KS-15")
async def test_group_context_refresh_applies_context_recovery(make_session: SessionFactory) -> None:
    # KS-15, KS-21
    options = SessionOptions.conversation("group", []).with_changes(channel={"chat": {"multi_party": True}})
    session = await make_session(options=options, runtime=RuntimeModel(model="m", context_window_tokens=150))
    for i in range(4):
        await session.stage_source_message(False, f"message {i} " + "z" * 150)
    assert await session.refresh_group_context({"topic": "t"}, None)
    assert session.transcript[0]["kind"] == "summary"


@pytest.mark.rule("KS-21")
async def test_context_recovery_summarises_old_turns_and_keeps_the_journal(make_session: SessionFactory, journal) -> None:
    # KS-21
    window = 400
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=window))
    usage_before = 0
    for turn in range(12):
        await session.begin_user_turn(f"turn {turn}: " + "w" * 200)
        await session.run_pending_turn(f"op-{turn}", Recorder())
        assert projected_tokens(PROMPT, session.transcript) <= window + 100
        usage_before = session.usage_total.input_tokens
    summaries = [i for i in session.transcript if i["kind"] == "summary"]
    assert len(summaries) == 1 and session.transcript[0]["kind"] == "summary"
    assert len(session.transcript) < 10, "the snapshot stays bounded"
    assert usage_before > 0
    entries = await journal.load(session.session_id)
    user_texts = [e.payload["text"] for e in entries if e.kind.value == "user_message"]
    assert len(user_texts) == 12, "nothing is dropped from the journal"
    summary_entries = [e for e in entries if e.kind.value == "summary"]
    assert all(e.payload["usage"]["input_tokens"] > 0 for e in summary_entries)


@pytest.mark.rule("KS-21")
async def test_context_recovery_never_cuts_the_pending_turn(make_session: SessionFactory) -> None:
    # KS-21
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=60))
    await session.begin_user_turn("only turn " + "q" * 400 + '\n/tool knowledge_search {"query": "q"}')
    assert await session.run_pending_turn("op", Recorder())
    assert all(i["kind"] != "summary" for i in session.transcript)


def test_mid_turn_policy_decisions() -> None:
    assert decide_mid_turn("enqueue", turn_running=False, turn_pending=False) is MidTurnAction.BEGIN
    assert decide_mid_turn(MidTurnPolicy.ENQUEUE, turn_running=True, turn_pending=True) is MidTurnAction.ENQUEUE
    assert decide_mid_turn("interrupt", turn_running=True, turn_pending=True) is MidTurnAction.INTERRUPT_THEN_BEGIN
    assert decide_mid_turn("reject", turn_running=False, turn_pending=True) is MidTurnAction.REJECT
    with pytest.raises(ValueError):
        decide_mid_turn("drop", turn_running=True, turn_pending=True)
