"""The embedded deterministic provider: no network, scriptable from the user's text.

It answers ``echo: <last user text>``. Only when directives are enabled
(``ScriptedProvider(directives=True)``; the service's ``TURNSTILE_SCRIPTED_DIRECTIVES``,
which ``make run`` and the test suite turn on and ``turnstile run`` leaves off) do
lines of the last user message that start with a directive script the turn instead
(one directive per line; documented for users in docs/scripted-provider.md):

``/tool NAME {json}``   next model round calls tool NAME with the JSON arguments
                        (``{}`` when omitted); each ``/tool`` line is one round.
``/tool+ NAME {json}``  adds another call to the same round as the previous ``/tool``.
``/stall SECONDS``      the next round waits SECONDS (cancellable) before answering.
``/fail [MESSAGE]``     the next round raises ``ProviderError(MESSAGE)``.
``/usage IN OUT``       every round of this turn reports exactly this usage.
``/say [TEXT]``         the final answer is TEXT (``/say`` alone: an empty answer).

Rounds are counted as the assistant messages after the last user message, so a
resumed or retried turn continues the script where the transcript stands.
Messages the engine itself adds (notices, summaries, controller boxes) carry
``name == "turnstile"`` and are never read as user text.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.errors import InvalidInput, ProviderError
from core.providers.base import (
    ModelRequest,
    ModelResponse,
    ToolCall,
    Transcription,
    Usage,
    estimate_tokens,
    tokens_for_chars,
)

ENGINE_MESSAGE_NAME = "turnstile"


@dataclass
class Script:
    """A parsed user text: tool rounds, per-round modifiers, usage and final text."""

    rounds: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    stall_s: dict[int, float] = field(default_factory=dict)
    fail: dict[int, str] = field(default_factory=dict)
    usage: Usage | None = None
    say: str | None = None
    plain_lines: list[str] = field(default_factory=list)


def parse_script(text: str) -> Script:
    """Parse directive lines; raise ``InvalidInput`` for a malformed directive."""
    script = Script()
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("/"):
            script.plain_lines.append(raw)
            continue
        head, _, rest = line.partition(" ")
        rest = rest.strip()
        at = len(script.rounds)
        if head in ("/tool", "/tool+"):
            name, _, args_text = rest.partition(" ")
            if not name:
                raise InvalidInput(f"{head} needs a tool name")
            try:
                args = orjson.loads(args_text) if args_text.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"{head} {name}: arguments are not JSON: {exc}") from exc
            if not isinstance(args, dict):
                raise InvalidInput(f"{head} {name}: arguments must be a JSON object")
            if head == "/tool+" and script.rounds:
                script.rounds[-1].append((name, args))
            else:
                script.rounds.append([(name, args)])
        elif head == "/stall":
            try:
                script.stall_s[at] = float(rest)
            except ValueError as exc:
                raise InvalidInput(f"/stall needs seconds, got {rest!r}") from exc
        elif head == "/fail":
            script.fail[at] = rest or "scripted failure"
        elif head == "/usage":
            parts = rest.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise InvalidInput(f"/usage needs two integers, got {rest!r}")
            script.usage = Usage(input_tokens=int(parts[0]), output_tokens=int(parts[1]))
        elif head == "/say":
            script.say = rest
        else:
            script.plain_lines.append(raw)
    return script


def _last_user_index(messages: list[dict[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        msg = messages[index]
        if msg.get("role") == "user" and msg.get("name") != ENGINE_MESSAGE_NAME:
            return index
    return -1


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


class ScriptedProvider:
    """Deterministic provider for the embedded default and for every test path.

    ``directives=False`` (the default) is a plain echo: a chat user cannot stall,
    fail or drive tools through the text of a message.
    """

    def __init__(self, *, directives: bool = False) -> None:
        self.directives = directives

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the script in the last user message (see module docstring)."""
        if request.purpose == "summary":
            return self._summary(request)
        index = _last_user_index(request.messages)
        user_text = _content_text(request.messages[index]) if index >= 0 else ""
        script = parse_script(user_text) if self.directives else Script(plain_lines=user_text.splitlines())
        round_no = sum(1 for m in request.messages[index + 1 :] if m.get("role") == "assistant")
        stall = script.stall_s.get(round_no)
        if stall:
            await asyncio.sleep(stall)
        if round_no in script.fail:
            raise ProviderError(script.fail[round_no])
        if round_no < len(script.rounds):
            calls = [
                ToolCall(id=f"call_{index}_{round_no}_{i}", name=name, arguments=args)
                for i, (name, args) in enumerate(script.rounds[round_no])
            ]
            text = ""
        else:
            calls = []
            text = script.say if script.say is not None else "echo: " + "\n".join(
                script.plain_lines
            ).strip()
        usage = script.usage or self._estimate(request, text, calls)
        return ModelResponse(text=text, tool_calls=calls, usage=usage)

    async def transcribe(
        self, audio: bytes, media_type: str, prompt: str, *, model: str
    ) -> Transcription:
        """Return the audio decoded as UTF-8 text when it is text, else a byte description."""
        try:
            text = audio.decode("utf-8")
        except UnicodeDecodeError:
            text = f"[{len(audio)} bytes of {media_type}]"
        return Transcription(
            text=text,
            usage=Usage(input_tokens=estimate_tokens(prompt) + len(audio) // 64, output_tokens=estimate_tokens(text)),
        )

    def _summary(self, request: ModelRequest) -> ModelResponse:
        parts = []
        for msg in request.messages:
            text = " ".join(_content_text(msg).split())
            if text:
                parts.append(f"{msg.get('role')}: {text[:60]}")
        text = "summary: " + " | ".join(parts)
        text = text[:400]
        return ModelResponse(text=text, usage=self._estimate(request, text, []))

    @staticmethod
    def _estimate(request: ModelRequest, text: str, calls: list[ToolCall]) -> Usage:
        # The conversation's size from the memo's running total when the engine gives it (no walk
        # over the messages per round); summed in one list pass otherwise.
        content_chars = request.content_chars
        if content_chars is None:
            contents = [m.get("content") for m in request.messages]
            content_chars = sum([len(c) for c in contents if isinstance(c, str)])
        prompt_chars = len(request.system_prompt) + content_chars
        out = text + "".join(c.name + orjson.dumps(c.arguments).decode() for c in calls)
        return Usage(input_tokens=tokens_for_chars(prompt_chars), output_tokens=estimate_tokens(out))
