"""The model-provider port: one request in, one response (text, tool calls, usage) out.

A provider that streams reports the text of the answer as it arrives through the request's
optional ``on_text`` callback; the response it returns is still the whole answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

Purpose = Literal["chat", "summary"]

TextSink = Callable[[str], Awaitable[None]]
"""Receives the text a streaming provider has so far (the whole text of the attempt, not a
delta), each time it grows. A retried attempt starts again from its first characters, so a
call's text need not extend the previous call's. Best effort: it must not raise."""


class ToolCall(BaseModel):
    """One tool call the model asked for; ``id`` is unique within the session's turn."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Usage(BaseModel):
    """Token usage of one provider call."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ToolSpec(BaseModel):
    """A tool as offered to the model: name, description, JSON-schema parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    """Everything a provider needs for one completion.

    ``messages`` are chat-completions style dicts (role user / assistant / tool),
    exactly the structured projection of the session; the system prompt is separate. They are
    the engine's memoised dicts, shared between rounds: a provider reads them, never changes them.
    """

    model: str
    reasoning_effort: str = ""
    system_prompt: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = Field(default_factory=list)
    purpose: Purpose = "chat"
    # Characters of the messages' string contents when the caller keeps that total (the engine
    # does, per transcript), so a provider that estimates usage from it need not walk the whole
    # conversation per call; None: count them. Never serialised.
    content_chars: int | None = Field(default=None, exclude=True, repr=False)
    # Partial text of a streamed answer (None: nobody watches). Never serialised.
    on_text: TextSink | None = Field(default=None, exclude=True, repr=False)


class ModelResponse(BaseModel):
    """A provider's answer: text and/or tool calls, plus usage."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class Transcription(BaseModel):
    """Result of an audio transcription through the provider."""

    text: str
    usage: Usage = Field(default_factory=Usage)


@runtime_checkable
class Provider(Protocol):
    """A model provider. Implementations must be cancellation-safe (asyncio cancel)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one completion; raise ``core.errors.ProviderError`` on failure."""
        ...

    async def transcribe(
        self, audio: bytes, media_type: str, prompt: str, *, model: str
    ) -> Transcription:
        """Transcribe audio; ``prompt`` is passed on unchanged (KS-13)."""
        ...


def estimate_tokens(text: str) -> int:
    """Cheap, deterministic token estimate: one token per four characters, rounded up."""
    return tokens_for_chars(len(text))


def tokens_for_chars(chars: int) -> int:
    """``estimate_tokens`` of a text of ``chars`` characters."""
    return (chars + 3) // 4
