"""A session this process unloaded exactly as journaled and checkpointed reopens without reading its
journal; one whose journal may have been written elsewhere meanwhile reads it (consumers/known_tails.py).
A cold session's restore takes the checkpoint read started when its message was admitted
(consumers/checkpoint_prefetch.py).

Real nats-server, SQLite file. ``max_loaded_sessions=1``: a message to a second session unloads the
first, the way 10,000 sessions meet the cap of 256.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.session_opener import SessionOpener
from consumers.settings import Settings
from core.engine import JournalEntry
from core.engine.journal import EntryKind
from core.store.journal_repo import SqlHistoryJournal
from schemas.subjects import Subjects
from tests.integration.harness import Collector, answered_then_unloaded, inbound, publish_inbound, wait_for

pytestmark = [pytest.mark.timeout(90)]


class JournalSpy:
    """Counts the journal reads of each session and records every append that raised."""

    def __init__(self, opener: SessionOpener) -> None:
        self.reads: list[str] = []
        self.failed: list[tuple[str, str]] = []
        journal = opener.journal
        load, newest, append = journal.load, journal.newest, journal.append

        async def counting_load(session_id: str, **kw: Any) -> list[JournalEntry]:
            self.reads.append(session_id)
            return await load(session_id, **kw)

        async def counting_newest(session_id: str, **kw: Any) -> Any:
            self.reads.append(session_id)
            return await newest(session_id, **kw)

        async def watched_append(session_id: str, entries: list[JournalEntry], **kw: Any) -> None:
            try:
                await append(session_id, entries, **kw)
            except Exception as exc:
                self.failed.append((session_id, repr(exc)))
                raise

        journal.load = counting_load  # type: ignore[method-assign]
        journal.newest = counting_newest  # type: ignore[method-assign]
        journal.append = watched_append  # type: ignore[method-assign]


async def _last_snapshot(nc: Client, subjects: Subjects, sid: str) -> dict[str, Any]:
    last = await nc.jetstream().get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
    snapshot: dict[str, Any] = orjson.loads(last.data or b"{}")["snapshot"]
    return snapshot


def _opens(service: TurnstileService) -> dict[str, float]:
    """``turnstile_session_opens_total`` by its ``journal`` label, as ``/metrics`` reports it."""
    registry = service.metrics.registry
    return {
        journal: registry.get_sample_value("turnstile_session_opens_total", {"journal": journal}) or 0.0
        for journal in ("read", "skipped")
    }


def _texts(snapshot: dict[str, Any]) -> list[str]:
    return [i["payload"]["text"] for i in snapshot["transcript"] if i["kind"] == "user_message"]


async def _answered_then_unloaded(
    service: TurnstileService, nc: Client, subjects: Subjects, sid: str, replies: Collector
) -> None:
    """``sid`` answers one message, then a message to another session unloads it with its tail kept."""
    await answered_then_unloaded(service, nc, subjects, sid, replies)
    engines = service.engines
    assert engines is not None
    await wait_for(lambda: len(engines.tails) >= 1, what="its tail to be kept")


@pytest.mark.rule("MQ-2")
async def test_a_session_unloaded_here_reopens_from_its_checkpoint_without_reading_the_journal(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    service = TurnstileService(settings.model_copy(update={"max_loaded_sessions": 1, "actor_idle_s": 3600.0}))
    await service.start()
    try:
        assert service.engines is not None
        engines = service.engines
        spy = JournalSpy(engines)
        sid = f"known-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        await _answered_then_unloaded(service, nc, subjects, sid, replies)
        spy.reads.clear()
        before = _opens(service)

        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await wait_for(lambda: len(replies.messages) == 2, what="the reply after the reopen")
        assert sid not in spy.reads  # restored from its checkpoint alone
        assert _opens(service) == {"read": before["read"], "skipped": before["skipped"] + 1}  # and counted so
        assert [r["text"] for r in replies.json()] == ["echo: first", "echo: second"]
        assert _texts(await _last_snapshot(nc, subjects, sid)) == ["first", "second"]
        assert spy.failed == []
    finally:
        await service.stop()


@pytest.mark.rule("MQ-2")
async def test_a_cold_session_is_restored_from_the_checkpoint_read_while_its_message_was_staged(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # consumers/checkpoint_prefetch.py: the read starts when the message is admitted; the restore takes it.
    service = TurnstileService(settings.model_copy(update={"max_loaded_sessions": 1, "actor_idle_s": 3600.0}))
    await service.start()
    try:
        publisher = service.publisher
        assert publisher is not None
        sid = f"prefetch-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        await answered_then_unloaded(service, nc, subjects, sid, replies)
        own_reads: list[str] = []  # reads the restore makes itself (the prefetch holds its own reference)
        read = publisher.last_checkpoint

        async def counted(session_id: str) -> Any:
            own_reads.append(session_id)
            return await read(session_id)

        publisher.last_checkpoint = counted  # type: ignore[method-assign]
        before = _restore_reads(service)

        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await wait_for(lambda: len(replies.messages) == 2, what="the reply after the restore")
        assert sid not in own_reads  # restored from the prefetched read, and counted so on /metrics
        assert _restore_reads(service) == {"yes": before["yes"] + 1, "no": before["no"]}
        # MQ-2: restored from its last checkpoint, the turn goes on from the whole transcript.
        assert [r["text"] for r in replies.json()] == ["echo: first", "echo: second"]
        assert _texts(await _last_snapshot(nc, subjects, sid)) == ["first", "second"]
    finally:
        await service.stop()


def _restore_reads(service: TurnstileService) -> dict[str, float]:
    """``turnstile_restore_checkpoint_reads_total`` by its ``prefetched`` label, as ``/metrics`` reports it."""
    registry = service.metrics.registry
    return {
        label: registry.get_sample_value("turnstile_restore_checkpoint_reads_total", {"prefetched": label}) or 0.0
        for label in ("yes", "no")
    }


@pytest.fixture
def partitioned(settings: Settings) -> Settings:
    # SQLite: one process owns every partition; a partition handed over is taken again at once.
    return settings.model_copy(
        update={"partitions": 4, "lease_ttl_s": 3.0, "max_loaded_sessions": 1, "actor_idle_s": 3600.0}
    )


@pytest.mark.rule("MQ-2")
async def test_a_session_whose_partition_changed_hands_reads_what_the_other_owner_journaled(
    partitioned: Settings, nc: Client
) -> None:
    # While the session is unloaded here its partition is handed over (the real hand-over path, as when
    # a joining worker takes its share) and the other owner journals a user message past our last
    # checkpoint, then dies before its own checkpoint. The partition comes back at a new epoch: the
    # reopen must read the journal, fold that row, and journal the next message after it. Trusting
    # the tail kept before the hand-over would skip the read; the next append would then take a seq
    # the journal holds (Conflict) and the turn would fail before a retry reloaded it.
    subjects = Subjects(partitioned.prefix)
    service = TurnstileService(partitioned)
    await service.start()
    try:
        runtime, engines = service.runtime, service.engines
        assert runtime is not None and runtime.partitioned is not None and engines is not None
        parts = runtime.partitioned
        spy = JournalSpy(engines)
        sid = f"moved-{uuid.uuid4().hex[:6]}"
        partition = parts.partition_of(sid)
        await wait_for(lambda: partition in parts.loops, timeout_s=30, what="the partition to be taken")
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        await _answered_then_unloaded(service, nc, subjects, sid, replies)
        epoch = parts.ownership.epoch(partition)

        await parts.ownership._release([partition])  # handed over: its sessions' work stops here
        # The other owner: the user message journaled at the seq our checkpoint ends at, no checkpoint.
        next_seq = (await _last_snapshot(nc, subjects, sid))["next_seq"]
        other_owner = SqlHistoryJournal(runtime.connections.db)
        try:
            await other_owner.append(sid, [JournalEntry(
                seq=next_seq, kind=EntryKind.USER_MESSAGE, at="2026-12-02T13:00:00+00:00",
                payload={"text": "journaled elsewhere", "attachments": [], "agent_owned": False},
            )])
        finally:
            await other_owner.aclose()
        await wait_for(lambda: partition in parts.loops and parts.ownership.owns(partition), timeout_s=30,
                       what="the partition to be ours again")
        assert parts.ownership.epoch(partition) != epoch
        spy.reads.clear()
        before = _opens(service)

        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await wait_for(lambda: len(replies.messages) == 2, timeout_s=30, what="the reply after the hand-back")
        assert spy.reads[:1] == [sid]  # the reopen read the journal past the checkpoint
        assert _opens(service)["read"] == before["read"] + 1  # and counted so
        assert spy.failed == []  # and journaled the next message after the other owner's row
        assert _texts(await _last_snapshot(nc, subjects, sid)) == ["first", "journaled elsewhere", "second"]
    finally:
        await service.stop()
