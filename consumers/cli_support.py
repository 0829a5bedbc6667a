"""What every ``turnstile`` client command shares: its settings, the NATS connection, output
and the rule that every error is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import orjson

from consumers.settings import Settings
from consumers.task_stop import cancel_and_wait
from schemas.subjects import Subjects

if TYPE_CHECKING:
    from nats.aio.client import Client

T = TypeVar("T")

EXIT_FAILED = 1  # the thing asked for did not happen (no server, failed turn, timeout)
EXIT_REFUSED = 2  # bad usage or a refused request


class CliError(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    raise CliError(message, code)


@dataclass(frozen=True)
class Cli:
    """The global options as resolved settings, and whether output is for machines (``--json``)."""

    settings: Settings
    json: bool = False

    @property
    def subjects(self) -> Subjects:
        return Subjects(self.settings.prefix)

    def emit(self, value: Any, text: str | None = None) -> None:
        """Print one result: JSON (one line) with ``--json``, else ``text`` (or indented JSON)."""
        if self.json:
            out(orjson.dumps(value).decode())
        elif text is not None:
            out(text)
        else:
            out(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def out(line: str) -> None:
    print(line, flush=True)


def err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _quiet(_: Exception) -> None:
    """nats-py's default error callback logs tracebacks; the CLI reports errors itself."""


@asynccontextmanager
async def connected(cli: Cli, closed: asyncio.Event | None = None) -> AsyncIterator[Client]:
    """A NATS connection with the configured credentials, closed on leaving; ``closed`` is set
    when the connection ends (no reconnect: a follower says the connection is lost)."""
    import nats

    from consumers.nats_connect import connect_options

    async def on_closed() -> None:
        if closed is not None:
            closed.set()

    url = cli.settings.nats_url
    try:
        nc = await nats.connect(
            url, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.2,
            error_cb=_quiet, closed_cb=on_closed, **connect_options(cli.settings),
        )
    except Exception as exc:  # NoServersError, auth, TLS, OSError: all one line
        fail(f"cannot connect to NATS at {url}: {describe(exc)}")
    try:
        yield nc
    finally:
        await nc.close()


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def request(nc: Client, cli: Cli, operation: str, body: dict[str, Any] | bytes,
                  timeout_s: float = 10.0) -> dict[str, Any]:
    """One control request; the parsed ``{ok, …}`` reply (errors of the transport are one line)."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    subject = f"{cli.settings.prefix}.api.{operation}"
    try:
        reply = await nc.request(subject, raw, timeout=timeout_s)
    except NoRespondersError:
        fail(f"no turnstile service answers on {subject} (is it running with prefix {cli.settings.prefix!r}?)")
    except NatsTimeout:
        fail(f"{operation}: no reply within {timeout_s:g} s")
    try:
        parsed: dict[str, Any] = orjson.loads(reply.data)
    except orjson.JSONDecodeError:
        fail(f"{operation}: the reply is not JSON")
    return parsed


async def result_of(nc: Client, cli: Cli, operation: str, body: dict[str, Any]) -> Any:
    """The ``result`` of a successful request; a refusal is a one-line error (exit 2)."""
    reply = await request(nc, cli, operation, body)
    if not reply.get("ok"):
        error = reply.get("error") or {}
        fail(f"{operation}: {error.get('code', 'error')}: {error.get('message', '')}", EXIT_REFUSED)
    return reply.get("result")


def run(cli: Cli, main: Callable[[Cli], Coroutine[Any, Any, int]]) -> int:
    """Run one command's coroutine; Ctrl-C ends it quietly (exit 130)."""
    try:
        return asyncio.run(main(cli))
    except KeyboardInterrupt:
        return 130


async def until_stopped(work: Awaitable[T]) -> T | None:
    """Await ``work`` until SIGINT/SIGTERM; then None (the caller cleans up and exits 0)."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        await cancel_and_wait(task)  # again while it runs on: a cancel can be lost below us (task_stop)
        return None
    finally:
        stopper.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
