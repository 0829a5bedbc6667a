"""OpenAI-compatible chat-completions provider (httpx): tools, usage, timeouts, retries, streaming.

Retries use exponential backoff with jitter (tenacity) on 429, 5xx and transport
errors (connect failures, timeouts), honouring ``Retry-After`` up to the backoff
ceiling; other 4xx fail at once. Cancelling the calling task cancels the HTTP
request and any backoff sleep.

With ``stream=True`` (the default) a completion is requested with ``stream: true`` and
assembled from its chunks (``core.providers.chat_stream``); the text so far goes to the
request's ``on_text`` as it grows. A stream cut off or timed out between chunks is retried
like any transport error, from the start. A server that ignores ``stream`` and answers
with one JSON body is understood too. Optional parameters (``reasoning_effort``) are sent
only when set: many OpenAI-compatible servers refuse fields they do not know.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from core.errors import ProviderError
from core.providers.base import ModelRequest, ModelResponse, ToolCall, Transcription, Usage, estimate_tokens
from core.providers.chat_stream import StreamAssembler, StreamFailed, parse_arguments

T = TypeVar("T")
JSON_HEADERS = {"Content-Type": "application/json"}


class RetryableStatus(Exception):
    """An HTTP status worth retrying (429 / 5xx)."""

    def __init__(self, status: int, body: str, retry_after_s: float | None) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.retry_after_s = retry_after_s


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, (RetryableStatus, StreamFailed, httpx.TransportError))


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def to_wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The structured projection in chat-completions wire form (system prompt first)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": request.system_prompt}]
    for msg in request.messages:
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            out.append({
                "role": "assistant",
                "content": msg.get("content") or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": orjson.dumps(c.get("arguments", {})).decode()}}
                    for c in msg["tool_calls"]
                ],
            })
        else:
            out.append({k: v for k, v in msg.items() if k in ("role", "content", "name", "tool_call_id")})
    return out


def parse_completion(body: dict[str, Any]) -> ModelResponse:
    """A chat-completions response body → ModelResponse; ProviderError when malformed."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ProviderError(f"malformed completion: {str(body)[:300]}") from exc
    calls = [
        ToolCall(id=c["id"], name=c["function"]["name"], arguments=parse_arguments(c["function"].get("arguments")))
        for c in message.get("tool_calls") or []
    ]
    usage = body.get("usage") or {}
    return ModelResponse(
        text=message.get("content") or "",
        tool_calls=calls,
        usage=Usage(input_tokens=int(usage.get("prompt_tokens", 0)), output_tokens=int(usage.get("completion_tokens", 0))),
    )


class OpenAIChatProvider:
    """Provider for any OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        max_attempts: int = 4,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 20.0,
        transcription_model: str = "whisper-1",
        stream: bool = True,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._api_key = api_key
        self._client = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
        )
        self._max_attempts = max_attempts
        self._backoff = wait_exponential_jitter(multiplier=backoff_initial_s, max=backoff_max_s, jitter=backoff_initial_s)
        self._backoff_max_s = backoff_max_s
        self._transcription_model = transcription_model
        self._stream = stream

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    def _said(self, text: str) -> str:
        """The start of a response body for an error message, with the API key redacted (some echo it)."""
        text = text[:300 + len(self._api_key)]
        return (text.replace(self._api_key, "[redacted]") if self._api_key else text)[:300]

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableStatus) and exc.retry_after_s is not None:
            return min(exc.retry_after_s, self._backoff_max_s)
        return float(self._backoff(state))

    async def _retried(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` with backoff on 429 / 5xx / transport errors; ProviderError when it gives up."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            async for state in retrying:
                with state:
                    return await attempt()
        except (RetryableStatus, StreamFailed) as exc:
            raise ProviderError(f"provider kept failing after {self._max_attempts} attempts: {exc}") from exc
        except httpx.TransportError as exc:
            raise ProviderError(f"provider unreachable after {self._max_attempts} attempts: {exc!r}") from exc
        raise ProviderError("retry loop ended without a result")  # pragma: no cover - tenacity always yields

    async def _post(self, path: str, **kwargs: Any) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            response = await self._client.post(path, **kwargs)
            _raise_for_status(response.status_code, self._said(response.text), response)
            return _json_body(response, self._said)

        return await self._retried(attempt)

    async def _post_streamed(self, body: bytes, on_text: Callable[[str], Awaitable[None]] | None) -> ModelResponse:
        async def attempt() -> ModelResponse:
            async with self._client.stream("POST", "chat/completions", content=body, headers=JSON_HEADERS) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode(errors="replace")
                    _raise_for_status(response.status_code, self._said(text), response)
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    await response.aread()
                    return parse_completion(_json_body(response, self._said))  # the server ignored "stream"
                assembler = StreamAssembler()
                async for line in response.aiter_lines():
                    if assembler.feed_line(line) and on_text is not None:
                        await on_text(assembler.text)
                    if assembler.done:
                        break
                if not assembler.complete:
                    raise httpx.RemoteProtocolError("the stream ended before the answer did")
                return assembler.response()

        return await self._retried(attempt)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One chat completion with tools (streamed unless the provider was built with ``stream=False``)."""
        body: dict[str, Any] = {"model": request.model, "messages": to_wire_messages(request)}
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools
            ]
        if request.reasoning_effort:
            body["reasoning_effort"] = request.reasoning_effort
        if self._stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return await self._post_streamed(orjson.dumps(body), request.on_text)
        payload = await self._post("chat/completions", content=orjson.dumps(body), headers=JSON_HEADERS)
        return parse_completion(payload)

    async def transcribe(self, audio: bytes, media_type: str, prompt: str, *, model: str) -> Transcription:
        """Audio transcription; ``prompt`` is sent unchanged (KS-13)."""
        payload = await self._post(
            "audio/transcriptions",
            data={"model": self._transcription_model, "prompt": prompt},
            files={"file": ("audio", audio, media_type)},
        )
        text = str(payload.get("text", ""))
        usage = payload.get("usage") or {}
        return Transcription(
            text=text,
            usage=Usage(
                input_tokens=int(usage.get("input_tokens", estimate_tokens(prompt))),
                output_tokens=int(usage.get("output_tokens", estimate_tokens(text))),
            ),
        )


def _raise_for_status(status: int, text: str, response: httpx.Response) -> None:
    if status == 429 or status >= 500:
        raise RetryableStatus(status, text, _retry_after(response))
    if status >= 400:
        raise ProviderError(f"provider refused the request: HTTP {status}: {text[:300]}")


def _json_body(response: httpx.Response, said: Callable[[str], str]) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise ProviderError(f"provider answered with non-JSON: {said(response.text)}") from exc
    if not isinstance(body, dict):
        raise ProviderError("provider answered with a non-object JSON body")
    return body
