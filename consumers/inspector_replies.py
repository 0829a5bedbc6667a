"""How the inspector's endpoints answer: JSON bodies, ``{code, message}`` errors, the ``id`` parameter."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from core.errors import InvalidInput, NotFound, TurnstileError, Unavailable

log = logging.getLogger(__name__)

MAX_SESSION_ID_CHARS = 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as JSON, never cached (the page always shows the current state)."""
    return web.Response(
        body=orjson.dumps(data), status=status, content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def error_response(exc: TurnstileError) -> web.Response:
    """``{code, message}`` with the HTTP status of the error's kind."""
    status = 500
    if isinstance(exc, InvalidInput):
        status = 400
    elif isinstance(exc, NotFound):
        status = 404
    elif isinstance(exc, Unavailable):
        status = 503
    return json_response({"code": exc.code, "message": exc.message}, status=status)


def answering(handler: Callable[[web.Request], Awaitable[Any]]) -> Handler:
    """Wrap a handler that returns JSON-ready data: every error becomes ``error_response``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            result = await handler(request)
        except TurnstileError as exc:
            return error_response(exc)
        except Exception as exc:  # a broker or store failure: still {code, message}, never a bare 500 page
            log.warning("inspector %s failed: %r", request.path, exc)
            return error_response(TurnstileError(f"reading {request.path} failed: {exc!r}"))
        return json_response(result)

    return handle


def session_id_of(request: web.Request) -> str | None:
    """The ``id`` query parameter (None when absent or empty); InvalidInput past a sane length."""
    sid = request.query.get("id") or None
    if sid is not None and len(sid) > MAX_SESSION_ID_CHARS:
        raise InvalidInput(f"a session id has at most {MAX_SESSION_ID_CHARS} characters")
    return sid


def required_session_id(request: web.Request) -> str:
    """The ``id`` query parameter; InvalidInput when it is missing."""
    sid = session_id_of(request)
    if sid is None:
        raise InvalidInput("give the session id as ?id=")
    return sid
