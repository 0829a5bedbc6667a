"""Known journal tails (consumers/known_tails.py): when a reopen may skip the journal read, and when not."""

from __future__ import annotations

import asyncio

import pytest

from consumers.checkpoints import CheckpointChain
from consumers.known_tails import KnownTail, KnownTails
from core.engine import JournalEntry, JournalOfGeneration
from core.engine.journal import EntryKind
from core.errors import CheckpointFailed, Unavailable
from tests.unit.test_checkpoint_chain import FakeBroker


class Epochs:
    """The partition epochs this process holds, by session id (None: not held)."""

    def __init__(self) -> None:
        self.held: dict[str, int | None] = {}

    def __call__(self, session_id: str) -> int | None:
        return self.held.get(session_id, 7)


def _kept(tails: KnownTails, session_id: str = "s", exact: tuple[int, int, int] = (0, 3, 41)) -> None:
    ticket = tails.opened(session_id)
    tails.unloaded(session_id, ticket, exact)


def test_a_tail_kept_at_unload_is_taken_once_by_the_next_reopen_of_its_generation() -> None:
    tails = KnownTails(Epochs())
    _kept(tails)
    assert len(tails) == 1
    assert tails.take("s", 0) == KnownTail(generation=0, next_seq=3, checkpoint_seq=41, epoch=7)
    assert tails.take("s", 0) is None  # consumed: a later reopen reads unless a new tail was kept
    _kept(tails)
    assert tails.take("s", 1) is None  # deleted meanwhile: another generation's journal is not known


def test_an_unload_that_is_not_exact_drops_the_tail_and_keeps_none() -> None:
    tails = KnownTails(Epochs())
    _kept(tails)
    ticket = tails.opened("s")  # reopened (by a path that did not take it): the tail goes
    assert len(tails) == 0
    tails.unloaded("s", ticket, None)  # e.g. a checkpoint failed, an append was uncertain
    assert tails.take("s", 0) is None
    _kept(tails)
    tails.drop("s")  # its history cleared (memory.clear, deletion)
    assert tails.take("s", 0) is None


def test_only_the_runner_that_opened_the_session_last_keeps_a_tail() -> None:
    # An evicted actor ending while a new actor of the same session has opened it already: the old
    # runner's facts are stale (the new one may have journaled since), so it keeps nothing.
    tails = KnownTails(Epochs())
    old = tails.opened("s")
    new = tails.opened("s")
    tails.unloaded("s", old, (0, 3, 41))
    assert len(tails) == 0
    tails.unloaded("s", new, (0, 5, 44))
    assert tails.take("s", 0) == KnownTail(0, 5, 44, 7)


def test_a_tail_holds_only_at_the_partition_epoch_it_was_kept_at() -> None:
    epochs = Epochs()
    tails = KnownTails(epochs)
    _kept(tails)
    epochs.held["s"] = 9  # the partition changed hands and came back: another owner may have written
    assert tails.take("s", 0) is None
    epochs.held["s"] = None  # being handed over: nothing is kept
    _kept(tails)
    assert len(tails) == 0


def test_a_lost_partition_or_lease_forgets_its_tails() -> None:
    tails = KnownTails(Epochs())
    for sid in ("a", "b", "c"):
        _kept(tails, sid)
    tails.forget(lambda sid: sid == "b")
    assert tails.take("b", 0) is None and len(tails) == 2
    tails.forget_all()
    assert tails.take("a", 0) is None and tails.take("c", 0) is None


def test_a_session_with_an_uncertain_append_is_never_trusted_again() -> None:
    # The append may still commit after its caller gave up (a cancelled caller's write runs in the group
    # commit), even after a later engine of the session read the journal: no tail of it is ever trusted.
    tails = KnownTails(Epochs(), max_unsure=2)
    _kept(tails)
    tails.unsure("s")
    assert tails.take("s", 0) is None
    _kept(tails)
    assert tails.take("s", 0) is None
    _kept(tails, "t")
    tails.unsure("u")
    tails.unsure("v")  # past the bound: no tail is kept or trusted any more in this process
    assert not tails.keeping and tails.take("t", 0) is None
    _kept(tails, "w")
    assert len(tails) == 0


def test_the_tails_are_bounded_and_the_oldest_go_first() -> None:
    tails = KnownTails(Epochs(), cap=2)
    for sid in ("a", "b", "c"):
        _kept(tails, sid)
    assert len(tails) == 2 and tails.take("a", 0) is None and tails.take("c", 0) is not None


class Journal:
    """A generational journal whose appends succeed, fail, or wait, as told."""

    def __init__(self) -> None:
        self.fail: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def append(self, session_id: str, entries: list[JournalEntry], *, generation: int = 0) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail


def _entry(seq: int) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.NOTICE, at="2026-12-02T00:00:00Z", payload={"text": "n"})


async def test_an_engines_journal_is_exact_only_while_every_append_returned() -> None:
    unsure: list[str] = []
    inner = Journal()
    journal = JournalOfGeneration(inner, lambda _sid: 0, on_unsure=unsure.append)  # type: ignore[arg-type]
    await journal.append("s", [_entry(0)])
    assert journal.exact
    inner.gate = asyncio.Event()
    pending = asyncio.ensure_future(journal.append("s", [_entry(1)]))
    await asyncio.sleep(0)
    assert not journal.exact  # under way: it may land after the unload
    inner.gate.set()
    await pending
    assert journal.exact and unsure == []
    inner.fail = Unavailable("the database is away")
    with pytest.raises(Unavailable):
        await journal.append("s", [_entry(2)])
    assert not journal.exact and unsure == ["s"]


async def test_a_cancelled_append_makes_the_journal_unsure() -> None:
    unsure: list[str] = []
    inner = Journal()
    inner.gate = asyncio.Event()
    journal = JournalOfGeneration(inner, lambda _sid: 0, on_unsure=unsure.append)  # type: ignore[arg-type]
    pending = asyncio.ensure_future(journal.append("s", [_entry(0)]))
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert not journal.exact and unsure == ["s"]


async def test_the_checkpoint_chain_knows_the_state_version_of_its_last_acknowledged_checkpoint() -> None:
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    assert chain.version is None and chain.settled
    await chain.publish(b"one", version=2)
    assert not chain.settled and chain.version is None  # sent, not acknowledged
    broker.ack_all()
    await chain.settle()
    assert (chain.seq, chain.version, chain.settled) == (10, 2, True)
    broker.last = 99  # the next one is refused: the last stored stays the one before
    await chain.publish(b"two", version=3)
    broker.ack_all()
    with pytest.raises(CheckpointFailed):
        await chain.settle()
    assert (chain.seq, chain.version) == (10, 2)
    chain.reset(50, 4)
    assert (chain.seq, chain.version) == (50, 4)
