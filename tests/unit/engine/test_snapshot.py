"""Snapshots are complete, versioned, and restore exactly in every state (KS-20)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from core.engine import AgentMode, SessionOptions, Snapshot, TurnExhausted
from core.engine.snapshot import EncodedSnapshot
from core.errors import CheckpointFailed, InvalidInput
from tests.fakes.journal import InMemoryJournal

from .conftest import Recorder, SessionFactory

REQUIRED_FIELDS = {
    "format_version", "state_version", "session_id", "session_type", "channel", "orchestration",
    "root_node_ids", "reference_root_node_ids", "transcript", "turn", "rounds_used", "completed",
    "commit", "knowledge_plan", "boxes", "events", "projection", "chatend_text", "status",
}


def _wire(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint consumer gets back: the encoded bytes a callback received, parsed."""
    return orjson.loads(snapshot.raw if isinstance(snapshot, EncodedSnapshot) else orjson.dumps(snapshot))


async def _assert_round_trip(make_session: SessionFactory, snapshot: Mapping[str, Any], **overrides) -> None:
    wire = _wire(snapshot)
    restored = await make_session(restored=wire, journal=InMemoryJournal(), **overrides)
    assert restored.snapshot() == snapshot


@pytest.mark.rule("KS-20")
async def test_snapshot_is_complete_and_versioned(make_session: SessionFactory) -> None:
    # KS-20
    session = await make_session()
    snap = session.snapshot()
    assert set(snap) >= REQUIRED_FIELDS
    assert snap["format_version"] == 1
    schema = Snapshot.model_json_schema()
    assert set(schema["properties"]) >= REQUIRED_FIELDS


@pytest.mark.rule("KS-20")
async def test_every_checkpoint_of_a_tool_turn_restores_exactly(make_session: SessionFactory) -> None:
    # KS-20: idle, pending, mid-tool-call (issued, no result), after results, answered, ended
    session = await make_session()
    states = [session.snapshot()]
    recorder = Recorder()
    await session.begin_user_turn(
        '/tool knowledge_search {"query": "x"}\n/tool+ reply {"text": "hey"}\n/say fin',
        {"external_event_id": "e1", "attachments": [{"file_name": "a.txt", "media_type": "text/plain", "data_base64": "YQ=="}]},
        checkpoint=recorder,
    )
    await session.run_pending_turn("op", recorder)
    states += recorder.snapshots
    assert any(s["turn"]["open_calls"] and s["turn"]["open_calls"][0]["dispatched"] for s in states)
    for snap in states:
        await _assert_round_trip(make_session, snap)


@pytest.mark.rule("KS-20")
async def test_interrupted_exhausted_and_compacted_states_restore_exactly(make_session: SessionFactory) -> None:
    # KS-20
    from core.engine import RuntimeModel

    runtime = RuntimeModel(model="m", context_window_tokens=120)
    options = SessionOptions.conversation("g", ["root"]).with_changes(max_rounds=1, channel={"chat": {"multi_party": True}})
    session = await make_session(options=options, runtime=runtime)
    recorder = Recorder()
    await session.begin_user_turn("one " * 60 + '\n/tool knowledge_search {"query": "x"}', checkpoint=recorder)
    with pytest.raises(TurnExhausted, match="used all 1 model rounds"):
        await session.run_pending_turn("op", recorder)
    await session.refresh_group_context({"members": ["a", "b"]}, "m-1", checkpoint=recorder)
    await session.interrupt_current_turn(checkpoint=recorder)
    await session.begin_user_turn("two " * 60, checkpoint=recorder)
    await session.run_pending_turn("op-2", recorder)
    assert any(s["transcript"][0]["kind"] == "summary" for s in recorder.snapshots)
    assert any(s["status"] == "exhausted" for s in recorder.snapshots)
    for snap in recorder.snapshots:
        await _assert_round_trip(make_session, snap, runtime=runtime)


@pytest.mark.rule("KS-20")
async def test_free_time_states_restore_exactly(make_session: SessionFactory) -> None:
    # KS-20
    options = SessionOptions.conversation("ft", ["root"]).with_changes(
        mode=AgentMode.free_time(), free_time={"budget_s": 60},
        channel={"instructions": '/tool knowledge_write {"parent_id": "root", "content": "note"}\n/tool finish {"result": "wrote"}'},
    )
    session = await make_session(options=options)
    recorder = Recorder()
    await session.stage_free_time_opening(checkpoint=recorder)
    await session.run_pending_turn("op", recorder)
    assert recorder.snapshots[-1]["completed"]
    for snap in recorder.snapshots:
        await _assert_round_trip(make_session, snap)


@pytest.mark.rule("KS-20")
async def test_unknown_format_version_is_refused(make_session: SessionFactory) -> None:
    # KS-20
    snap = (await make_session()).snapshot()
    snap["format_version"] = 99
    with pytest.raises(InvalidInput):
        await make_session(restored=snap)


async def test_snapshot_of_other_session_is_refused(make_session: SessionFactory) -> None:
    snap = (await make_session()).snapshot()
    with pytest.raises(InvalidInput):
        await make_session(restored=snap, session_id="someone-else")


async def test_checkpoint_failure_is_checkpoint_failed(make_session: SessionFactory) -> None:
    session = await make_session()
    with pytest.raises(CheckpointFailed):
        await session.begin_user_turn("x", checkpoint=Recorder(fail_at=0))


