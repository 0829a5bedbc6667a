"""Time travel: the snapshot at any state version, rebuilt from the journal, is the checkpoint of that version."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from core.engine import RuntimeModel, SessionOptions
from core.engine.snapshot import EncodedSnapshot, state_from_snapshot
from core.engine.time_travel import snapshot_at, state_at, system_prompt_of
from core.errors import InvalidInput, NotFound
from tests.fakes.journal import InMemoryJournal

from .conftest import PROMPT, SessionFactory


class RawRecorder:
    """A checkpoint callback keeping each checkpoint's exact bytes."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []

    async def __call__(self, snapshot: EncodedSnapshot) -> None:
        self.raw.append(snapshot.raw)


async def _busy_group_session(make_session: SessionFactory) -> tuple[Any, RawRecorder]:
    """A group session through tool rounds, an attachment, controller boxes and context recovery."""
    options = SessionOptions.conversation("group", ["root"]).with_changes(channel={"chat": {"multi_party": True}})
    session = await make_session(options=options, runtime=RuntimeModel(model="m", context_window_tokens=600))
    checkpoints = RawRecorder()
    await session.begin_user_turn(
        '/tool knowledge_search {"query": "x"}\n/tool+ reply {"text": "hey"}\n/say fin',
        {"external_event_id": "e1", "inbound_id": "in-1",
         "attachments": [{"file_name": "a.txt", "media_type": "text/plain", "data_base64": "YQ=="}]},
        checkpoint=checkpoints,
    )
    await session.run_pending_turn("op-1", checkpoints)
    await session.refresh_group_context({"topic": "t"}, "msg-1", checkpoint=checkpoints)
    for turn in range(6):
        await session.begin_user_turn(f"turn {turn}: " + "w" * 200, {"external_event_id": f"e{turn + 2}"},
                                      checkpoint=checkpoints)
        await session.run_pending_turn(f"op-{turn + 2}", checkpoints)
    await session.refresh_group_context({"topic": "u"}, None, checkpoint=checkpoints)
    return session, checkpoints


async def test_the_snapshot_rebuilt_at_every_version_is_that_checkpoint_byte_for_byte(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    session, checkpoints = await _busy_group_session(make_session)
    entries = await journal.load(session.session_id)
    assert any(e.kind.value == "summary" for e in entries), "context recovery ran"
    latest = orjson.loads(checkpoints.raw[-1])
    header = state_from_snapshot(latest)
    assert system_prompt_of(latest) == PROMPT
    assert len(checkpoints.raw) > 20
    for raw in checkpoints.raw:
        version = orjson.loads(raw)["state_version"]
        rebuilt = snapshot_at(header, entries, version, PROMPT)
        assert orjson.dumps(rebuilt) == raw, f"state version {version}"


async def test_a_version_between_checkpoints_is_the_fold_of_its_prefix(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    session, checkpoints = await _busy_group_session(make_session)
    entries = await journal.load(session.session_id)
    header = state_from_snapshot(orjson.loads(checkpoints.raw[-1]))
    for version in range(1, len(entries) + 1):
        state = state_at(header, entries, version)
        assert state.next_seq == version
        assert all(item["seq"] < version for item in state.transcript)
    first = state_at(header, entries, 1)
    assert first.transcript == [] and first.group_context == {} and first.started_at == entries[0].payload["started_at"]


async def test_versions_outside_the_journal_are_refused(make_session: SessionFactory, journal: InMemoryJournal) -> None:
    session, checkpoints = await _busy_group_session(make_session)
    entries = await journal.load(session.session_id)
    header = state_from_snapshot(orjson.loads(checkpoints.raw[-1]))
    with pytest.raises(InvalidInput):
        state_at(header, entries, 0)
    with pytest.raises(NotFound):
        state_at(header, entries, len(entries) + 1)
    with pytest.raises(NotFound):
        state_at(header, [], 1)


def test_a_prompt_is_read_back_only_from_a_consistent_chatend_text() -> None:
    sha = "0" * 64
    snap: dict[str, Any] = {"chatend_text": "[system]\nP\n\n", "projection": [], "system_prompt_sha256": sha}
    assert system_prompt_of(snap) is None  # the sha256 is not P's
    import hashlib

    snap["system_prompt_sha256"] = hashlib.sha256(b"P").hexdigest()
    assert system_prompt_of(snap) == "P"
    snap["projection"] = [{"role": "user", "content": "hi"}]
    assert system_prompt_of(snap) is None  # the text lacks the projection's block
    snap["chatend_text"] = "[system]\nP\n\n[user]\nhi\n"
    assert system_prompt_of(snap) == "P"
