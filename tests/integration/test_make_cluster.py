"""`make cluster`: a 3-node NATS cluster, PostgreSQL and two workers; a hand-published message is
answered; Ctrl-C stops the workers and every nats-server (no orphan processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from consumers.nats_server import free_port, port_in_use
from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]


def three_free_ports() -> int:
    """The first of three consecutive free ports (the cluster's client ports)."""
    for _ in range(50):
        first = free_port()
        if first + 2 < 65536 and not any(port_in_use(first + i) for i in range(3)):
            return first
    raise AssertionError("no three consecutive free ports")


async def drop_database(url: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    finally:
        await conn.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children_of(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc), so the test can check none outlives the demo."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.timeout(180)
async def test_make_cluster_answers_a_message_and_stops_everything_on_ctrl_c(
    tmp_path: Path, postgres_url: str, request: pytest.FixtureRequest
) -> None:
    port = three_free_ports()
    made_url = postgres_url + "_made"  # a database that does not exist yet: `make cluster` creates it
    request.addfinalizer(lambda: asyncio.run(drop_database(made_url)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
    env.update(
        TURNSTILE_CLUSTER_NATS_PORT=str(port),
        TURNSTILE_DEV_STORE_DIR=str(tmp_path / "nats-cluster"),
        TURNSTILE_DATABASE_URL=made_url,
        TURNSTILE_HTTP_PORT="0",
    )
    log = tmp_path / "make-cluster.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            "make", "--no-print-directory", "cluster", cwd=ROOT, env=env, stdout=out, stderr=out,
            start_new_session=True,
        )
    descendants: set[int] = set()
    try:
        for marker, what in (("ready on", "a worker to be ready"), ("standing by", "the other worker to stand by")):
            try:
                await wait_for(lambda m=marker: m in log.read_text() or proc.returncode is not None,
                               timeout_s=120, what=what)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; log: {log.read_text()[-3000:]}") from None
            assert proc.returncode is None, log.read_text()[-3000:]
        descendants = children_of(proc.pid)
        sid = f"hand-{uuid.uuid4().hex[:6]}"
        for node in range(3):  # any node of the cluster takes the message and carries the answer back
            send_env = dict(env, TURNSTILE_NATS_URL=f"nats://127.0.0.1:{port + node}")
            sender = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "consumers.cli", "send", "--session", sid, f"hello node {node}",
                cwd=ROOT, env=send_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await asyncio.wait_for(sender.communicate(), 60)
            assert sender.returncode == 0, stderr.decode()
            assert stdout.decode().strip() == f"echo: hello node {node}"
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches make and its children
            await asyncio.wait_for(proc.wait(), 90)
    for node in range(3):
        await wait_for(lambda n=node: not port_in_use(port + n), timeout_s=15, what=f"nats-server {node} to stop")
    assert len(descendants) >= 6, descendants  # python, two workers, three nats-servers
    await wait_for(lambda: not any(alive(pid) for pid in descendants), timeout_s=15, what="no orphan process")
    text = log.read_text()
    assert "cluster stopped" in text, text[-3000:]
    assert "created the database" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
