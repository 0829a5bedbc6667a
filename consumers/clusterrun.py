"""``make cluster``: a local scale-out demo — a 3-node nats-server JetStream cluster, PostgreSQL and two workers.

The cluster (consumers/nats_cluster.py) runs with the root nats.conf's roles and the development
credentials of ``make run`` (var/dev-credentials); its stores live under var/nats-cluster
(``TURNSTILE_DEV_STORE_DIR`` moves them) and its client ports are 4341-4343
(``TURNSTILE_CLUSTER_NATS_PORT`` sets the first). The database is ``TURNSTILE_DATABASE_URL``
(default: the ``turnstile_cluster`` database on 127.0.0.1:5432), created when missing. Two
``turnstile run`` workers start in the foreground, each connected to its own node, their log
lines prefixed ``[w1]``/``[w2]``. Until sessions are partitioned among workers, one owns every
session and the other stands by for the ownership lease; with SQLite the second always stands by
(docs/protocol.md, "Scaling out"). Ctrl-C (or SIGTERM) stops the workers, then the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from sqlalchemy.engine import make_url

from consumers.dev_credentials import DEV_CREDENTIALS_DIR, ensure_dev_credentials
from consumers.logs import configure_logging
from consumers.nats_cluster import NatsCluster, NatsClusterError
from consumers.nats_server import port_in_use
from consumers.settings import Settings
from schemas.nats_roles import dev_roles, password_variable, service_role
from schemas.subjects import Subjects

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/turnstile_cluster"
WORKERS = 2
NODES = 3
WORKER_STOP_BOUND_S = 60.0

log = logging.getLogger("turnstile.clusterrun")


async def ensure_postgres_database(url: str) -> None:
    """Create the database of a PostgreSQL URL when it does not exist yet (connecting to ``postgres``)."""
    import asyncpg  # type: ignore[import-untyped]

    parsed = make_url(url)
    if not parsed.drivername.startswith("postgresql") or not parsed.database:
        return
    admin = parsed.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", parsed.database):
            quoted = parsed.database.replace('"', '""')
            await conn.execute(f'CREATE DATABASE "{quoted}"')
            log.info("created the database %s", parsed.database)
    finally:
        await conn.close()


async def _pump(name: str, stream: asyncio.StreamReader) -> None:
    while line := await stream.readline():
        sys.stdout.write(f"[{name}] {line.decode(errors='replace')}")
        sys.stdout.flush()


async def _start_worker(index: int, env: dict[str, str]) -> tuple[asyncio.subprocess.Process, asyncio.Task[None]]:
    # Own session: Ctrl-C reaches this process only, which then stops the workers before the cluster.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "consumers.cli", "run", cwd=ROOT, env=env, start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    return proc, asyncio.create_task(_pump(f"w{index + 1}", proc.stdout))


async def _stop_worker(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), WORKER_STOP_BOUND_S)
        except TimeoutError:
            log.warning("worker %d did not stop within %.0f s: killing it", proc.pid, WORKER_STOP_BOUND_S)
            proc.kill()
            await proc.wait()


def _worker_env(index: int, node_url: str, passwords: dict[str, str], database_url: str) -> dict[str, str]:
    role = service_role(Subjects())
    env = dict(
        os.environ, TURNSTILE_NATS_URL=node_url, TURNSTILE_DATABASE_URL=database_url,
        TURNSTILE_NATS_USER=role.user, TURNSTILE_NATS_PASSWORD=passwords[password_variable(role.user)],
        TURNSTILE_NATS_INBOX_PREFIX=role.inbox_prefix,
    )
    env.setdefault("TURNSTILE_SCRIPTED_DIRECTIVES", "true")  # development mode, as `make run`
    env.setdefault("TURNSTILE_STREAM_REPLICAS", str(NODES))  # every stream on every node: one may die
    env.setdefault("TURNSTILE_PARTITIONS", "16")  # both workers serve a share (docs/protocol.md#partitioned-ownership)
    http_port = int(os.environ.get("TURNSTILE_HTTP_PORT", "4381"))
    env["TURNSTILE_HTTP_PORT"] = str(http_port + index if http_port else 0)
    return env


async def _main() -> int:
    configure_logging(Settings())
    database_url = os.environ.get("TURNSTILE_DATABASE_URL", DEFAULT_DATABASE_URL)
    if Settings().prefix != Subjects().prefix:
        print(f"nats.conf's roles are written for the prefix {Subjects().prefix!r}: unset TURNSTILE_PREFIX.",
              file=sys.stderr)
        return 2
    base_port = int(os.environ.get("TURNSTILE_CLUSTER_NATS_PORT", "4341"))
    taken = [port for port in range(base_port, base_port + NODES) if port_in_use(port)]
    if taken:
        print(f"port(s) {taken} already in use: stop whatever listens there or pick other ports with "
              f"TURNSTILE_CLUSTER_NATS_PORT=<first port>.", file=sys.stderr)
        return 2
    try:
        await ensure_postgres_database(database_url)
    except (OSError, Exception) as exc:  # asyncpg raises its own tree; any failure is one line
        print(f"cannot prepare the database {make_url(database_url).render_as_string()} "
              f"(TURNSTILE_DATABASE_URL): {exc}", file=sys.stderr)
        return 2
    if make_url(database_url).drivername.startswith("sqlite"):
        log.warning("SQLite is single-process: the second worker stands by (use PostgreSQL to share the sessions)")
    passwords = ensure_dev_credentials(dev_roles(Subjects()), ROOT / DEV_CREDENTIALS_DIR)
    store = Path(os.environ.get("TURNSTILE_DEV_STORE_DIR", str(ROOT / "var" / "nats-cluster")))
    cluster = NatsCluster(store_root=store, size=NODES, config=ROOT / "nats.conf", env=passwords, base_port=base_port)
    try:
        await cluster.start()
    except NatsClusterError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    log.info("nats cluster %s (stores under %s)", cluster.servers_url, store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    workers: list[tuple[asyncio.subprocess.Process, asyncio.Task[None]]] = []
    code = 0
    try:
        for i in range(WORKERS):
            workers.append(await _start_worker(i, _worker_env(i, cluster.urls[i % NODES], passwords, database_url)))
        log.info("publish to %s.inbound.<platform>.<session> on any node (Ctrl-C stops)", Subjects().prefix)
        stopping = asyncio.create_task(stop.wait())
        exits = [asyncio.create_task(proc.wait()) for proc, _ in workers]
        done, _ = await asyncio.wait({stopping, *exits}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stopping, *exits):
            task.cancel()
        if stopping not in done:
            ended = next(proc for proc, _ in workers if proc.returncode is not None)
            code = ended.returncode or 0
            log.error("worker %d exited (code %s): stopping the demo", ended.pid, ended.returncode)
    finally:
        await asyncio.gather(*(_stop_worker(proc) for proc, _ in workers))
        await asyncio.gather(*(pump for _, pump in workers), return_exceptions=True)
        await cluster.stop()
        log.info("cluster stopped")
    return code


def main() -> None:
    raise SystemExit(asyncio.run(_main()))


if __name__ == "__main__":
    main()
