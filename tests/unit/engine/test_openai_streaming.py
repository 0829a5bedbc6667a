"""The OpenAI-compatible provider streams (``stream: true``) against a real local HTTP server:
text deltas, tool-call arguments assembled across chunks, usage, retries of 429 / 500 /
cut or stalled streams, and only the parameters that were configured."""

from __future__ import annotations

from typing import Any

import pytest

from consumers.settings import Settings
from core.errors import ProviderError
from core.providers import ModelRequest, OpenAIChatProvider, ToolSpec
from core.providers.chat_stream import StreamAssembler

from .conftest import Recorder, SessionFactory
from .fake_openai import FakeOpenAI, Streamed, chunks_of, completion


def _provider(url: str, **kwargs: Any) -> OpenAIChatProvider:
    kwargs.setdefault("backoff_initial_s", 0.001)
    kwargs.setdefault("backoff_max_s", 0.01)
    return OpenAIChatProvider(url, "sk-test", **kwargs)


class TextSeen:
    """An ``on_text`` sink that keeps every text it was given."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, text: str) -> None:
        self.texts.append(text)


def _request(on_text: TextSeen | None = None, reasoning_effort: str = "") -> ModelRequest:
    return ModelRequest(
        model="m", reasoning_effort=reasoning_effort, system_prompt="sys",
        messages=[{"role": "user", "content": "q"}], on_text=on_text,
        tools=[ToolSpec(name="reply", description="d", parameters={"type": "object"})],
    )


def _delta(delta: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


async def test_a_streamed_answer_reaches_on_text_as_it_grows_and_returns_whole() -> None:
    seen = TextSeen()
    async with FakeOpenAI() as server:
        server.replies.append((200, completion("Hello, streaming world!", usage=(12, 6)), {}))
        provider = _provider(server.url)
        response = await provider.complete(_request(seen))
        await provider.aclose()
    body = server.requests[0].json()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert response.text == "Hello, streaming world!" and not response.tool_calls
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 6)
    assert seen.texts[0] == "Hel" and seen.texts[-1] == "Hello, streaming world!"
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(seen.texts, seen.texts[1:], strict=False))


async def test_tool_call_arguments_are_assembled_across_interleaved_chunks() -> None:
    chunks = [
        _delta({"role": "assistant", "content": None}),
        _delta({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "reply", "arguments": ""}}]}),
        _delta({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "knowledge_", "arguments": '{"qu'}}]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"text": "Zo'}}]}),
        _delta({"tool_calls": [{"index": 1, "function": {"name": "search", "arguments": 'ery": "we'}}]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '\u00eb"}'}}]}),
        _delta({"tool_calls": [{"index": 1, "function": {"arguments": 'ather"}'}}]}),
        {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]
    async with FakeOpenAI() as server:
        server.replies.append((200, Streamed(chunks), {}))
        provider = _provider(server.url)
        response = await provider.complete(_request(TextSeen()))
        await provider.aclose()
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "reply", {"text": "Zo\u00eb"}), ("call_b", "knowledge_search", {"query": "weather"}),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 4)


def test_the_assembler_takes_whole_calls_without_index_and_keeps_bad_json_visible() -> None:
    assembler = StreamAssembler()
    lines = [
        ": keep-alive", "",
        'data: {"choices":[{"delta":{"content":"ok "}}]}',
        'data: {"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"a","arguments":"{\\"n\\":1}"}},'
        '{"id":"y","function":{"name":"b","arguments":"{not json"}}]}}]}',
        "data: [DONE]",
    ]
    grew = [assembler.feed_line(line) for line in lines]
    assert grew == [False, False, True, False, False] and assembler.done
    response = assembler.response()
    assert response.text == "ok "
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("x", "a", {"n": 1}), ("y", "b", {"__invalid_json__": "{not json"}),
    ]


def test_a_stream_without_done_is_complete_once_a_finish_reason_came() -> None:
    assembler = StreamAssembler()
    assembler.feed({"choices": [{"delta": {"content": "hi"}}]})
    assert not assembler.complete  # cut here: retried
    assembler.feed({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    assert assembler.complete and not assembler.done


async def test_429_and_500_before_the_stream_are_retried_with_backoff() -> None:
    async with FakeOpenAI() as server:
        server.replies += [
            (429, {"error": "slow"}, {"Retry-After": "0"}), (500, {"error": "boom"}, {}),
            (200, completion("fine"), {}),
        ]
        provider = _provider(server.url)
        response = await provider.complete(_request(TextSeen()))
        await provider.aclose()
    assert response.text == "fine" and len(server.requests) == 3


async def test_a_stream_cut_or_failing_midway_is_retried_from_the_start() -> None:
    seen = TextSeen()
    whole = chunks_of(completion("abcdefghij"))
    failing = [*whole[:3], {"error": {"message": "overloaded", "code": 503}}]
    async with FakeOpenAI() as server:
        server.replies += [(200, Streamed(whole, cut_after=3), {}), (200, Streamed(failing), {}),
                           (200, Streamed(whole), {})]
        provider = _provider(server.url)
        response = await provider.complete(_request(seen))
        await provider.aclose()
    assert response.text == "abcdefghij" and len(server.requests) == 3
    # Each attempt restarts the text: the sink sees it begin again from the first characters.
    assert seen.texts.count("abc") == 3 and seen.texts[-1] == "abcdefghij"


async def test_a_stream_that_stalls_times_out_and_the_error_surfaces_after_the_retries() -> None:
    stalls = Streamed(chunks_of(completion("never finished")), stall_after=2)
    async with FakeOpenAI() as server:
        server.replies += [(200, stalls, {}), (200, stalls, {})]
        provider = _provider(server.url, timeout_s=0.3, max_attempts=2)
        with pytest.raises(ProviderError, match="unreachable after 2 attempts"):
            await provider.complete(_request(TextSeen()))
        server.replies += [(500, {"error": "down"}, {})] * 2
        with pytest.raises(ProviderError, match="kept failing after 2 attempts"):
            await provider.complete(_request(TextSeen()))
        await provider.aclose()
    assert len(server.requests) == 4


async def test_a_server_that_ignores_stream_answers_with_json_and_is_understood() -> None:
    async with FakeOpenAI(streams=False) as server:
        server.replies.append((200, completion("plain", usage=(3, 1)), {}))
        provider = _provider(server.url)
        response = await provider.complete(_request(TextSeen()))
        await provider.aclose()
    assert server.requests[0].json()["stream"] is True
    assert response.text == "plain" and response.usage.output_tokens == 1


async def test_optional_parameters_are_sent_only_when_configured() -> None:
    async with FakeOpenAI() as server:
        server.replies += [(200, completion("a"), {}), (200, completion("b"), {})]
        plain = _provider(server.url, stream=False)
        await plain.complete(_request())
        await plain.complete(_request(reasoning_effort="high"))
        await plain.aclose()
    first, second = (r.json() for r in server.requests)
    assert "reasoning_effort" not in first and "stream" not in first and "stream_options" not in first
    assert second["reasoning_effort"] == "high"
    # The service default sends none: many OpenAI-compatible servers refuse reasoning_effort.
    assert Settings.model_fields["reasoning_effort"].default == ""
    assert Settings.model_fields["openai_stream"].default is True


async def test_the_turn_loop_hands_each_rounds_partial_text_to_the_sessions_watcher(
    make_session: SessionFactory,
) -> None:
    seen: list[tuple[int, str]] = []

    async def watch(round_no: int, text: str) -> None:
        seen.append((round_no, text))

    async with FakeOpenAI() as server:
        server.replies += [
            (200, completion("Checking.", tool_calls=[{"id": "c1", "name": "reply", "arguments": {"text": "wait"}}]), {}),
            (200, completion("Done now."), {}),
        ]
        provider = _provider(server.url)
        session = await make_session(provider=provider)
        session.partial_text = watch
        await session.begin_user_turn("hi")
        assert await session.run_pending_turn("op", Recorder()) == "Done now."
        await provider.aclose()
    assert [t for r, t in seen if r == 1][-1] == "Checking." and [t for r, t in seen if r == 2][-1] == "Done now."
    assert [r for r, _ in seen] == sorted(r for r, _ in seen)
