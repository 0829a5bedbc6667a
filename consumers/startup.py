"""Start-up checks made before a process takes any ownership, and how a refused start ends.

A start that cannot work ends with one log line naming the ``TURNSTILE_*`` variable at
fault and an exit code per kind (``StartupError.exit_code``):

- 2: a setting is invalid (a value the settings reject, the HTTP port is busy)
- 3: the database (``TURNSTILE_DATABASE_URL``) cannot be opened or queried
- 4: the broker (``TURNSTILE_NATS_URL``) cannot be reached or refuses the credentials
- 5: the model provider's settings are refused (``TURNSTILE_PROVIDER``, ``TURNSTILE_OPENAI_*``)
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from consumers.settings import Settings, secret_value

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

EXIT_SETTINGS = 2
EXIT_DATABASE = 3
EXIT_BROKER = 4
EXIT_PROVIDER = 5
DATABASE_CHECK_S = 15.0
PROVIDER_CHECK_S = 10.0
PROVIDERS = ("scripted", "openai")


class StartupError(RuntimeError):
    """The process cannot start; ``str()`` is the one line logged, ``exit_code`` the exit status."""

    exit_code = EXIT_SETTINGS

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def shown_url(url: str) -> str:
    """``url`` with any password masked."""
    # SQLAlchemy is imported where it is used here and below: the CLI imports this module for its
    # exit codes, and its client commands start without SQLAlchemy (tests/unit/test_cli_imports.py).
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparseable URL)"


async def open_database(settings: Settings) -> AsyncEngine:
    """The database engine, after one query proved the database answers; ``StartupError`` (3) if not."""
    from sqlalchemy import text

    from core.store.db import create_db_engine

    url = settings.database_url
    try:
        engine = create_db_engine(url, sqlite_synchronous=settings.sqlite_synchronous)
    except Exception as exc:
        raise StartupError(
            f"cannot use the database URL {shown_url(url)} (TURNSTILE_DATABASE_URL): {_reason(exc)}", EXIT_DATABASE
        ) from None
    try:
        async with asyncio.timeout(DATABASE_CHECK_S):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception as exc:
        await engine.dispose()
        raise StartupError(
            f"cannot open the database at {shown_url(url)} (TURNSTILE_DATABASE_URL): {_reason(exc)}", EXIT_DATABASE
        ) from None
    return engine


async def check_provider(settings: Settings) -> None:
    """Refuse a provider configuration that cannot serve a turn (``StartupError``, exit code 5).

    ``openai``: a key must be set for the default (api.openai.com) base URL, and
    ``GET <base URL>/models`` must answer without 401/403; a server that has no ``/models``
    (404, 405) is accepted with a warning. Skipped with ``TURNSTILE_PROVIDER_CHECK=false``.
    """
    if settings.provider not in PROVIDERS:
        raise StartupError(
            f"unknown provider {settings.provider!r} (TURNSTILE_PROVIDER): use one of {', '.join(PROVIDERS)}",
            EXIT_PROVIDER,
        )
    if settings.provider != "openai" or not settings.provider_check:
        return
    base = settings.openai_base_url.rstrip("/")
    key = secret_value(settings.openai_api_key)
    if not key and "api.openai.com" in base:
        raise StartupError("TURNSTILE_OPENAI_API_KEY is empty; the OpenAI API needs a key", EXIT_PROVIDER)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    import httpx  # only for the OpenAI provider: with rich and pygments (httpx's CLI) it costs ~4 MB resident

    try:
        async with httpx.AsyncClient(timeout=min(settings.provider_timeout_s, PROVIDER_CHECK_S)) as client:
            response = await client.get(f"{base}/models", headers=headers)
    except httpx.HTTPError as exc:
        raise StartupError(
            f"the provider at {base} (TURNSTILE_OPENAI_BASE_URL) does not answer: {_reason(exc)}", EXIT_PROVIDER
        ) from None
    if response.status_code in (401, 403):
        raise StartupError(
            f"the provider at {base} refused the key (HTTP {response.status_code}); check TURNSTILE_OPENAI_API_KEY",
            EXIT_PROVIDER,
        )
    if response.status_code >= 400:
        log.warning("provider check: GET %s/models answered HTTP %d; starting anyway", base, response.status_code)


def _reason(exc: BaseException) -> str:
    text_ = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text_}"[:300] if text_ else type(exc).__name__
