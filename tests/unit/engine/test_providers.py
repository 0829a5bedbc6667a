"""Scripted provider directives and the OpenAI provider against a real local HTTP server."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import InvalidInput, ProviderError
from core.providers import ModelRequest, OpenAIChatProvider, ScriptedProvider, ToolSpec

from .conftest import Recorder, SessionFactory
from .fake_openai import STALL, FakeOpenAI, completion


def _request(text: str, *after: dict) -> ModelRequest:
    return ModelRequest(model="m", system_prompt="sys", messages=[{"role": "user", "content": text}, *after])


async def test_without_directives_enabled_the_text_of_a_message_cannot_drive_the_provider() -> None:
    text = "/stall 3600\n/fail boom\n/tool read_file {}\n/say owned"
    response = await asyncio.wait_for(ScriptedProvider().complete(_request(text)), 5)
    assert response.text == "echo: " + text and not response.tool_calls


async def test_scripted_provider_echoes_by_default() -> None:
    response = await ScriptedProvider(directives=True).complete(_request("hello there"))
    assert response.text == "echo: hello there" and not response.tool_calls
    assert response.usage.input_tokens > 0


async def test_scripted_provider_follows_directives_round_by_round() -> None:
    provider = ScriptedProvider(directives=True)
    text = '/tool a {"x": 1}\n/tool+ b\n/usage 4 2\n/stall 0.001\n/tool c\n/say bye'
    first = await provider.complete(_request(text))
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("a", {"x": 1}), ("b", {})]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (4, 2)
    second = await provider.complete(_request(text, {"role": "assistant", "content": ""}))
    assert [c.name for c in second.tool_calls] == ["c"]
    third = await provider.complete(_request(text, {"role": "assistant"}, {"role": "assistant"}))
    assert third.text == "bye"


async def test_scripted_provider_fail_and_bad_directives() -> None:
    with pytest.raises(ProviderError, match="boom"):
        await ScriptedProvider(directives=True).complete(_request("/fail boom"))
    for bad in ("/tool", "/tool x {not json}", "/usage 1", "/stall soon"):
        with pytest.raises(InvalidInput):
            await ScriptedProvider(directives=True).complete(_request(bad))


def _provider(url: str, **kwargs) -> OpenAIChatProvider:
    kwargs.setdefault("backoff_initial_s", 0.001)
    kwargs.setdefault("backoff_max_s", 0.01)
    return OpenAIChatProvider(url, "sk-test", **kwargs)


async def test_openai_provider_sends_tools_and_parses_tool_calls() -> None:
    async with FakeOpenAI() as server:
        server.replies.append((200, completion(tool_calls=[{"id": "c1", "name": "reply", "arguments": {"text": "hi"}}]), {}))
        provider = _provider(server.url)
        request = ModelRequest(
            model="gpt-x", reasoning_effort="low", system_prompt="sys",
            messages=[
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "name": "t", "arguments": {"a": 1}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "r"},
            ],
            tools=[ToolSpec(name="reply", description="d", parameters={"type": "object"})],
        )
        response = await provider.complete(request)
        await provider.aclose()
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("c1", "reply", {"text": "hi"})]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 3)
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.headers["authorization"] == "Bearer sk-test"
    body = sent.json()
    assert body["model"] == "gpt-x" and body["reasoning_effort"] == "low"
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert body["messages"][2]["tool_calls"][0]["function"] == {"name": "t", "arguments": '{"a":1}'}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c0", "content": "r"}
    assert body["tools"][0]["function"]["name"] == "reply"


async def test_openai_provider_retries_429_and_5xx_with_backoff() -> None:
    async with FakeOpenAI() as server:
        server.replies += [(503, {"error": "busy"}, {}), (429, {"error": "slow"}, {"Retry-After": "0"}), (200, completion("ok"), {})]
        provider = _provider(server.url)
        response = await provider.complete(_request("q"))
        await provider.aclose()
    assert response.text == "ok" and len(server.requests) == 3


async def test_openai_provider_gives_up_and_does_not_retry_4xx() -> None:
    async with FakeOpenAI() as server:
        server.replies += [(500, {}, {})] * 3
        provider = _provider(server.url, max_attempts=3)
        with pytest.raises(ProviderError, match="3 attempts"):
            await provider.complete(_request("q"))
        server.replies.append((400, {"error": "bad"}, {}))
        with pytest.raises(ProviderError, match="HTTP 400"):
            await provider.complete(_request("q"))
        await provider.aclose()
    assert len(server.requests) == 4


async def test_openai_provider_times_out_and_cancels() -> None:
    async with FakeOpenAI() as server:
        server.replies += [(STALL, {}, {}), (STALL, {}, {})]
        provider = _provider(server.url, timeout_s=0.2, max_attempts=2)
        with pytest.raises(ProviderError, match="unreachable"):
            await provider.complete(_request("q"))
        patient = _provider(server.url, timeout_s=30)
        server.replies.append((STALL, {}, {}))
        server.stalled.clear()
        task = asyncio.create_task(patient.complete(_request("q")))
        await server.stalled.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await provider.aclose()
        await patient.aclose()


async def test_openai_provider_transcribes_with_prompt_unchanged() -> None:
    async with FakeOpenAI() as server:
        server.replies.append((200, {"text": "hello"}, {}))
        provider = _provider(server.url)
        result = await provider.transcribe(b"RIFF....", "audio/wav", "  Names: Zoë  ", model="m")
        await provider.aclose()
    assert result.text == "hello"
    sent = server.requests[0]
    assert sent.path == "/v1/audio/transcriptions"
    assert "  Names: Zo\u00eb  ".encode() in sent.body


async def test_session_runs_a_tool_turn_through_the_openai_provider(make_session: SessionFactory) -> None:
    async with FakeOpenAI() as server:
        server.replies += [
            (200, completion(tool_calls=[{"id": "call-1", "name": "reply", "arguments": {"text": "early"}}]), {}),
            (200, completion("final answer", usage=(11, 5)), {}),
        ]
        provider = _provider(server.url)
        session = await make_session(provider=provider)
        await session.begin_user_turn("hi")
        assert await session.run_pending_turn("op", Recorder()) == "final answer"
        await provider.aclose()
    assert [o.text for o in session.turn_outputs] == ["early", "final answer"]
    assert (session.last_usage.input_tokens, session.last_usage.output_tokens) == (18, 8)
    second = server.requests[1].json()["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call-1", "content": "delivered"}
