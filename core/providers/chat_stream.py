"""Assembling a streamed chat completion (server-sent events, ``stream: true``).

Each ``data:`` line holds a ``chat.completion.chunk``: ``choices[0].delta`` carries a piece of
the text (``content``) and/or pieces of tool calls (``tool_calls[i]`` with an ``index``; the
``id`` and ``function.name`` usually come once, ``function.arguments`` comes in fragments to be
concatenated in order); the last chunk (``stream_options.include_usage``) carries ``usage``
with empty ``choices``; ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.errors import ProviderError
from core.providers.base import ModelResponse, ToolCall, Usage

DONE = "[DONE]"


class StreamFailed(Exception):
    """Raised when the server reports an error inside the stream (worth retrying, like a 5xx)."""


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """Folds the chunks of one streamed completion into a ``ModelResponse``."""

    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    done: bool = False
    finish_reason: str | None = None

    @property
    def complete(self) -> bool:
        """The answer ended: ``[DONE]`` came, or at least a ``finish_reason`` (a server may omit ``[DONE]``)."""
        return self.done or self.finish_reason is not None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed_line(self, line: str) -> bool:
        """Take one line of the event stream; True when the text grew."""
        if not line.startswith("data:"):
            return False  # blank separators, comments (": keep-alive"), event: / id: fields
        data = line[5:].strip()
        if data == DONE:
            self.done = True
            return False
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ProviderError(f"malformed stream chunk: {data[:300]}") from exc
        if not isinstance(chunk, dict):
            raise ProviderError(f"malformed stream chunk: {data[:300]}")
        return self.feed(chunk)

    def feed(self, chunk: dict[str, Any]) -> bool:
        """Take one decoded chunk; True when the text grew."""
        if chunk.get("error"):
            raise StreamFailed(f"error in stream: {str(chunk['error'])[:300]}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0), output_tokens=int(usage.get("completion_tokens") or 0)
            )
        choices = chunk.get("choices") or []
        if not choices:
            return False
        if choices[0].get("finish_reason"):
            self.finish_reason = str(choices[0]["finish_reason"])
        delta = choices[0].get("delta") or {}
        grew = False
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text_parts.append(content)
            grew = True
        for position, piece in enumerate(delta.get("tool_calls") or []):
            self._feed_call(position, piece)
        return grew

    def _feed_call(self, position: int, piece: dict[str, Any]) -> None:
        index = piece.get("index")
        # Some servers send each call whole in one chunk without an index: its position is its index.
        call = self.calls.setdefault(int(index) if isinstance(index, int) else position, _PartialCall())
        if piece.get("id") and not call.id:
            call.id = str(piece["id"])
        function = piece.get("function") or {}
        if function.get("name"):
            call.name += str(function["name"])
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):  # a server that sends the arguments as an object
            call.arguments.append(orjson.dumps(arguments).decode())

    def response(self) -> ModelResponse:
        """The whole answer; ProviderError when a tool call lacks its name."""
        calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            if not partial.name:
                raise ProviderError(f"streamed tool call #{index} has no function name")
            calls.append(ToolCall(
                id=partial.id or f"call_{uuid.uuid4().hex[:16]}", name=partial.name,
                arguments=parse_arguments("".join(partial.arguments)),
            ))
        return ModelResponse(text=self.text, tool_calls=calls, usage=self.usage)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments (a JSON object, as text or already decoded); kept visibly when invalid."""
    if isinstance(raw, dict):
        return raw
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return {"__invalid_json__": str(raw)}
    return value if isinstance(value, dict) else {"__invalid_json__": str(raw)}
