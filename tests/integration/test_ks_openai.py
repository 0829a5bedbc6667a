"""A conversation with tool calls end to end over NATS with the OpenAI-compatible provider,
against a real local HTTP server speaking chat-completions (tests/unit/engine/fake_openai.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import events_of, last_snapshot, results_by_call, transitions
from tests.unit.engine.fake_openai import FakeOpenAI, completion


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def openai_service(settings: Settings, fake_openai: FakeOpenAI) -> AsyncIterator[TurnstileService]:
    configured = settings.model_copy(update={
        "provider": "openai", "openai_base_url": fake_openai.url, "openai_api_key": "sk-test",
        "model": "gpt-test", "provider_timeout_s": 10.0,
        "provider_check": False,  # the fake records every request; the start-up check: test_startup_checks.py
    })
    svc = TurnstileService(configured)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.rule("KS-10", "KS-2", "SM-15")
async def test_a_conversation_with_tool_calls_runs_end_to_end_with_the_openai_provider(
    openai_service: TurnstileService, fake_openai: FakeOpenAI, nc: Client, subjects: Subjects
) -> None:
    sid = f"oa-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    fake_openai.replies = [
        (200, completion(tool_calls=[
            {"id": "call_a", "name": "reply", "arguments": {"text": "looking it up"}},
            {"id": "call_b", "name": "knowledge_search", "arguments": {"query": "weather"}},
        ], usage=(11, 4)), {}),
        (429, {"error": "slow down"}, {"Retry-After": "0"}),  # retried by the provider
        (200, completion("It is sunny.", usage=(20, 5)), {}),
    ]
    await publish_inbound(nc, subjects, inbound(sid, "what's the weather?",
                                                chat={"type": "private", "target_id": "u", "multi_party": False}))
    await wait_for(lambda: events_of(events, "turn.ended"), what="turn.ended")
    assert events_of(events, "turn.ended")[0]["data"]["outcome"] == "replied"
    await wait_for(lambda: len(replies.messages) >= 2, what="two replies")
    assert [r["text"] for r in replies.json()] == ["looking it up", "It is sunny."]
    assert transitions(checkpoints) == [
        "message_staged", "model_response", "tool_call", "tool_result", "tool_call", "tool_result",
        "turn_ended",  # the final answer and the turn's end are one durable step
    ]
    by_call = results_by_call(last_snapshot(checkpoints)["transcript"])
    assert sorted(by_call) == ["call_a", "call_b"] and all(len(r) == 1 for r in by_call.values())

    # What the provider saw: the system prompt, the user text, tools offered, then the tool results.
    first, _retried, second = (r.json() for r in fake_openai.requests)
    assert fake_openai.requests[0].path == "/v1/chat/completions"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-test"
    assert first["model"] == "gpt-test"
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1] == {"role": "user", "content": "what's the weather?"}
    assert {"reply", "knowledge_search"} <= {t["function"]["name"] for t in first["tools"]}
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a", "call_b"]
    assert second["messages"][-3]["tool_calls"][0]["id"] == "call_a"
    # SM-15: usage of both model rounds reaches the session record.
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["result"]["tokens"] == {"input": 31, "output": 9}
