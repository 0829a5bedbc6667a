"""Streamed replies end to end: ``turnstile run`` with TURNSTILE_PROVIDER=openai against a local
OpenAI-compatible server that streams (tests/unit/engine/fake_openai.py), a real nats-server.

The typing signal and the partial text go out on core NATS (``<prefix>.stream.<platform>.<sid>``,
stored by no stream); the reply on the outbound stream stays the one durable answer, and a
process killed while the model streams resumes without re-running a journaled tool."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import events_of, last_snapshot, results_by_call, transitions
from tests.integration.service_process import ServiceProcess
from tests.integration.stream_helpers import PRIVATE, chunks, round_text
from tests.unit.engine.fake_openai import FakeOpenAI, Streamed, chunks_of, completion

FINAL = "It is sunny today, 21 degrees."


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def openai_process(settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    proc = ServiceProcess(settings, tmp_path / "service.log", extra_env={
        "TURNSTILE_PROVIDER": "openai", "TURNSTILE_OPENAI_BASE_URL": fake_openai.url,
        "TURNSTILE_PROVIDER_CHECK": "false",  # the fake records every request; the start-up check is tested elsewhere
        "TURNSTILE_OPENAI_API_KEY": "sk-test", "TURNSTILE_MODEL": "gpt-test", "TURNSTILE_PROVIDER_TIMEOUT_S": "20",
    })
    try:
        yield proc
    finally:
        await proc.stop()


def _tool_round() -> dict[str, Any]:
    """Round 1: some text, then tool calls (the text of a round with tool calls is not a reply)."""
    body = completion("Let me check.", tool_calls=[
        {"id": "call_a", "name": "reply", "arguments": {"text": "looking it up"}},
        {"id": "call_b", "name": "knowledge_search", "arguments": {"query": "weather"}},
    ], usage=(11, 4))
    return body


@pytest.mark.timeout(120)
async def test_partial_text_streams_on_core_nats_and_the_durable_reply_follows(
    openai_process: ServiceProcess, fake_openai: FakeOpenAI, nc: Client, subjects: Subjects
) -> None:
    sid = f"st-{uuid.uuid4().hex[:8]}"
    stream = await Collector().attach(nc, subjects.stream("cli", sid))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    final = completion(FINAL, usage=(20, 5))
    fake_openai.replies = [
        (500, {"error": "warming up"}, {}),  # retried with backoff
        (200, _tool_round(), {}),
        (200, Streamed(chunks_of(final), cut_after=5), {}),  # cut midway: retried from the start
        (200, final, {}),
    ]
    await openai_process.start()
    await openai_process.wait_ready(nc)
    await publish_inbound(nc, subjects, inbound(sid, "what's the weather?", chat=PRIVATE))
    await wait_for(lambda: events_of(events, "turn.ended"), timeout_s=60, what="turn.ended")
    await wait_for(lambda: len(replies.messages) >= 2, what="two replies")
    assert events_of(events, "turn.ended")[0]["data"]["outcome"] == "replied"
    assert [r["text"] for r in replies.json()] == ["looking it up", FINAL]
    turn_id = replies.json()[-1]["turn_id"]

    await wait_for(lambda: round_text(chunks(stream), 2) == FINAL, what="the streamed text of round 2")
    seen = chunks(stream)
    assert seen[0].type == "typing" and seen[0].seq == 0 and seen[0].round == 1
    assert [c.seq for c in seen] == list(range(len(seen)))  # in order, none missing
    assert {(c.session_id, c.turn_id, c.generation) for c in seen} == {(sid, turn_id, 0)}
    assert round_text(seen, 1) == "Let me check."  # streamed, then left out of the replies
    round_two = [c for c in seen if c.round == 2]
    assert [c.reset for c in round_two].count(True) == 2  # a new round, then the retried attempt
    assert round_text(seen, 2) == replies.json()[-1]["text"]

    # Ephemeral: no stream stores the progress subject; durable steps are unchanged.
    with pytest.raises(NotFoundError):
        await nc.jetstream().find_stream_name_by_subject(subjects.stream("cli", sid))
    assert transitions(checkpoints) == [
        "message_staged", "model_response", "tool_call", "tool_result", "tool_call", "tool_result", "turn_ended",
    ]
    requests = [r.json() for r in fake_openai.requests]
    assert len(requests) == 4 and all(r["stream"] is True for r in requests)
    assert all("reasoning_effort" not in r for r in requests)
    usage = events_of(events, "usage")
    assert [(u["data"]["input"], u["data"]["output"]) for u in usage] == [(31, 9)]


@pytest.mark.rule("MQ-8", "KS-10")
@pytest.mark.timeout(150)
async def test_a_process_killed_while_the_model_streams_resumes_without_rerunning_a_tool(
    openai_process: ServiceProcess, fake_openai: FakeOpenAI, nc: Client, subjects: Subjects
) -> None:
    sid = f"sk-{uuid.uuid4().hex[:8]}"
    stream = await Collector().attach(nc, subjects.stream("cli", sid))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    final = completion(FINAL, usage=(20, 5))
    fake_openai.replies = [
        (200, _tool_round(), {}),
        (200, Streamed(chunks_of(final), stall_after=6), {}),  # the process dies while this streams
        (200, final, {}),
    ]
    await openai_process.start()
    await openai_process.wait_ready(nc)
    await publish_inbound(nc, subjects, inbound(sid, "what's the weather?", chat=PRIVATE))
    await wait_for(fake_openai.stalled.is_set, timeout_s=60, what="round 2 streaming")
    await wait_for(lambda: round_text(chunks(stream), 2) == FINAL[:15], what="partial text of round 2")
    await openai_process.kill()
    assert not replies.messages

    await openai_process.start()
    await openai_process.wait_ready(nc)
    await wait_for(lambda: events_of(events, "turn.ended"), timeout_s=60, what="turn.ended after the restart")
    await wait_for(lambda: len(replies.messages) >= 2, what="the replies")
    assert [r["text"] for r in replies.json()] == ["looking it up", FINAL]
    # The tools of round 1 ran once: their results were journaled before the kill.
    by_call = results_by_call(last_snapshot(checkpoints)["transcript"])
    assert sorted(by_call) == ["call_a", "call_b"] and all(len(r) == 1 for r in by_call.values())
    assert len(fake_openai.requests) == 3  # round 1 once, round 2 twice (before and after the kill)
    # The resumed turn signals typing again (seq restarts) and streams round 2 from the start.
    seen = chunks(stream)
    typing = [i for i, c in enumerate(seen) if c.type == "typing"]
    assert len(typing) == 2 and seen[typing[1]].round == 2
    assert round_text(seen[typing[1]:], 2) == FINAL