@pytest.mark.rule("KS-20")
async def test_the_fast_snapshot_equals_the_validated_model_in_every_checkpoint(make_session: SessionFactory) -> None:
    # KS-20: build_snapshot skips re-serialising the transcript; it must still be exactly the model's dump.
    session = await make_session()
    recorder = Recorder()
    await session.begin_user_turn('/tool knowledge_search {"query": "x"}\nfind it', {}, checkpoint=recorder)
    await session.run_pending_turn("op-fast", recorder)
    assert len(recorder.snapshots) >= 4
    assert session.snapshot() == _wire(recorder.snapshots[-1])
    for snap in recorder.snapshots:
        assert isinstance(snap, EncodedSnapshot)
        wire = _wire(snap)
        assert wire == Snapshot.model_validate(wire).model_dump(mode="json")
        assert set(wire) == set(Snapshot.model_fields)


@pytest.mark.rule("KS-20")
async def test_encoded_snapshots_equal_a_full_build_through_growth_compaction_and_a_reopen(
    make_session: SessionFactory,
) -> None:
    # KS-20: the spliced bytes (memoised per item) equal the full build at every step, also after
    # context recovery rewrote the transcript and after a reopen from a snapshot (a fresh memo).
    from core.engine import RuntimeModel

    small = RuntimeModel(model="test-model", reasoning_effort="low", context_window_tokens=300)
    session = await make_session(runtime=small)
    seen: list[tuple[dict[str, Any], dict[str, Any], list[int]]] = []

    async def check(snap: EncodedSnapshot) -> None:
        seen.append((_wire(snap), session.snapshot(), [i["seq"] for i in snap.new_items + snap.new_events]))

    for turn in range(12):
        await session.begin_user_turn(f"message {turn} " + "words " * 20, {}, checkpoint=check)
        await session.run_pending_turn(f"op-{turn}", check)
        if turn == 6:
            session = await make_session(runtime=small, restored=seen[-1][0], journal=InMemoryJournal())
    assert any(item["kind"] == "summary" for item in seen[-1][0]["transcript"])  # compaction happened
    versions = [0]
    for wire, built, new_seqs in seen:
        assert wire == built
        assert all(seq >= versions[-1] for seq in new_seqs) and all(seq < wire["state_version"] for seq in new_seqs)
        versions.append(wire["state_version"])


def test_the_fields_encoded_by_orjson_are_the_tail_of_the_state_so_checkpoint_bytes_keep_their_key_order() -> None:
    # encode_snapshot splices ORJSON_TAIL_FIELDS after pydantic's encoding of the rest: that is
    # the order a checkpoint always had only while they are the state's last fields.
    from core.engine.snapshot import ORJSON_TAIL_FIELDS
    from core.engine.state import SessionState

    fields = [name for name in SessionState.model_fields if name != "transcript"]
    assert tuple(fields[-len(ORJSON_TAIL_FIELDS):]) == ORJSON_TAIL_FIELDS


def _plain_bytes(session: Any) -> bytes:
    """The checkpoint bytes encoded without any memo: pydantic's JSON of the state's typed fields,
    then orjson's of the rest of ``build_snapshot``, in the snapshot's field order (how the
    encoder has always laid out a checkpoint)."""
    from pydantic_core import to_jsonable_python

    from core.engine.snapshot import NOT_IN_REST, ORJSON_TAIL_FIELDS, build_snapshot

    state = session.state
    data = build_snapshot(state, session.system_prompt)
    rest = state.model_dump_json(exclude=NOT_IN_REST).encode()
    order = [*ORJSON_TAIL_FIELDS, "transcript", *(k for k in data if k not in type(state).model_fields)]
    after = orjson.dumps({k: data[k] for k in order}, default=to_jsonable_python)
    return rest[:-1] + b"," + after[1:]


@pytest.mark.rule("KS-20")
async def test_checkpoint_bytes_equal_the_plain_encoding_through_the_event_cap_compaction_and_a_reopen(
    make_session: SessionFactory,
) -> None:
    # KS-20: the spliced checkpoint (per-item transcript JSON, per-record events JSON, the state's
    # serializer called directly) is byte for byte the plain encoding, also once the events list is
    # cut at its head (MAX_EVENTS), after a compaction rewrote the transcript and after a reopen.
    from core.engine import RuntimeModel
    from core.engine.state import MAX_EVENTS

    small = RuntimeModel(model="test-model", reasoning_effort="low", context_window_tokens=600)
    session = await make_session(runtime=small)
    compared = 0

    async def check(snap: EncodedSnapshot) -> None:
        nonlocal compared
        assert snap.raw == _plain_bytes(session)
        compared += 1

    for turn in range(40):
        meta = {"external_event_id": f"e{turn}", "inbound_id": f"in{turn}"}
        await session.begin_user_turn(f"message {turn} \"quoted\" é " + "words " * 8, meta, checkpoint=check)
        await session.run_pending_turn(f"op-{turn}", check)
        if turn == 25:
            wire = orjson.loads(_plain_bytes(session))
            session = await make_session(runtime=small, restored=wire, journal=InMemoryJournal())
    state = session.state
    assert len(state.events) == MAX_EVENTS and state.events[0]["seq"] > 0  # cut at its head
    assert state.compacted_through_seq >= 0  # compaction happened
    assert compared >= 80
