"""The ``turnstile`` command: ``run`` the service, ``send`` a message and wait for its reply, ``api`` calls."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import uuid

import orjson
from pydantic import ValidationError

from consumers.dev_credentials import dev_settings_env
from consumers.logs import configure_logging
from consumers.nats_connect import connect_options, redacted_url
from consumers.settings import Settings
from consumers.startup import EXIT_SETTINGS, StartupError

STOP_BOUND_S = 30.0  # beyond the drain timeout: flushing and closing connections
RETRY_DELAY_S = 1.0  # between failed takeovers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="turnstile", description="chat-agent sessions on NATS JetStream")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the service in the foreground (settings from TURNSTILE_* variables)")
    send = sub.add_parser("send", help="publish one inbound message and print the reply")
    send.add_argument("text")
    send.add_argument("--session", required=True, help="session id")
    send.add_argument("--platform", default="cli")
    send.add_argument("--timeout", type=float, default=30.0)
    api = sub.add_parser("api", help="call a control operation, e.g. `turnstile api session.get '{\"session_id\":\"s1\"}'`")
    api.add_argument("operation", help="<resource>.<verb>")
    api.add_argument("body", nargs="?", default="{}")
    api.add_argument("--timeout", type=float, default=10.0)
    rp = sub.add_parser("replay", help="print a session's events or checkpoints from JetStream (JSON lines)")
    rp.add_argument("what", choices=["events", "checkpoints"])
    rp.add_argument("--session", required=True)
    rp.add_argument("--from-seq", type=int, default=None, help="start at this stream sequence")
    rp.add_argument("--since", default=None, help="start at this time (ISO 8601, e.g. 2026-11-30T10:00:00+00:00)")
    mg = sub.add_parser("migrate", help="create or upgrade the database schema (TURNSTILE_DATABASE_URL) and exit")
    mg.add_argument("--allow-foreign-tables", action="store_true", help="migrate even into a database with other tables")
    args = parser.parse_args(argv)
    # A client command with no credentials configured uses its role's `make run` credentials, when present.
    client_role = {"send": f"adapter-{getattr(args, 'platform', '')}", "api": "admin", "replay": "observer"}
    if args.command in client_role:
        os.environ.update(dev_settings_env(client_role[args.command]))
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"turnstile: {invalid_settings(exc)}", file=sys.stderr)
        return EXIT_SETTINGS
    configure_logging(settings)
    if args.command == "migrate":
        return _migrate(settings, args.allow_foreign_tables)
    if args.command == "run":
        return asyncio.run(_run(settings))
    if args.command == "send":
        return asyncio.run(_send(settings, args.platform, args.session, args.text, args.timeout))
    if args.command == "replay":
        return asyncio.run(_replay(settings, args.what, args.session, args.from_seq, args.since))
    return asyncio.run(_api(settings, args.operation, args.body, args.timeout))


def _migrate(settings: Settings, allow_foreign_tables: bool) -> int:
    from core.errors import TurnstileError
    from core.store.migrate import migrate_database

    try:
        revision = asyncio.run(
            migrate_database(
                settings.database_url,
                allow_foreign_tables=allow_foreign_tables or settings.database_allow_foreign_tables,
            )
        )
    except TurnstileError as exc:
        print(f"turnstile migrate: {exc.message}", file=sys.stderr)
        return 2
    print(f"database at revision {revision}")
    return 0


def invalid_settings(exc: ValidationError) -> str:
    """One line naming each ``TURNSTILE_*`` variable the settings refused."""
    parts = []
    for error in exc.errors():
        name = "_".join(str(p) for p in error.get("loc", ())).upper()
        parts.append(f"TURNSTILE_{name}: {error.get('msg', 'invalid')}")
    return "invalid setting " + "; ".join(parts)


async def _run(settings: Settings) -> int:
    from consumers.service import TurnstileService

    service = TurnstileService(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await serve(service, stop)


def tune_gc(threshold: int) -> None:
    """Collect young garbage every ``threshold`` allocations and older generations rarely.

    A session service keeps many long-lived objects (records, transcripts, memoised
    encodings); with CPython's defaults the cyclic collector walks them over and over
    (measured: ~40% of the CPU per message at 3,000 sessions). Objects alive at start-up
    are frozen out of collection. Reference counting still frees almost everything at once.
    """
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 50, 100)


async def serve(service: object, stop: asyncio.Event) -> int:
    """Start (possibly standing by for the lease), serve until ``stop``, then stop.

    A lost ownership lease (broker away past the TTL, or a pause) does not end the
    process: the service has fenced itself; it is stopped and a fresh one competes for
    ownership again, waiting for the broker as long as it takes. Exit code 0 on a
    requested stop; a refused start (broker, database, provider, settings) logs one
    error line naming the setting and exits with ``StartupError.exit_code`` (2-5,
    ``consumers/startup.py``).
    """
    from consumers.service import TurnstileService

    assert isinstance(service, TurnstileService)
    log = logging.getLogger("turnstile")
    tune_gc(service.settings.gc_threshold)
    patient = False
    while True:
        try:
            outcome = await _serve_term(service, stop, patient, log)
        except Exception as exc:
            if isinstance(exc, StartupError) and not patient:
                log.error("%s", exc)
                await service.stop()
                return exc.exit_code
            if not patient:
                raise
            # The broker went away again while we were taking over: compete afresh.
            log.warning("taking over failed (%r); competing for ownership again", exc)
            await asyncio.gather(service.stop(), return_exceptions=True)
            try:
                await asyncio.wait_for(stop.wait(), RETRY_DELAY_S)
            except TimeoutError:
                pass
            outcome = "stopped" if stop.is_set() else "lost"
        if outcome == "stopped":
            return 0
        log.warning("ownership lost: competing for ownership again (waiting for the broker if it is away)")
        service = TurnstileService(service.settings)
        patient = True


async def _serve_term(service: object, stop: asyncio.Event, patient: bool, log: logging.Logger) -> str:
    """One term of ownership: "stopped" on a requested stop, "lost" when the lease was lost."""
    from consumers.service import TurnstileService

    assert isinstance(service, TurnstileService)
    starting = asyncio.create_task(service.start(patient=patient))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await service.stop()
        return "stopped"
    stopping.cancel()
    starting.result()
    log.info("turnstile ready on %s (prefix %s)", redacted_url(service.settings.nats_url), service.settings.prefix)
    lost = asyncio.create_task(service.lost.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for t in (lost, stopping):
        t.cancel()
    was_lost = service.lost.is_set() and not stop.is_set()
    log.info("stopping")
    try:
        await asyncio.wait_for(service.stop(), STOP_BOUND_S + service.settings.drain_timeout_s)
    except TimeoutError:
        log.warning("stopping took longer than %.0f s; going on", STOP_BOUND_S + service.settings.drain_timeout_s)
    log.info("stopped")
    return "lost" if was_lost else "stopped"


async def _send(settings: Settings, platform: str, session_id: str, text: str, timeout_s: float) -> int:
    import nats

    from schemas.subjects import Subjects

    subjects = Subjects(settings.prefix)
    nc = await nats.connect(settings.nats_url, **connect_options(settings))
    try:
        sub = await nc.subscribe(subjects.outbound(platform, session_id))
        msg_id = uuid.uuid4().hex
        body = {"id": msg_id, "session_id": session_id, "platform": platform, "text": text}
        await nc.jetstream().publish(
            subjects.inbound(platform, session_id), orjson.dumps(body), headers={"Nats-Msg-Id": msg_id}
        )
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                print("no reply within timeout", file=sys.stderr)
                return 1
            reply = await sub.next_msg(timeout=remaining)
            data = orjson.loads(reply.data)
            if data.get("reply_to") == msg_id:
                print(data.get("text", ""))
                return 0
    finally:
        await nc.close()


async def _api(settings: Settings, operation: str, body: str, timeout_s: float) -> int:
    import nats

    resource, _, verb = operation.partition(".")
    nc = await nats.connect(settings.nats_url, **connect_options(settings))
    try:
        reply = await nc.request(f"{settings.prefix}.api.{resource}.{verb}", body.encode(), timeout=timeout_s)
        print(orjson.dumps(orjson.loads(reply.data), option=orjson.OPT_INDENT_2).decode())
        return 0 if orjson.loads(reply.data).get("ok") else 2
    finally:
        await nc.close()


async def _replay(settings: Settings, what: str, session_id: str, from_seq: int | None, since: str | None) -> int:
    from datetime import datetime

    import nats

    from consumers.replay import replay
    from schemas.subjects import Subjects

    nc = await nats.connect(settings.nats_url, **connect_options(settings))
    try:
        start_time = datetime.fromisoformat(since) if since else None
        async for item in replay(
            nc.jetstream(), Subjects(settings.prefix), session_id, what,  # type: ignore[arg-type]
            start_seq=from_seq, start_time=start_time,
        ):
            print(orjson.dumps({"seq": item.seq, "subject": item.subject, "data": item.data}).decode())
        return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    raise SystemExit(main())
