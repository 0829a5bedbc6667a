"""Partitioned ownership: several `turnstile run` workers on one NATS and one PostgreSQL share the sessions.

Real processes (SIGSTOP, SIGKILL), a real nats-server, PostgreSQL on 127.0.0.1:5432 (skipped
when unreachable). Ownership is read from the partition leases (``<PREFIX>_PARTITIONS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.nats_flush import flush
from consumers.partitions import partition_of
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import api, inbound, publish_inbound, wait_for
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


@pytest.fixture
def pg_settings(settings: Settings, postgres_url: str) -> Settings:
    return settings.model_copy(update={"database_url": postgres_url})


@pytest.fixture
async def stop_all() -> AsyncIterator[list[ServiceProcess]]:
    procs: list[ServiceProcess] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.proc is not None and proc.proc.returncode is None:
                proc.proc.send_signal(signal.SIGCONT)
        await asyncio.gather(*(p.stop() for p in procs), return_exceptions=True)


async def start_workers(nc: Client, procs: list[ServiceProcess], *workers: ServiceProcess) -> None:
    for w in workers:
        procs.append(w)
        await w.start()
        await w.wait_ready(nc)


async def shared_by(nc: Client, subjects: Subjects, *workers: ServiceProcess) -> dict[int, set[int]]:
    """Wait until every partition is held and shared out evenly; pid → its partitions."""
    pids = {pid(w) for w in workers}

    async def balanced() -> dict[int, set[int]] | None:
        owners = await partition_owners(nc, subjects)
        by_pid: dict[int, set[int]] = {p: set() for p in pids}
        for part, owner in owners.items():
            by_pid.setdefault(owner, set()).add(part)
        sizes = [len(v) for v in by_pid.values()]
        if len(owners) == PARTITIONS and set(by_pid) == pids and max(sizes) - min(sizes) <= 1:
            return by_pid
        return None

    result = await wait_for(balanced, timeout_s=30, what="the partitions to be shared out")
    assert result is not None
    return result


@pytest.mark.rule("MQ-2")
@pytest.mark.timeout(120)
async def test_two_workers_serve_at_once_and_a_paused_one_does_not_hold_up_the_other(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    # A long TTL: the paused worker keeps its leases while the other answers (no takeover involved).
    a, b = worker(pg_settings, tmp_path, "a", ttl_s=20), worker(pg_settings, tmp_path, "b", ttl_s=20)
    await start_workers(nc, stop_all, a, b)
    shares = await shared_by(nc, subjects, a, b)
    a_sids, b_sids = sessions_in(shares[pid(a)], 3, "a"), sessions_in(shares[pid(b)], 3, "b")
    replies = await reply_collectors(nc, subjects, a_sids + b_sids)
    for sid in a_sids + b_sids:
        await publish_inbound(nc, subjects, inbound(sid, f"hello {sid}"))
    for sid in a_sids + b_sids:
        await wait_for(lambda sid=sid: replies[sid].messages, timeout_s=30, what=f"the reply of {sid}")

    for paused, other_sids in ((a, b_sids), (b, a_sids)):
        before = await partition_owners(nc, subjects)
        os.kill(pid(paused), signal.SIGSTOP)
        try:
            for sid in other_sids:
                await publish_inbound(nc, subjects, inbound(sid, f"while paused {pid(paused)}"))
            for sid in other_sids:
                await wait_for(
                    lambda sid=sid, paused=paused: any(
                        f"while paused {pid(paused)}" in m.data.decode() for m in replies[sid].messages
                    ),
                    timeout_s=30, what=f"{sid} answered while the other worker is paused",
                )
            # Answered while the paused worker still held its leases: nothing waited for a TTL.
            assert await partition_owners(nc, subjects) == before
        finally:
            os.kill(pid(paused), signal.SIGCONT)
    for sid in a_sids + b_sids:
        assert await outbound_count(nc, subjects, sid) == 2


@pytest.mark.rule("MQ-2", "MQ-8")
@pytest.mark.timeout(180)
async def test_a_killed_workers_sessions_move_with_nothing_lost_or_answered_twice_and_order_kept(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    a, b = worker(pg_settings, tmp_path, "a"), worker(pg_settings, tmp_path, "b")
    await start_workers(nc, stop_all, a, b)
    shares = await shared_by(nc, subjects, a, b)
    sids = sessions_in(shares[pid(a)], 4, "a") + sessions_in(shares[pid(b)], 4, "b")
    replies = await reply_collectors(nc, subjects, sids)
    per_session = 6
    killed_at = 0.0
    for i in range(per_session):
        for sid in sids:
            await publish_inbound(nc, subjects, inbound(sid, f"/stall 0.2\nm{i}"))
        if i == 2:
            await wait_for(lambda: any(r.messages for r in replies.values()), timeout_s=30, what="first replies")
            await a.kill()  # mid-stream: some of its sessions mid-turn, some messages fetched, some not
            killed_at = time.monotonic()

    async def taken_over() -> bool:
        owners = await partition_owners(nc, subjects)
        return len(owners) == PARTITIONS and set(owners.values()) == {pid(b)}

    a_sids = sids[:4]
    at_kill = {sid: len(replies[sid].messages) for sid in a_sids}

    async def timed(condition: object, what: str) -> float:
        await wait_for(condition, timeout_s=60, what=what)  # type: ignore[arg-type]
        return time.monotonic() - killed_at

    taken_s, replied_s = await asyncio.gather(
        timed(taken_over, "the survivor to take every partition"),
        timed(lambda: any(len(replies[s].messages) > at_kill[s] for s in a_sids), "a moved session's reply"),
    )
    print(f"\nfailover (lease TTL 1.5 s): partitions taken {taken_s:.2f} s after SIGKILL; "
          f"first reply of a moved session {replied_s:.2f} s after it")
    for sid in sids:
        await wait_for(lambda sid=sid: len(replies[sid].messages) >= per_session, timeout_s=60, what=f"all replies of {sid}")
    for sid in sids:
        texts = [m.data for m in replies[sid].messages]
        assert [orjson_text(t) for t in texts] == [f"echo: m{i}" for i in range(per_session)], sid
        assert await outbound_count(nc, subjects, sid) == per_session


@pytest.mark.timeout(120)
async def test_a_joining_worker_takes_a_share_and_serves_it(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    a = worker(pg_settings, tmp_path, "a")
    await start_workers(nc, stop_all, a)
    await wait_for(
        lambda: _all_held_by(nc, subjects, pid(a)), timeout_s=30, what="the first worker to hold every partition"
    )
    early = sessions_in(set(range(PARTITIONS)), 6, "early")
    replies = await reply_collectors(nc, subjects, early)
    for sid in early:
        await publish_inbound(nc, subjects, inbound(sid, "before the join"))
    for sid in early:
        await wait_for(lambda sid=sid: replies[sid].messages, timeout_s=30, what=f"the reply of {sid}")

    b = worker(pg_settings, tmp_path, "b")
    await start_workers(nc, stop_all, b)
    await shared_by(nc, subjects, a, b)  # an even share each
    for sid in early:  # sessions that moved are served by the joiner from their stored state
        await publish_inbound(nc, subjects, inbound(sid, "after the join"))
    for sid in early:
        await wait_for(lambda sid=sid: len(replies[sid].messages) >= 2, timeout_s=30, what=f"the second reply of {sid}")
        assert [orjson_text(m.data) for m in replies[sid].messages] == ["echo: before the join", "echo: after the join"]
        assert await outbound_count(nc, subjects, sid) == 2


async def _all_held_by(nc: Client, subjects: Subjects, owner: int) -> bool:
    owners = await partition_owners(nc, subjects)
    return len(owners) == PARTITIONS and set(owners.values()) == {owner}


def orjson_text(raw: bytes) -> str:
    return str(orjson.loads(raw)["text"])


async def _answers(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, object], times: int) -> list[bytes]:
    # The API's queue group hands each request to one worker at random: 16 requests reach both
    # workers (all to one has probability 2^-15).
    return [
        (await nc.request(subjects.api(resource, verb), orjson.dumps(body), timeout=10)).data for _ in range(times)
    ]


@pytest.mark.timeout(120)
async def test_the_control_api_answers_the_same_from_every_worker(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    a, b = worker(pg_settings, tmp_path, "a"), worker(pg_settings, tmp_path, "b")
    await start_workers(nc, stop_all, a, b)
    shares = await shared_by(nc, subjects, a, b)
    sids = sessions_in(shares[pid(a)], 2, "a") + sessions_in(shares[pid(b)], 2, "b")
    replies = await reply_collectors(nc, subjects, sids)
    for sid in sids:
        await publish_inbound(nc, subjects, inbound(sid, "file me"))
    for sid in sids:
        await wait_for(lambda sid=sid: replies[sid].messages, timeout_s=30, what=f"the reply of {sid}")
    for sid in sids:
        for resource, verb in (("session", "get"), ("session", "generation"), ("place", "of")):
            answers = await _answers(nc, subjects, resource, verb, {"session_id": sid}, 16)
            assert orjson.loads(answers[0])["ok"], answers[0]
            assert len(set(answers)) == 1, (resource, verb, sid, set(answers))
    listed = await _answers(nc, subjects, "session", "list", {}, 16)
    assert len(set(listed)) == 1
    assert {s["id"] for s in orjson.loads(listed[0])["result"]} >= set(sids)
    # A write acting on a session's running state, from either worker, reaches its owner.
    for sid in sids:
        for _ in range(4):
            interrupted = await api(nc, subjects, "session", "interrupt", {"session_id": sid})
            assert interrupted["ok"] and interrupted["result"]["session_id"] == sid, interrupted
    missing = await _answers(nc, subjects, "session", "get", {"session_id": "no-such-session"}, 8)
    assert {orjson.loads(m)["error"]["code"] for m in missing} == {"not_found"}


@pytest.mark.rule("SM-21")
@pytest.mark.timeout(180)
async def test_deleting_a_subtree_spread_over_two_workers_answers_nothing_of_it_afterwards(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    a, b = worker(pg_settings, tmp_path, "a"), worker(pg_settings, tmp_path, "b")
    await start_workers(nc, stop_all, a, b)
    shares = await shared_by(nc, subjects, a, b)
    parent, child = sessions_in(shares[pid(a)], 1, "parent")[0], sessions_in(shares[pid(b)], 1, "child")[0]
    seen: list[tuple[str, str, dict[str, object]]] = []  # (kind, session, body) in arrival order

    async def record(msg: Msg) -> None:
        body = orjson.loads(msg.data)
        kind = "reply" if ".outbound." in msg.subject else str(body.get("type"))
        seen.append((kind, str(body.get("session_id") or body.get("data", {}).get("id")), body))

    for sid in (parent, child):
        await nc.subscribe(subjects.outbound("cli", sid), cb=record)
        await nc.subscribe(subjects.event(sid, "session.deleted"), cb=record)
    await flush(nc)
    await publish_inbound(nc, subjects, inbound(parent, "root"))
    await wait_for(lambda: any(k == "reply" for k, _, _ in seen), timeout_s=30, what="the parent's first reply")
    created = await api(nc, subjects, "session", "create_child", {"parent_id": parent, "fields": {"id": child}})
    assert created["ok"], created

    streaming = True

    async def stream() -> None:
        i = 0
        while streaming:
            for sid in (parent, child):
                await publish_inbound(nc, subjects, inbound(sid, f"/stall 0.3\nm{i}"))
            i += 1
            await asyncio.sleep(0.05)  # pacing the publisher, not waiting for an outcome

    streamer = asyncio.create_task(stream())
    try:
        await wait_for(
            lambda: {s for k, s, _ in seen if k == "reply"} == {parent, child}, timeout_s=30,
            what="both sessions answering",
        )
        deleted = await api(nc, subjects, "session", "delete", {"session_id": parent})
        assert deleted["ok"], deleted
        await wait_for(
            lambda: {s for k, s, _ in seen if k == "session.deleted"} == {parent, child}, timeout_s=30,
            what="both deletions",
        )
    finally:
        streaming = False
        await streamer
    old = {sid: next(int(b["generation"]) for k, s, b in seen if k == "reply" and s == sid)  # type: ignore[arg-type]
           for sid in (parent, child) if any(k == "reply" and s == sid for k, s, _ in seen)}
    quiet_state: dict[str, object] = {}
    await wait_for(lambda: _quiet(seen, quiet_state), timeout_s=60, what="the last replies")
    for sid in (parent, child):
        deleted_at = next(i for i, (k, s, _) in enumerate(seen) if k == "session.deleted" and s == sid)
        late = [b for k, s, b in seen[deleted_at:] if k == "reply" and s == sid and b["generation"] == old.get(sid)]
        assert late == [], f"{sid} answered in its deleted generation after session.deleted: {late}"


def _quiet(seen: list[tuple[str, str, dict[str, object]]], state: dict[str, object]) -> bool:
    """True once no message arrived for a second (polled by wait_for; ``state`` is kept between the polls)."""
    now = time.monotonic()
    if state.get("count") != len(seen):
        state["count"], state["since"] = len(seen), now
        return False
    return now - float(state["since"]) >= 1.0  # type: ignore[arg-type]


@pytest.mark.rule("MQ-2")
@pytest.mark.timeout(120)
async def test_a_draining_worker_keeps_its_partitions_until_its_turns_finish_then_hands_them_over(
    pg_settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects, stop_all: list[ServiceProcess]
) -> None:
    a, b = worker(pg_settings, tmp_path, "a"), worker(pg_settings, tmp_path, "b")
    await start_workers(nc, stop_all, a, b)
    shares = await shared_by(nc, subjects, a, b)
    sid = sessions_in(shares[pid(a)], 1, "drain")[0]
    part = partition_of(sid, PARTITIONS)
    replies = await reply_collectors(nc, subjects, [sid])
    events: list[str] = []

    async def on_event(msg: Msg) -> None:
        events.append(str(orjson.loads(msg.data).get("type")))

    await nc.subscribe(subjects.events_of(sid), cb=on_event)
    await publish_inbound(nc, subjects, inbound(sid, "/stall 4\nslow one"))
    await wait_for(lambda: "turn.started" in events, timeout_s=30, what="the turn to start")
    assert a.proc is not None
    a.proc.send_signal(signal.SIGTERM)  # drains: the running turn may finish (TURNSTILE_DRAIN_TIMEOUT_S 10)
    looks = 0
    while a.proc.returncode is None:
        # Longer than the lease TTL (1.5 s), and still nobody else takes the partition while A drains:
        # A releases it once the drained turn has replied, then exits (B may take it in between).
        if (await partition_owners(nc, subjects)).get(part) == pid(b):
            assert replies[sid].messages, "B took the partition while A was still draining"
        looks += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(a.proc.wait()), 0.1)
    assert looks > 10  # the drain was watched (the stalled turn keeps A draining ~4 s)
    await wait_for(lambda: replies[sid].messages, timeout_s=30, what="the drained turn's reply")
    await wait_for(lambda: _owner_is(nc, subjects, part, pid(b)), timeout_s=30, what="the hand-over")
    assert [orjson_text(m.data) for m in replies[sid].messages] == ["echo: slow one"]
    assert await outbound_count(nc, subjects, sid) == 1


async def _owner_is(nc: Client, subjects: Subjects, part: int, owner: int) -> bool:
    return (await partition_owners(nc, subjects)).get(part) == owner
