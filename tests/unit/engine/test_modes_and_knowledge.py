"""Openings, free time, commits and the knowledge store (KS-7, KS-17, KS-18, KS-16)."""

from __future__ import annotations

import orjson
import pytest

from core.engine import AgentMode, JournalHistoryReader, SessionOptions, ingress_options
from core.engine.state import KnowledgeOp
from core.errors import Conflict, InvalidInput

from .conftest import Recorder, SessionFactory


def _free_time(*lines: str, roots: list[str] | None = None, **changes) -> SessionOptions:
    return SessionOptions.conversation("ft", roots or ["root"]).with_changes(
        mode=AgentMode.free_time(), channel={"instructions": "\n".join(lines)} if lines else {}, **changes
    )


def _write(parent: str, content: str, node_id: str | None = None) -> str:
    args = {"parent_id": parent, "content": content}
    if node_id:
        args["node_id"] = node_id
    return f"/tool knowledge_write {orjson.dumps(args).decode()}"


@pytest.mark.rule("KS-7")
async def test_free_time_opening_is_created_exactly_once(make_session: SessionFactory) -> None:
    # KS-7
    session = await make_session(options=_free_time())
    assert await session.stage_free_time_opening() is True
    assert await session.stage_free_time_opening() is False
    await session.run_pending_turn("op", Recorder())
    assert await session.stage_free_time_opening() is False
    conversation = await make_session(session_id="conv")
    assert await conversation.stage_free_time_opening() is False


@pytest.mark.rule("KS-7")
async def test_wakeup_opening_needs_an_rfc3339_marker(make_session: SessionFactory) -> None:
    # KS-7
    for bad in (None, "tomorrow", "2025-06-01", "2025-06-01T08:00:00"):
        options = SessionOptions.conversation("w", []).with_changes(mode=AgentMode.wakeup(), channel={"wakeup_marker": bad})
        session = await make_session(options=options, session_id=f"w-{bad}")
        with pytest.raises(InvalidInput):
            await session.stage_wakeup_opening()
    options = SessionOptions.conversation("w", []).with_changes(
        mode=AgentMode.wakeup(), channel={"wakeup_marker": "2025-06-01T08:00:00.5+02:00"}
    )
    session = await make_session(options=options)
    assert await session.stage_wakeup_opening() is True
    assert await session.stage_wakeup_opening() is False
    assert "2025-06-01T08:00:00.5+02:00" in session.snapshot()["chatend_text"]


@pytest.mark.rule("KS-17")
async def test_finalize_free_time_accepts_exactly_the_four_reasons(make_session: SessionFactory) -> None:
    # KS-17
    session = await make_session(options=_free_time("/stall 60"))
    await session.stage_free_time_opening()
    for bad in ("", "tool ", "TOOL", "timeout", "hard_stop"):
        with pytest.raises(InvalidInput):
            await session.finalize_free_time(bad)
    recorder = Recorder()
    await session.finalize_free_time("deadline", "ran out of time", checkpoint=recorder)
    assert session.state.free_time_result["reason"] == "deadline"
    assert not session.pending_turn
    assert recorder.snapshots[-1]["free_time_result"]["result"] == "ran out of time"
    with pytest.raises(Conflict):
        await session.finalize_free_time("user-stop")
    for reason in ("tool", "hard-stop", "user-stop"):
        other = await make_session(options=_free_time(), session_id=f"ft-{reason}")
        await other.stage_free_time_opening()
        await other.finalize_free_time(reason)
        assert other.state.free_time_result["reason"] == reason


@pytest.mark.rule("KS-17")
async def test_finish_tool_finalizes_with_reason_tool(make_session: SessionFactory, knowledge) -> None:
    # KS-17, KS-3
    knowledge.seed("root", None, "root node")
    session = await make_session(options=_free_time(_write("root", "idea"), '/tool finish {"result": "noted an idea"}'))
    await session.stage_free_time_opening()
    assert await session.run_pending_turn("op", Recorder()) is None
    assert session.state.free_time_result["reason"] == "tool"
    assert session.completed
    assert [n.content for n in await knowledge.children("root")] == ["idea"]


@pytest.mark.rule("KS-18")
async def test_commit_is_refused_for_conversations(make_session: SessionFactory) -> None:
    # KS-18
    session = await make_session()
    with pytest.raises(InvalidInput):
        await session.commit_current_write_session()


