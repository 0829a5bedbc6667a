"""A reopen from a snapshot reads only the journal rows the snapshot does not cover, and folds them."""

from __future__ import annotations

import orjson
import pytest

from core.engine import JournalEntry
from core.engine.snapshot import EncodedSnapshot
from tests.fakes.journal import InMemoryJournal

from .conftest import Recorder, SessionFactory


class CountingJournal(InMemoryJournal):
    """Records the ``from_seq`` of every load."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[int] = []

    async def load(self, session_id: str, *, generation: int = 0, from_seq: int = 0) -> list[JournalEntry]:
        self.loads.append(from_seq)
        return await super().load(session_id, generation=generation, from_seq=from_seq)


def _wire(snapshot: object) -> dict:
    return orjson.loads(snapshot.raw if isinstance(snapshot, EncodedSnapshot) else orjson.dumps(snapshot))


async def _two_turns_checkpointed_after_the_first(make_session: SessionFactory, journal: CountingJournal) -> dict:
    """Two answered turns journaled; the snapshot returned is the first turn's last (as after a crash
    between the second turn's journal writes and its checkpoints): the journal is ahead of it."""
    session = await make_session(journal=journal)
    first = Recorder()
    await session.begin_user_turn("/say one", {"external_event_id": "e1"}, checkpoint=first)
    await session.run_pending_turn("op-1", first)
    await session.begin_user_turn("/say two", {"external_event_id": "e2"}, checkpoint=None)
    await session.run_pending_turn("op-2", None)
    return _wire(first.snapshots[-1])


@pytest.mark.rule("KS-20", "MQ-2")
async def test_a_reopen_reads_the_journal_from_the_snapshot_on(make_session: SessionFactory) -> None:
    journal = CountingJournal()
    snap = await _two_turns_checkpointed_after_the_first(make_session, journal)
    full = await make_session(journal=journal)  # folded from the whole journal: the reference
    journal.loads.clear()
    restored = await make_session(journal=journal, restored=snap)
    assert journal.loads == [snap["state_version"]] and snap["state_version"] > 0
    assert restored.snapshot() == full.snapshot()
