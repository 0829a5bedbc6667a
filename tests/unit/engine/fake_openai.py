"""A tiny real HTTP/1.1 server speaking enough of the OpenAI API for provider tests.

A queued ``completion(...)`` answers a request with ``stream: true`` as server-sent events,
cut into small chunks (``chunks_of``: text a few characters at a time, tool-call arguments in
fragments); a queued ``Streamed`` serves exactly its chunks (and can stall or cut the stream).
``FakeOpenAI(streams=False)`` plays a server that ignores ``stream`` and answers with JSON.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

STALL = -1
TEXT_PIECE_CHARS = 3
ARGUMENT_PIECE_CHARS = 4


@dataclass
class Streamed:
    """An event stream to serve: ``chunks`` (dicts, sent as ``data:`` lines) then ``data: [DONE]``;
    ``stall_after`` / ``cut_after`` chunks: stop answering / close the connection without [DONE]."""

    chunks: list[dict[str, Any]]
    stall_after: int | None = None
    cut_after: int | None = None


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class FakeOpenAI:
    """Serves queued (status, body, headers) replies in order; STALL never answers."""

    replies: list[tuple[int, Any, dict[str, str]]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    streams: bool = True
    # Called with each request's JSON body when no reply is queued (a test's own model).
    responder: Any = None
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _method, path, _version = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (raw := await reader.readline()) not in (b"\r\n", b""):
                    key, _, value = raw.decode().partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(Recorded(path, headers, body))
                if self.replies:
                    status, payload, extra = self.replies.pop(0)
                elif self.responder is not None:
                    status, payload, extra = 200, await self.responder(orjson.loads(body)), {}
                else:
                    status, payload, extra = 500, {"error": "no reply queued"}, {}
                if status == STALL:
                    self.stalled.set()
                    await asyncio.Event().wait()
                wants_stream = path.endswith("/chat/completions") and bool(orjson.loads(body or b"{}").get("stream"))
                if status == 200 and wants_stream and self.streams and isinstance(payload, dict):
                    payload = Streamed(chunks_of(payload))
                if isinstance(payload, Streamed):
                    if not await self._stream(writer, payload, extra):
                        return
                    continue
                data = orjson.dumps(payload)
                head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                writer.write(head.encode() + b"\r\n" + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, reply: Streamed, extra: dict[str, str]) -> bool:
        """Serve ``reply`` chunked; False when the connection was cut on purpose."""
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in extra.items())
        writer.write(head.encode() + b"\r\n")

        async def send(data: bytes) -> None:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        for n, chunk in enumerate(reply.chunks):
            if reply.stall_after == n:
                self.stalled.set()
                await asyncio.Event().wait()
            if reply.cut_after == n:
                return False
            await send(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await send(b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def completion(text: str = "", tool_calls: list[dict[str, Any]] | None = None, usage: tuple[int, int] = (7, 3)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": orjson.dumps(c["arguments"]).decode()}}
            for c in tool_calls
        ]
    return {
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def chunks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat-completion body as the chunks a streaming server sends: role, text a few characters
    at a time, each tool call's id and name then its arguments in fragments, usage last."""
    message = body["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": body.get("id", "chatcmpl-1"), "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": text[i:i + TEXT_PIECE_CHARS]}) for i in range(0, len(text), TEXT_PIECE_CHARS)]
    for index, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        arguments = call["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i:i + ARGUMENT_PIECE_CHARS]}}]})
                for i in range(0, len(arguments), ARGUMENT_PIECE_CHARS)]
    out.append(chunk({}, body["choices"][0].get("finish_reason") or "stop"))
    if body.get("usage"):
        out.append({"id": body.get("id", "chatcmpl-1"), "object": "chat.completion.chunk", "choices": [],
                    "usage": body["usage"]})
    return out
