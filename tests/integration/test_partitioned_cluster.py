"""Partitioned ownership on a 3-node JetStream cluster (R3 streams and buckets), two workers, PostgreSQL.

(2) a worker SIGKILLed mid-stream and (4) a nats-server node SIGKILLed mid-stream: every message
answered exactly once, in order per session. Skipped only when PostgreSQL is unreachable.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import orjson
import pytest
from nats.aio.client import Client
from nats.js.errors import ServiceUnavailableError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from consumers.nats_cluster import NatsCluster
from consumers.partitions import partition_consumer
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import inbound, publish_inbound, wait_for
from tests.integration.partition_helpers import (
    PARTITIONS,
    outbound_count,
    partition_owners,
    pid,
    reply_collectors,
    sessions_in,
    worker,
)
from tests.integration.service_process import ServiceProcess
from tests.integration.stream_leaders import step_down


@pytest.fixture
def cluster_settings(nats_cluster: NatsCluster, postgres_url: str) -> Settings:
    return Settings(
        nats_url=nats_cluster.urls[0], database_url=postgres_url, prefix="t" + uuid.uuid4().hex[:8],
        fetch_timeout_s=0.2, ack_wait_s=5.0, stream_replicas=3,
    )


@pytest.fixture
async def cnc(nats_cluster: NatsCluster) -> AsyncIterator[Client]:
    client = await nats.connect(nats_cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def workers(
    cluster_settings: Settings, nats_cluster: NatsCluster, tmp_path: Path
) -> AsyncIterator[list[ServiceProcess]]:
    # Each worker on its own node (one URL is enough: the nodes announce each other to clients).
    procs = [
        worker(cluster_settings, tmp_path, name, TURNSTILE_STREAM_REPLICAS="3", TURNSTILE_NATS_URL=url)
        for name, url in (("a", nats_cluster.urls[0]), ("b", nats_cluster.urls[1]))
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.proc is not None and proc.proc.returncode is None:
                proc.proc.send_signal(signal.SIGCONT)
        await asyncio.gather(*(p.stop() for p in procs), return_exceptions=True)


async def shares_of(nc: Client, subjects: Subjects, a: ServiceProcess, b: ServiceProcess) -> dict[int, set[int]]:
    async def balanced() -> dict[int, set[int]] | None:
        owners = await partition_owners(nc, subjects)
        by_pid: dict[int, set[int]] = {pid(a): set(), pid(b): set()}
        for part, owner in owners.items():
            by_pid.setdefault(owner, set()).add(part)
        sizes = [len(v) for v in by_pid.values()]
        return by_pid if len(owners) == PARTITIONS and len(by_pid) == 2 and max(sizes) - min(sizes) <= 1 else None

    result = await wait_for(balanced, timeout_s=60, what="the partitions to be shared out")
    assert result is not None
    return result


async def serving(nc: Client, subjects: Subjects, workers: list[ServiceProcess], per_worker: int) -> list[str]:
    """Start both workers, wait until they share the partitions, and name ``per_worker`` sessions
    in each one's share."""
    a, b = workers
    for w in workers:
        await w.start()
        await w.wait_ready(nc, timeout_s=60)
    shares = await shares_of(nc, subjects, a, b)
    return sessions_in(shares[pid(a)], per_worker, "a") + sessions_in(shares[pid(b)], per_worker, "b")


async def publish_until_stored(nc: Client, subjects: Subjects, body: dict[str, object]) -> None:
    """Publish like an adapter does: retried until the stream acknowledges it (``Nats-Msg-Id`` makes a
    retry of a stored message a duplicate), e.g. while the stream elects a new leader."""

    async def stored() -> bool:
        try:
            await publish_inbound(nc, subjects, body)
        except Exception:
            return False
        return True

    await wait_for(stored, timeout_s=60, interval_s=0.2, what="the inbound stream to take a message")


async def stored_texts(nc: Client, subjects: Subjects, sid: str, with_ids: bool = False) -> list[str]:
    """The session's replies as the outbound stream holds them, in order (a core subscription may miss
    some while its node is down; the stream is what adapters deliver from)."""

    async def read() -> tuple[list[str]] | None:
        js = nc.jetstream()
        try:
            psub = await js.pull_subscribe(subjects.outbound("cli", sid), stream=subjects.outbound_stream)
        except (TimeoutError, nats.errors.TimeoutError, ServiceUnavailableError):
            return None  # the consumer create met a cluster still settling after a node kill: ask again
        out: list[str] = []
        try:
            while True:
                batch = await psub.fetch(100, timeout=1.0)
                out += [
                    str(orjson.loads(m.data)["text"])
                    + (f" ({(m.headers or {}).get('Nats-Msg-Id')})" if with_ids else "")
                    for m in batch
                ]
        except (TimeoutError, nats.errors.TimeoutError):
            return (out,)
        except ServiceUnavailableError:  # a new consumer on an R3 stream before its leader is elected
            return None
        finally:
            await psub.unsubscribe()

    found: tuple[list[str]] = await wait_for(read, timeout_s=30, interval_s=0.2, what=f"the stored replies of {sid}")
    return found[0]


