"""Logging setup: level, text or JSON lines, quiet libraries, and the ids of the work at hand.

``configure_logging(settings)`` is the one place logging is set up (``turnstile run``,
``make run``). ``TURNSTILE_LOG_FORMAT=json`` writes one JSON object a line with
``ts``, ``level``, ``logger``, ``message`` and, where known, ``session_id``, ``turn_id``
and ``inbound_id``; those come from context variables the session actor sets
(``log_context``), so every line logged while a message is served carries them.
Third-party loggers (alembic, httpx, aiohttp, nats, faststream) log at
``TURNSTILE_LOG_LIBRARY_LEVEL`` (WARNING by default).
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from consumers.settings import Settings

session_id_var: ContextVar[str | None] = ContextVar("turnstile_session_id", default=None)
turn_id_var: ContextVar[str | None] = ContextVar("turnstile_turn_id", default=None)
inbound_id_var: ContextVar[str | None] = ContextVar("turnstile_inbound_id", default=None)

LIBRARY_LOGGERS = ("alembic", "httpx", "httpcore", "aiohttp", "nats", "faststream", "asyncio", "sqlalchemy")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CONTEXT = (("session_id", session_id_var), ("turn_id", turn_id_var), ("inbound_id", inbound_id_var))


def log_context(*, session_id: str | None = None, turn_id: str | None = None, inbound_id: str | None = None) -> None:
    """Set the ids later log lines of this task carry (None leaves an id as it is)."""
    if session_id is not None:
        session_id_var.set(session_id)
    if turn_id is not None:
        turn_id_var.set(turn_id)
    if inbound_id is not None:
        inbound_id_var.set(inbound_id)


def clear_log_context() -> None:
    """Forget the turn and inbound ids (between two items of a session)."""
    turn_id_var.set(None)
    inbound_id_var.set(None)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in _CONTEXT:
            value = var.get()
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(settings: Settings, stream: TextIO | None = None) -> None:
    """Set the root level and format from ``settings``; libraries at their own level."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(settings.log_library_level.upper())
