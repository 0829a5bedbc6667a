"""A session with a snapshot budget compacts its conversation before a checkpoint would pass it
(KS-21's recovery, run for MQ-3: a checkpoint the broker refuses is a transition without one).

Each transcript item costs ~300 bytes of snapshot JSON three times over (transcript, projection,
chatend text), so short messages fill megabytes of checkpoint long before a token window.
"""

from __future__ import annotations

from typing import Any

import pytest

from consumers.session_opener import snapshot_budget
from core.engine import RuntimeModel, Session, ToolRegistry, builtin_registry
from core.engine.chatend import memo_for
from core.engine.tools import ToolOutcome
from core.engine.tools.registry import ToolDefinition
from core.engine.turn_loop import MAX_TOOL_RESULT_CHARS

from .conftest import Recorder, SessionFactory

BUDGET = 40_000
OPEN = {"type": "object", "properties": {}, "additionalProperties": True}
BIG_WINDOW = RuntimeModel(model="m", context_window_tokens=10_000_000)


async def _talk(session: Session, texts: list[str]) -> list[int]:
    """One turn per text; the sizes of every snapshot handed to the checkpoint callback."""
    recorder = Recorder()
    for turn, text in enumerate(texts):
        await session.begin_user_turn(text, checkpoint=recorder)
        await session.run_pending_turn(f"op-{turn}", recorder)
    return [len(snapshot.raw) for snapshot in recorder.snapshots]


@pytest.mark.rule("KS-21")
async def test_a_conversation_of_short_messages_is_compacted_under_the_snapshot_budget(
    make_session: SessionFactory, journal
) -> None:
    # KS-21: compacted through the provider, usage counted, nothing dropped from the journal
    session = await make_session(runtime=BIG_WINDOW, snapshot_max_bytes=BUDGET)
    sizes = await _talk(session, [f"hi {turn}" for turn in range(150)])
    assert max(sizes) <= BUDGET, f"a snapshot of {max(sizes)} B passed the budget of {BUDGET} B"
    assert session.transcript[0]["kind"] == "summary"
    assert session.usage_total.input_tokens > 0
    entries = await journal.load(session.session_id)
    assert sum(1 for e in entries if e.kind.value == "user_message") == 150
    assert sum(1 for e in entries if e.kind.value == "summary") > 1, "compacted more than once"


async def test_without_a_budget_only_the_window_compacts(make_session: SessionFactory) -> None:
    session = await make_session(runtime=BIG_WINDOW)
    await _talk(session, [f"hi {turn}" for turn in range(150)])
    assert all(item["kind"] != "summary" for item in session.transcript)
    assert memo_for(session.transcript).conversation_bytes > BUDGET


def test_the_budget_is_the_setting_at_most_the_broker_limit_less_an_eighth() -> None:
    assert snapshot_budget(None, 8_388_608) == 7_340_032
    assert snapshot_budget(1_000_000, 8_388_608) == 1_000_000
    assert snapshot_budget(9_000_000, 8_388_608) == 7_340_032
    assert snapshot_budget(None, 1_048_576) == 917_504
    assert snapshot_budget(500_000, 0) == 500_000  # not connected: the setting alone
    assert snapshot_budget(None, 0) is None


async def _flood(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(ok=True, content="f" * 1_000_000)


def _flood_registry() -> ToolRegistry:
    registry = builtin_registry()
    registry.register(ToolDefinition(name="flood", description="a megabyte of text", parameters=OPEN, handler=_flood))
    return registry


async def test_a_huge_tool_result_is_cut_to_fit_the_snapshot_budget(make_session: SessionFactory) -> None:
    # Kept whole, it would be in every later snapshot of the session: no checkpoint could be stored again.
    session = await make_session(runtime=BIG_WINDOW, snapshot_max_bytes=BUDGET, tools=_flood_registry())
    sizes = await _talk(session, [f"/tool flood {{}}\n/say done {turn}" for turn in range(3)])
    assert max(sizes) <= BUDGET, f"a snapshot of {max(sizes)} B passed the budget of {BUDGET} B"
    results = [i["payload"]["content"] for i in session.transcript if i["kind"] == "tool_result"]
    assert results and all(r.startswith("f" * 100) and r.endswith("more characters]") for r in results)
    assert session.turn_outputs[-1].text == "done 2"


async def test_without_a_budget_a_tool_result_is_cut_at_its_own_limit(make_session: SessionFactory) -> None:
    session = await make_session(runtime=BIG_WINDOW, tools=_flood_registry())
    await session.begin_user_turn("/tool flood {}\n/say done")
    await session.run_pending_turn("op", Recorder())
    (content,) = [i["payload"]["content"] for i in session.transcript if i["kind"] == "tool_result"]
    assert content == "f" * MAX_TOOL_RESULT_CHARS + f"\n[truncated: {1_000_000 - MAX_TOOL_RESULT_CHARS} more characters]"
