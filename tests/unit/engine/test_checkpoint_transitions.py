"""Checkpoint transition names from the entries new since the previous checkpoint (pure)."""

from __future__ import annotations

from typing import Any

from consumers.checkpoint_transitions import transition_of
from core.engine import RuntimeModel
from core.engine.snapshot import EncodedSnapshot

from .conftest import Recorder, SessionFactory


def _item(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "payload": payload}


def _snap(items: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> EncodedSnapshot:
    """A snapshot carrying ``items`` and ``events`` as its entries (the bytes do not matter here)."""
    events = events or []
    version = max((int(e["seq"]) + 1 for e in [*items, *events]), default=0)
    return EncodedSnapshot(b"{}", version, items, events)


def test_a_model_response_with_tool_calls_is_not_an_answer() -> None:
    base = [_item(0, "user_message", text="hi")]
    calls = _snap([*base, _item(1, "agent_message", text="", tool_calls=[{"id": "c"}])])
    answer = _snap([*base, _item(1, "agent_message", text="done", tool_calls=[])])
    assert transition_of(calls, 1) == "model_response"
    assert transition_of(answer, 1) == "answer"


def test_a_tool_result_wins_over_what_the_tool_staged_with_it() -> None:
    snap = _snap([_item(3, "tool_result", id="c"), _item(4, "reply", text="x")],
                 [{"seq": 5, "type": "knowledge_staged"}])
    assert transition_of(snap, 3) == "tool_result"


def test_an_interrupt_is_named_after_its_event_not_its_repaired_results() -> None:
    snap = _snap([_item(3, "tool_result", id="c", interrupted=True), _item(4, "notice", code="user_stop")],
                 [{"seq": 5, "type": "interrupted"}])
    assert transition_of(snap, 3) == "interrupted"


def test_turn_end_finalize_and_commit_are_named_by_their_events() -> None:
    assert transition_of(_snap([], [{"seq": 7, "type": "turn_ended"}]), 7) == "turn_ended"
    both = _snap([], [{"seq": 7, "type": "finalized"}, {"seq": 8, "type": "committed"}])
    assert transition_of(both, 8) == "committed"
    assert transition_of(both, 7) == "committed"


def test_old_entries_do_not_name_a_new_checkpoint() -> None:
    snap = _snap([_item(0, "user_message"), _item(1, "box")], [{"seq": 0, "type": "turn_ended"}])
    assert transition_of(snap, 1) == "group_context"
    assert transition_of(_snap([])) == "opened"


async def test_a_compaction_checkpoint_is_named_context_compacted(make_session: SessionFactory) -> None:
    # The summary goes first in the transcript with the newest seq: the checkpoint after it still names it.
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=400))
    recorder = Recorder()
    for turn in range(6):
        await session.begin_user_turn(f"turn {turn}: " + "w" * 200, checkpoint=recorder)
        await session.run_pending_turn(f"op-{turn}", recorder)
    names, since = [], 0
    for snapshot in recorder.snapshots:
        names.append(transition_of(snapshot, since))
        since = snapshot.state_version
    assert session.transcript[0]["kind"] == "summary"
    assert "context_compacted" in names and "step" not in names, names
