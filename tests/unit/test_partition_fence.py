"""The partitioned actors' fence: a session in doubt is handed its staged messages only once its
partition is ours again, by the local lease and by the bucket."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from consumers.partitioned import PartitionedInbound
from consumers.settings import Settings
from core.inbox import StagedMessage
from schemas.subjects import Subjects
from tests.waiting import wait_for


class Lease:
    """Stands in for PartitionOwnership: the local verdict, the bucket's, and renewals."""

    def __init__(self) -> None:
        self.local = False
        self.bucket = False
        self.renewal = asyncio.Event()
        self.looked = 0

    def owns(self, partition: int) -> bool:
        return self.local

    async def still_ours(self, partition: int) -> bool:
        self.looked += 1
        return self.local and self.bucket

    async def renewed(self) -> None:
        await self.renewal.wait()
        self.renewal = asyncio.Event()

    def renew(self) -> None:
        self.renewal.set()


class Inbox:
    def __init__(self, staged: list[StagedMessage]) -> None:
        self.staged = staged
        self.flushed = 0

    async def flush(self) -> None:
        self.flushed += 1

    async def pending(self) -> list[StagedMessage]:
        return list(self.staged)


def _staged(session_id: str | None, message_id: str) -> StagedMessage:
    payload = {"id": message_id, "platform": "cli", "session_id": session_id, "text": message_id}
    return StagedMessage("cli", message_id, session_id, 1, orjson.dumps(payload))


async def test_a_session_in_doubt_gets_its_staged_messages_in_order_only_once_its_partition_is_ours_again() -> None:
    inbox = Inbox([_staged("s", "m1"), _staged("other", "x1"), _staged("s", "m2"), _staged(None, "n1")])
    parts = PartitionedInbound(
        Settings(partitions=4), Subjects("t"), connection=None, js=None, inbox=inbox, actors=None, db=None,  # type: ignore[arg-type]
        manager=None, metrics=None, make_loop=None,  # type: ignore[arg-type]
    )
    lease = Lease()
    parts.ownership = lease  # type: ignore[assignment]
    assert not parts.owns("s") and not parts.owns("")
    back = asyncio.ensure_future(parts.reestablished("s"))
    lease.local = True  # the local lease renewed, the bucket names someone else
    lease.renew()
    await wait_for(lambda: lease.looked >= 1, timeout_s=5, interval_s=0, what="the bucket to be read")
    assert not back.done() and inbox.flushed == 0
    lease.bucket = True
    lease.renew()
    staged = await asyncio.wait_for(back, 5)
    assert [m.message_id for m, _ in staged] == ["m1", "m2"]
    assert [i.id for _, i in staged] == ["m1", "m2"]
    assert inbox.flushed == 1  # finished messages' marks written first: they are not replayed
    assert [m.message_id for m, _ in await parts.reestablished("")] == ["n1"]  # the session-less actor


class Actors:
    def __init__(self) -> None:
        self.released: list[str] = []

    async def release_sessions(self, owned_elsewhere: Callable[[str], bool]) -> int:
        self.released = [sid for sid in ("s", "other") if owned_elsewhere(sid)]
        return len(self.released)


async def test_a_lost_partitions_sessions_created_here_are_no_longer_taken_as_empty() -> None:
    """A session this process created and never opened, or unloaded with its journal tail known,
    whose partition moves away, may be written by the new owner: if the partition comes back, its
    next open here must read its journal. Forgotten before its actors stop and again after (an
    actor stopped by the hand-over unloads as it ends)."""
    calls: list[tuple[list[str], bool]] = []
    created = {"s", "other"}
    settings = Settings(partitions=4)
    actors = Actors()

    def forget_moved(moved: Callable[[str], bool]) -> None:
        calls.append((sorted(sid for sid in created if moved(sid)), bool(actors.released)))

    parts = PartitionedInbound(
        settings, Subjects("t"), connection=None, js=None, inbox=None, actors=actors, db=None,  # type: ignore[arg-type]
        manager=None, metrics=None, make_loop=None, forget_moved=forget_moved,  # type: ignore[arg-type]
    )
    lost = parts.partition_of("s")
    await parts._lost([lost])
    expected = sorted(sid for sid in created if parts.partition_of(sid) == lost)
    assert calls == [(expected, False), (expected, True)] and "s" in expected
    assert actors.released == [sid for sid in ("s", "other") if parts.partition_of(sid) == lost]
