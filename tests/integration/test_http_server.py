"""The operator HTTP endpoint: a free port on request, off on request, a clear error on a busy port."""

from __future__ import annotations

import socket

import httpx
import pytest
from aiohttp import web

from consumers.http_server import HttpServer
from core.errors import Unavailable


async def test_it_listens_on_a_free_port_and_serves_registered_routes() -> None:
    async def hello(_request: web.Request) -> web.Response:
        return web.json_response({"hello": "operator"})

    server = HttpServer("127.0.0.1", 0)
    server.add_routes([web.get("/hello", hello)])
    await server.start()
    try:
        assert server.port and server.port > 0
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{server.url}/hello")).json() == {"hello": "operator"}
            assert (await client.get(f"{server.url}/nothing-here")).status_code == 404
    finally:
        await server.stop()


async def test_port_minus_one_turns_it_off() -> None:
    server = HttpServer("127.0.0.1", -1)
    await server.start()
    assert not server.enabled and server.port is None
    await server.stop()


async def test_a_busy_port_fails_the_start_naming_the_setting() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = HttpServer("127.0.0.1", busy.getsockname()[1])
        with pytest.raises(Unavailable, match="TURNSTILE_HTTP_PORT"):
            await server.start()
