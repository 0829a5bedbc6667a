"""The operator's HTTP endpoint: one small aiohttp server inside the service's event loop.

It serves what areas register on it (health and metrics, the session inspector page).
It listens on ``TURNSTILE_HTTP_HOST``:``TURNSTILE_HTTP_PORT`` (127.0.0.1:4380 by default,
so nothing is exposed beyond the machine unless asked); port ``0`` picks a free port
(tests), ``-1`` turns the endpoint off. A port that cannot be bound fails the start with
one line naming the setting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiohttp import web

from core.errors import Unavailable

log = logging.getLogger(__name__)

DISABLED_PORT = -1


class HttpServer:
    """An aiohttp application with the routes areas add before ``start``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.requested_port = port
        self.app = web.Application()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the bound port once started

    @property
    def enabled(self) -> bool:
        return self.requested_port != DISABLED_PORT

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Register ``routes`` (before ``start``)."""
        self.app.add_routes(list(routes))

    async def start(self) -> None:
        """Listen, unless disabled; raises ``Unavailable`` naming the setting when binding fails."""
        if not self.enabled:
            return
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.requested_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise Unavailable(
                f"cannot listen on {self.host}:{self.requested_port} ({exc.strerror or exc}); "
                "set TURNSTILE_HTTP_PORT to a free port, 0 for any free port, or -1 to turn the endpoint off"
            ) from exc
        self._runner = runner
        server = site._server  # aiohttp exposes the bound socket only here
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.requested_port
        log.info("HTTP endpoint on http://%s:%d", self.host, self.port)

    @property
    def url(self) -> str:
        """The base URL once started."""
        if self.port is None:
            raise RuntimeError("the HTTP endpoint is not listening")
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self.port = None
