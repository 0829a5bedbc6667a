"""SIGKILL between two tool calls: the restarted service resumes from the last checkpoint and
runs no tool again whose result was already journaled (KS-10, KS-20, MQ-3, MQ-8)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import event_types, last_snapshot, results_by_call, transitions
from tests.integration.service_process import ServiceProcess


@pytest.fixture
async def worker(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    proc = ServiceProcess(settings, tmp_path / "service.log")
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.rule("KS-10", "KS-20", "MQ-3", "MQ-8")
@pytest.mark.timeout(120)
async def test_a_worker_killed_between_two_tool_calls_resumes_without_rerunning_the_first(
    worker: ServiceProcess, nc: Client, subjects: Subjects
) -> None:
    sid = f"crash-tools-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await worker.start()
    await worker.wait_ready(nc)
    # Round 0 calls reply("one"); the model call of round 1 stalls 4 s (the kill lands there),
    # then calls reply("two").
    script = '/tool reply {"text": "one"}\n/stall 4\n/tool reply {"text": "two"}\n/say done'
    await publish_inbound(nc, subjects, inbound(sid, script))
    await wait_for(lambda: "tool_result" in transitions(checkpoints), timeout_s=30, what="the first tool result")
    await worker.kill()
    before = last_snapshot(checkpoints)
    assert transitions(checkpoints)[-1] == "tool_result"
    assert len(results_by_call(before["transcript"])) == 1
    assert not replies.messages

    # The restarted worker finds the message staged, restores the last checkpoint and goes on
    # with round 1 (whose model call stalls again, briefly).
    await worker.start()
    await worker.wait_ready(nc)
    await wait_for(lambda: len(replies.messages) >= 3, timeout_s=60, what="three replies after restart")
    await wait_for(lambda: "turn.ended" in event_types(events), what="turn end")
    assert [r["text"] for r in replies.json()] == ["one", "two", "done"]
    final = last_snapshot(checkpoints)
    by_call = results_by_call(final["transcript"])
    # Exactly one result per tool call id: the first call was not dispatched again.
    assert len(by_call) == 2 and all(len(results) == 1 for results in by_call.values())
    dispatches = [i["payload"]["id"] for i in final["transcript"] if i["kind"] == "tool_call"]
    assert sorted(dispatches) == sorted(by_call) and len(dispatches) == 2
    # The resumed run continued the same turn from the checkpoint that was last published.
    assert final["turn"]["turn_id"] == before["turn"]["turn_id"]
    assert final["transcript"][: len(before["transcript"])] == before["transcript"]
    js = nc.jetstream()
    info = await js.stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 3