@pytest.mark.rule("KS-18")
async def test_commit_is_atomic_and_revalidated(make_session: SessionFactory, knowledge) -> None:
    # KS-18
    knowledge.seed("root", None, "root")
    knowledge.seed("doc", "root", "v1")
    session = await make_session(options=_free_time(_write("root", "v2", "doc"), _write("root", "fresh", "new-node"), "/say done"))
    await session.stage_free_time_opening()
    # someone else commits a change to "doc" after our session staged its write
    original_commit = session.commit_current_write_session

    async def commit_after_concurrent_change(*, checkpoint=None):
        theirs = KnowledgeOp(op="put_node", node_id="doc", parent_id="root", content="theirs", base_version=1)
        await knowledge.commit("other-writer", [theirs])
        await original_commit(checkpoint=checkpoint)

    session.commit_current_write_session = commit_after_concurrent_change  # type: ignore[method-assign]
    with pytest.raises(Conflict):
        await session.run_pending_turn("op", Recorder())
    assert (await knowledge.get_node("doc")).content == "theirs"
    assert await knowledge.get_node("new-node") is None, "nothing half-written"
    assert not session.completed and len(session.state.knowledge_plan.ops) == 2


@pytest.mark.rule("KS-18")
async def test_commit_success_marks_completed_and_is_repeatable(make_session: SessionFactory, knowledge) -> None:
    # KS-18
    knowledge.seed("root", None, "root")
    options = SessionOptions.conversation("w", ["root"]).with_changes(
        mode=AgentMode.wakeup(), channel={"wakeup_marker": "2025-06-01T08:00:00Z", "instructions": _write("root", "woke")}
    )
    session = await make_session(options=options)
    await session.stage_wakeup_opening()
    recorder = Recorder()
    await session.run_pending_turn("op", recorder)
    assert session.completed and recorder.snapshots[-1]["commit"]["op_count"] == 1
    # a resumed session that repeats the commit does not write twice
    plan = recorder.snapshots[-2]
    reopened = await make_session(options=options, restored=plan)
    await reopened.commit_current_write_session()
    assert len(await knowledge.children("root")) == 1


async def test_writes_are_confined_to_writable_roots(make_session: SessionFactory, knowledge) -> None:
    knowledge.seed("mine", None, "writable")
    knowledge.seed("ref", None, "reference")
    knowledge.seed("ref-child", "ref", "reference child with needle")
    knowledge.seed("outside", None, "outside with needle")
    options = _free_time(
        _write("ref", "no"),
        '/tool knowledge_read {"node_id": "ref-child"}',
        '/tool knowledge_read {"node_id": "outside"}',
        '/tool knowledge_search {"query": "needle"}',
        _write("mine", "yes", "n1"),
        '/tool knowledge_read {"node_id": "n1"}',
        "/say done", roots=["mine"], reference_root_node_ids=["ref"],
    )
    session = await make_session(options=options)
    await session.stage_free_time_opening()
    await session.run_pending_turn("op", Recorder())
    results = [i["payload"] for i in session.transcript if i["kind"] == "tool_result"]
    write_ref, read_ref, read_out, search, write_mine, read_staged = results
    assert not write_ref["ok"] and "forbidden" in write_ref["content"]
    assert read_ref["ok"] and "reference child" in read_ref["content"]
    assert not read_out["ok"]
    assert "ref-child" in search["content"] and "outside" not in search["content"]
    assert write_mine["ok"] and orjson.loads(read_staged["content"])["content"] == "yes"


@pytest.mark.rule("KS-16")
async def test_requires_history_ingress_only_for_terminated_conversation(make_session: SessionFactory) -> None:
    # KS-16
    session = await make_session()
    assert not session.requires_history_ingress()
    await session.append_final_user_message("that's all")
    assert session.requires_history_ingress()
    free = await make_session(options=_free_time(), session_id="ft")
    assert not free.requires_history_ingress()


@pytest.mark.rule("KS-16")
async def test_history_ingress_writes_knowledge_and_commits(make_session: SessionFactory, journal, knowledge) -> None:
    # KS-16, KS-3
    knowledge.seed("root", None, "root")
    conversation = await make_session()
    await conversation.begin_user_turn("my cat is called Tom")
    await conversation.run_pending_turn("op", Recorder())
    await conversation.append_final_user_message("bye")
    assert conversation.requires_history_ingress()
    options = ingress_options(conversation.state, record_id=conversation.session_id, instructions=_write("root", "cat: Tom"))
    ingress = await make_session(
        session_id="ingress-1", options=options, history_reader=JournalHistoryReader(journal)
    )
    assert ingress.pending_turn and "> my cat is called Tom" in ingress.snapshot()["chatend_text"]
    assert await ingress.run_pending_turn("op", Recorder()) is None
    assert ingress.completed
    assert [n.content for n in await knowledge.children("root")] == ["cat: Tom"]
