"""Crash tests: the service process is killed with SIGKILL mid-turn and restarted (MQ-8, MQ-3)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.service_process import ServiceProcess

__all__ = ["ServiceProcess"]  # moved to tests/integration/service_process.py; old import path kept


@pytest.fixture
async def service_process(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    proc = ServiceProcess(settings, tmp_path / "service.log")
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.rule("MQ-8", "MQ-3")
@pytest.mark.timeout(120)
async def test_a_service_killed_mid_turn_finishes_the_turn_with_exactly_one_reply(
    service_process: ServiceProcess, nc: Client, subjects: Subjects
) -> None:
    sid = f"crash-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await service_process.start()
    await service_process.wait_ready(nc)
    body = inbound(sid, "/stall 4\nsurvive this")
    await publish_inbound(nc, subjects, body)
    # Killed while the model call stalls: the message is staged and acked, the turn is not done.
    await wait_for(lambda: "turn.started" in [e["type"] for e in events.json()], timeout_s=30, what="turn start")
    await wait_for(lambda: checkpoints.messages, what="the staged-message checkpoint")
    await service_process.kill()
    assert not replies.messages
    await service_process.start()
    await service_process.wait_ready(nc)
    await wait_for(lambda: replies.messages, timeout_s=60, what="the reply after restart")
    await wait_for(lambda: "turn.ended" in [e["type"] for e in events.json()], what="turn end")
    assert [r["text"] for r in replies.json()] == ["echo: survive this"]
    # Exactly one reply in the outbound stream, not just on the wire.
    js = nc.jetstream()
    info = await js.stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 1
    assert replies.json()[0]["reply_to"] == body["id"]


@pytest.mark.rule("MQ-2", "MQ-8")
@pytest.mark.timeout(120)
async def test_a_standby_takes_over_when_the_owner_is_killed_and_answers_exactly_once(
    settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects
) -> None:
    # MQ-2: one owner per session at a time, across processes — the second process stands by.
    owner = ServiceProcess(settings, tmp_path / "owner.log")
    standby = ServiceProcess(settings, tmp_path / "standby.log")
    sid = f"failover-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    try:
        await owner.start()
        await owner.wait_ready(nc)
        await standby.start()
        kv = await nc.jetstream().key_value(f"{subjects.stream_prefix}_LEASES")
        holder = (await kv.get("owner")).value
        assert holder and str(owner.proc.pid) in holder.decode()  # type: ignore[union-attr]
        body = inbound(sid, "/stall 3\nhand over")
        await publish_inbound(nc, subjects, body)
        await wait_for(lambda: "turn.started" in [e["type"] for e in events.json()], timeout_s=30, what="turn start")
        assert (await kv.get("owner")).value == holder  # the standby has not taken over
        await owner.kill()
        await wait_for(lambda: replies.messages, timeout_s=60, what="the standby's reply")
        new_holder = (await kv.get("owner")).value
        assert new_holder and str(standby.proc.pid) in new_holder.decode()  # type: ignore[union-attr]
        await wait_for(lambda: "turn.ended" in [e["type"] for e in events.json()], what="turn end")
        info = await nc.jetstream().stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
        assert info.state.messages == 1
        assert [r["text"] for r in replies.json()] == ["echo: hand over"]
    finally:
        await standby.stop()
        await owner.stop()


@pytest.mark.rule("SM-15", "MQ-8")
@pytest.mark.timeout(120)
async def test_tokens_of_rounds_run_before_a_crash_are_still_counted(
    service_process: ServiceProcess, nc: Client, subjects: Subjects
) -> None:
    # SM-15: the turn's usage is read from its journaled rounds, so a resumed turn counts them all.
    sid = f"usage-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    await service_process.start()
    await service_process.wait_ready(nc)
    body = inbound(sid, '/usage 10 3\n/tool knowledge_search {"query": "q"}\n/stall 3\n/say counted')
    await publish_inbound(nc, subjects, body)
    await wait_for(lambda: "tool_result" in [c["transition"] for c in checkpoints.json()], what="the first round")
    await service_process.kill()
    await service_process.start()
    await service_process.wait_ready(nc)
    await wait_for(lambda: replies.messages, timeout_s=60, what="the reply after restart")

    async def tokens() -> dict[str, int] | None:
        got = await api(nc, subjects, "session", "get", {"session_id": sid})
        value = got["result"]["tokens"] if got.get("ok") else None
        return value if value and value.get("input") == 20 else None

    assert await wait_for(tokens, what="both rounds' tokens") == {"input": 20, "output": 6}
