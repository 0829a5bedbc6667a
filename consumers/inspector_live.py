"""Live events for the inspector page: server-sent events fed by core NATS subscriptions.

``GET /inspector/api/live?id=<sid>`` streams that session's events
(``<prefix>.events.<sid>.>``) and a summary of each checkpoint it publishes
(``<prefix>.checkpoint.<sid>``); without ``id``, every session's events. Each SSE
``data:`` line is one JSON object with ``kind`` = ``event`` (the event as published),
``checkpoint`` (a summary plus the whole checkpoint under ``checkpoint``, so the page can
show checkpoints the stream no longer keeps; core subscribers see no stream sequence) or
``dropped`` (a slow reader missed ``count`` items). The stream ends when the client goes away or the
service's broker connection closes, so an open page never holds up a stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from aiohttp import web
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.inspector_replies import Handler, error_response, session_id_of
from consumers.nats_flush import flush
from consumers.process_view import ProcessView
from core.errors import InvalidInput, Unavailable

log = logging.getLogger(__name__)

QUEUE_MAX_ITEMS = 1000
WAKE_S = 0.5  # how often an idle stream checks that the service still runs
KEEPALIVE_S = 15.0  # an SSE comment line so proxies and browsers keep the stream open


def live_handler(service: ProcessView) -> Handler:
    """The SSE handler, bound to the running service."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            sid = session_id_of(request)
        except InvalidInput as exc:
            return error_response(exc)
        broker = service.broker
        nc = broker.connection if broker is not None and service.manager is not None else None
        if nc is None or nc.is_closed:
            return error_response(Unavailable("the service is not serving yet"))
        return await LiveStream(service, nc, sid).serve(request)

    return handle


class LiveStream:
    """One open page's stream: subscriptions into a bounded queue, the queue out as SSE."""

    def __init__(self, service: ProcessView, nc: Client, session_id: str | None) -> None:
        self._subjects = service.subjects
        self._nc = nc
        self._sid = session_id
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX_ITEMS)
        self._dropped = 0

    def _offer(self, item: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self._dropped += 1

    async def _on_event(self, msg: Msg) -> None:
        try:
            event = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        if isinstance(event, dict):
            self._offer({"kind": "event", **event})

    async def _on_checkpoint(self, msg: Msg) -> None:
        try:
            checkpoint = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        if isinstance(checkpoint, dict):
            self._offer({
                "kind": "checkpoint",
                "session_id": checkpoint.get("session_id"),
                "transition": checkpoint.get("transition"),
                "state_version": checkpoint.get("state_version"),
                "generation": checkpoint.get("generation"),
                "at": checkpoint.get("at"),
                "size_bytes": len(msg.data),
                "checkpoint": orjson.Fragment(msg.data),  # whole: the stream may not keep it for long
            })

    async def serve(self, request: web.Request) -> web.StreamResponse:
        subs = [await self._nc.subscribe(
            self._subjects.events_of(self._sid) if self._sid is not None else self._subjects.events_all,
            cb=self._on_event,
        )]
        if self._sid is not None:
            subs.append(await self._nc.subscribe(self._subjects.checkpoint(self._sid), cb=self._on_checkpoint))
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
        })
        try:
            await flush(self._nc)
            await response.prepare(request)
            await response.write(b": connected\n\n")
            await self._pump(response)
        except ConnectionError:
            pass  # the page went away
        finally:
            for sub in subs:
                try:
                    await sub.unsubscribe()
                except Exception as exc:  # the connection may be closing with the service
                    log.debug("inspector live stream: unsubscribe: %r", exc)
        return response

    async def _pump(self, response: web.StreamResponse) -> None:
        last_write = time.monotonic()
        while not (self._nc.is_closed or self._nc.is_draining):
            try:
                async with asyncio.timeout(WAKE_S):  # not wait_for: it can lose a cancel (task_stop.py)
                    item = await self._queue.get()
            except TimeoutError:
                if time.monotonic() - last_write >= KEEPALIVE_S:
                    await response.write(b": keepalive\n\n")
                    last_write = time.monotonic()
                continue
            if self._dropped:
                await response.write(_sse({"kind": "dropped", "count": self._dropped}))
                self._dropped = 0
            await response.write(_sse(item))
            last_write = time.monotonic()


def _sse(item: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(item) + b"\n\n"