async def diagnosis(nc: Client, subjects: Subjects, sid: str, settings: Settings) -> str:
    """What a failure needs to be read: the session's stored replies, its inbox rows and journal, its
    last drop's reason, the partition consumers' positions and owners."""
    lines = [f"stored replies of {sid}: {await stored_texts(nc, subjects, sid, with_ids=True)}"]
    engine = create_async_engine(settings.database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT id, status, payload FROM inbox WHERE session_id = :sid ORDER BY id"), {"sid": sid}
            )
            for row_id, status, payload in rows:
                body = orjson.loads(payload)
                lines.append(f"inbox {row_id} {status} {body.get('id')} {body.get('text')!r}")
            entries = await conn.execute(
                text("SELECT seq, kind, turn_id, external_event_id, substr(payload, 1, 160) FROM journal_entries "
                     "WHERE session_id = :sid ORDER BY generation, seq"), {"sid": sid}
            )
            lines += [f"journal {row}" for row in entries]
    finally:
        await engine.dispose()
    js = nc.jetstream()
    try:  # why a message was dropped (its last message.dropped event, with the reason)
        dropped = await js.get_last_msg(subjects.events_stream, subjects.event(sid, "message.dropped"))
        lines.append(f"last message.dropped: {dropped.data[:400]!r}")
    except Exception as exc:
        lines.append(f"last message.dropped: none ({exc!r})")
    for part in range(PARTITIONS):
        try:
            info = await js.consumer_info(subjects.inbound_stream, partition_consumer(settings.consumer_name, part))
            lines.append(
                f"p{part}: ack floor {info.ack_floor.stream_seq if info.ack_floor else None}, delivered "
                f"{info.delivered.stream_seq if info.delivered else None}, pending {info.num_pending}, "
                f"ack pending {info.num_ack_pending}, redelivered {info.num_redelivered}"
            )
        except Exception as exc:
            lines.append(f"p{part}: {exc!r}")
    lines.append(f"owners: {await partition_owners(nc, subjects)}")
    return "\n".join(lines)


async def stream_and_check(
    nc: Client, subjects: Subjects, sids: list[str], settings: Settings, fault: object, per_session: int = 6
) -> None:
    """Publish ``per_session`` messages to every session, run ``fault`` after the third round, and
    check every session got each answer exactly once, in order."""
    replies = await reply_collectors(nc, subjects, sids)  # live: only to see the first answers
    for i in range(per_session):
        for sid in sids:
            await publish_until_stored(nc, subjects, inbound(sid, f"/stall 0.2\nm{i}"))
        if i == 2:
            await wait_for(lambda: any(r.messages for r in replies.values()), timeout_s=30, what="first replies")
            await fault()  # type: ignore[operator]
    for sid in sids:

        async def all_stored(sid: str = sid) -> bool:
            try:
                return await outbound_count(nc, subjects, sid) >= per_session
            except Exception:  # the stream electing a leader
                return False

        try:
            await wait_for(all_stored, timeout_s=90, interval_s=0.2, what=f"the replies of {sid}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await diagnosis(nc, subjects, sid, settings)}") from None
    for sid in sids:
        assert await stored_texts(nc, subjects, sid) == [f"echo: m{i}" for i in range(per_session)], sid


@pytest.mark.rule("MQ-2", "MQ-8")
@pytest.mark.timeout(240)
async def test_on_a_cluster_a_killed_workers_sessions_move_with_nothing_lost_or_answered_twice(
    cnc: Client, cluster_settings: Settings, workers: list[ServiceProcess]
) -> None:
    subjects = Subjects(cluster_settings.prefix)
    a, b = workers
    sids = await serving(cnc, subjects, workers, per_worker=3)
    killed_at: list[float] = []

    async def kill_worker() -> None:
        await a.kill()
        killed_at.append(time.monotonic())

    await stream_and_check(cnc, subjects, sids, cluster_settings, kill_worker)
    owners = await partition_owners(cnc, subjects)
    assert set(owners.values()) == {pid(b)}


@pytest.mark.rule("MQ-8")
@pytest.mark.timeout(240)
async def test_on_a_cluster_killing_a_nats_node_mid_stream_loses_nothing(
    cnc: Client, nats_cluster: NatsCluster, cluster_settings: Settings, workers: list[ServiceProcess]
) -> None:
    subjects = Subjects(cluster_settings.prefix)
    sids = await serving(cnc, subjects, workers, per_worker=3)

    async def kill_inbound_leader() -> None:
        info = await cnc.jetstream().stream_info(subjects.inbound_stream)
        assert info.cluster is not None and info.cluster.leader
        await nats_cluster.kill(nats_cluster.index_of(info.cluster.leader))

    await stream_and_check(cnc, subjects, sids, cluster_settings, kill_inbound_leader)


@pytest.mark.timeout(240)
async def test_on_a_cluster_stream_leaders_stepping_down_mid_stream_rerun_no_turn(
    cnc: Client, cluster_settings: Settings, workers: list[ServiceProcess]
) -> None:
    # The streams the workers write (checkpoints, events, replies) change leader three times each
    # while sessions are served. A publish in a leaderless moment is answered "no responders" and
    # sent again (consumers/publisher.py), so no turn fails on its checkpoint and runs again.
    # Without the retry: 7 and 4 turns re-ran in two runs (CheckpointFailed); with it: 0 and 0.
    subjects = Subjects(cluster_settings.prefix)
    a, b = workers
    sids = await serving(cnc, subjects, workers, per_worker=4)

    async def step_down_the_written_streams() -> None:
        for _ in range(3):
            for stream in (subjects.checkpoint_stream, subjects.events_stream, subjects.outbound_stream):
                await step_down(cnc, stream)

    await stream_and_check(cnc, subjects, sids, cluster_settings, step_down_the_written_streams, per_session=8)
    logs = a.log_path.read_text() + b.log_path.read_text()
    reruns = [line for line in logs.splitlines() if "failed (attempt" in line]
    assert not reruns, f"{len(reruns)} turns ran again, e.g. {reruns[0]}"
