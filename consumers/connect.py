"""Reaching the broker at start: bounded, logged retries instead of a silent hang.

nats-py's ``connect`` with unlimited reconnects waits forever (and says nothing)
when no server answers at start. Before the real connection is made, a plain
probe connection without reconnects is retried with a capped exponential
back-off (tenacity), one log line per failed attempt.

Once connected, the JetStream set-up requests of the start (the lease, the streams
and consumers) are retried the same way while the broker answers "not now" — a
request timing out, no responders, JetStream unavailable — as a busy cluster does
while it elects stream leaders (``patiently``); any other refusal is an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats
import nats.errors
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from consumers.startup import EXIT_BROKER, StartupError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
T = TypeVar("T")
UNAVAILABLE_CODE = 503
# JetStream's "no suitable peers for placement": with "peer offline", a cluster that has just formed (or
# a restarting node) has not heard from every peer yet; with any other reason, an answer.
NO_PLACEMENT_ERR_CODE = 10005


class BrokerUnreachable(StartupError):
    """The broker did not answer within the start-up bound (exit code 4)."""

    exit_code = EXIT_BROKER


async def _quiet(_exc: Exception) -> None:
    """nats-py logs every refused attempt with a traceback by default; we log one line per attempt."""


def _refused_credentials(exc: BaseException) -> bool:
    """The server answered and refused who we are: retrying cannot help."""
    return "authorization" in str(exc).lower() or "authentication" in str(exc).lower()


async def _probe(url: str, options: dict[str, Any]) -> None:
    # nats-py retries a server for ever when max_reconnect_attempts <= 0 (even without
    # reconnects): 1 means one attempt and one immediate retry, then NoServersError.
    nc = await asyncio.wait_for(
        nats.connect(
            url, allow_reconnect=False, connect_timeout=PROBE_TIMEOUT_S, max_reconnect_attempts=1,
            reconnect_time_wait=0, error_cb=_quiet, **options,
        ),
        3 * PROBE_TIMEOUT_S,
    )
    await nc.close()


def _log_retry(url: str) -> object:
    def before_sleep(state: object) -> None:
        attempt = getattr(state, "attempt_number", 0)
        outcome = getattr(state, "outcome", None)
        exc = outcome.exception() if outcome is not None else None
        log.warning("broker %s not reachable (attempt %d: %s); retrying", url, attempt, exc)

    return before_sleep


async def wait_for_broker(url: str, timeout_s: float | None, options: dict[str, Any] | None = None) -> None:
    """Return once ``url`` accepts a connection made with ``options`` (credentials, TLS:
    ``consumers.nats_connect.connect_options``); ``timeout_s=None`` waits as long as it takes.

    Raises ``BrokerUnreachable`` (one clear sentence naming TURNSTILE_NATS_URL) after ``timeout_s``,
    and at once when the server refuses the credentials (naming the credential settings).
    """
    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Exception) & retry_if_exception(lambda exc: not _refused_credentials(exc)),
            wait=wait_exponential(multiplier=0.25, max=2.0),
            stop=stop_never if timeout_s is None else stop_after_delay(timeout_s),
            before_sleep=_log_retry(url),  # type: ignore[arg-type]
        ):
            with attempt:
                await _probe(url, options or {})
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise BrokerUnreachable(
            f"cannot reach the NATS broker at {url} (TURNSTILE_NATS_URL) within {timeout_s:g} s ({last})"
        ) from None
    except Exception as exc:
        if not _refused_credentials(exc):
            raise
        raise BrokerUnreachable(
            f"the NATS broker at {url} refused our credentials ({exc}); check TURNSTILE_NATS_CREDS_FILE, "
            "TURNSTILE_NATS_NKEY_SEED_FILE, TURNSTILE_NATS_USER/TURNSTILE_NATS_PASSWORD or TURNSTILE_NATS_TOKEN"
        ) from None


def not_now(exc: BaseException) -> bool:
    """The broker could not answer now (a timeout, no responders, JetStream unavailable, a connection
    being re-established), as opposed to an answer such as "not found" or "bad request"."""
    if isinstance(exc, ServiceUnavailableError | NoStreamResponseError | nats.errors.NoRespondersError):
        return True
    if isinstance(exc, APIError):
        # Not every APIError carries a code: nats-py's KeyValue errors (KeyNotFoundError, …) set none.
        if getattr(exc, "err_code", None) == NO_PLACEMENT_ERR_CODE:
            return "peer offline" in str(getattr(exc, "description", "") or "")
        return getattr(exc, "code", None) == UNAVAILABLE_CODE
    return isinstance(
        exc, nats.errors.TimeoutError | TimeoutError | nats.errors.ConnectionReconnectingError
        | nats.errors.FlushTimeoutError,
    )


async def patiently(step: Callable[[], Awaitable[T]], what: str, timeout_s: float | None) -> T:
    """Run a start-up JetStream step, retried while the broker answers "not now" (``not_now``), for
    ``timeout_s`` (None: as long as it takes); then ``BrokerUnreachable`` naming ``what``."""

    def before_sleep(state: object) -> None:
        outcome = getattr(state, "outcome", None)
        log.warning("%s: the broker did not answer (attempt %d: %r); retrying",
                    what, getattr(state, "attempt_number", 0), outcome.exception() if outcome else None)

    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(not_now),
            wait=wait_exponential(multiplier=0.25, max=2.0),
            stop=stop_never if timeout_s is None else stop_after_delay(timeout_s),
            before_sleep=before_sleep,
        ):
            with attempt:
                return await step()
    except RetryError as exc:
        raise BrokerUnreachable(
            f"{what}: the NATS broker did not answer within {timeout_s:g} s ({exc.last_attempt.exception()!r}); "
            "TURNSTILE_CONNECT_TIMEOUT_S bounds this wait"
        ) from None
    raise AssertionError("unreachable")  # AsyncRetrying either returns through the attempt or raises
