"""10.4 and 10.8: broker outages at run time and at start (MQ-1, MQ-2)."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from consumers.nats_server import NatsServer, free_port
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.lifecycle_procs import ConfiguredProcess, outbound_count

PAUSE_S = 12.0


async def _published(nc: Client, subjects: Subjects, body: dict[str, object]) -> bool:
    try:
        await publish_inbound(nc, subjects, body)
    except Exception:
        return False
    return True


@pytest.mark.timeout(150)
@pytest.mark.parametrize("outage_s", [3.0, 8.0, 20.0])
async def test_the_only_process_survives_a_broker_outage_and_answers_afterwards_once(
    outage_s: float, settings: Settings, nats_server: NatsServer, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    proc = ConfiguredProcess(settings, tmp_path / "service.log")
    sid = f"outage-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    try:
        await proc.start()
        await proc.wait_ready(nc)
        await publish_inbound(nc, subjects, inbound(sid, "before"))
        await wait_for(lambda: replies.messages, timeout_s=30, what="the reply before the outage")

        await nats_server.stop()
        down_at = time.monotonic()
        # The outage lasts outage_s; the lease (TTL 1.5 s) is lost in all three cases.
        await wait_for(
            lambda: "fenced" in proc.log_text() or (proc.proc is not None and proc.proc.returncode is not None),
            timeout_s=outage_s + 20, what="the process to fence itself",
        )
        await wait_for(lambda: time.monotonic() - down_at >= outage_s, timeout_s=outage_s + 5, what="the outage")
        assert proc.proc is not None and proc.proc.returncode is None, proc.log_text()[-2000:]
        await nats_server.start()  # same port and store

        after = [inbound(sid, f"after {i}") for i in range(3)]
        await wait_for(lambda: _published(nc, subjects, after[0]), timeout_s=30, what="publishing after the outage")
        for body in after[1:]:
            await publish_inbound(nc, subjects, body)
        await wait_for(lambda: len(replies.messages) >= 4, timeout_s=60, what="the replies after the outage")
        assert [r["text"] for r in replies.json()] == ["echo: before", "echo: after 0", "echo: after 1", "echo: after 2"]
        assert await outbound_count(nc, subjects) == 4
        assert proc.proc.returncode is None
        assert "competing for ownership again" in proc.log_text()
    finally:
        await proc.stop()


@pytest.mark.timeout(150)
async def test_the_only_process_survives_a_paused_broker_and_answers_afterwards_once(
    settings: Settings, nats_server: NatsServer, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    proc = ConfiguredProcess(settings, tmp_path / "service.log")
    sid = f"pause-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    assert nats_server.process is not None
    try:
        await proc.start()
        await proc.wait_ready(nc)
        await publish_inbound(nc, subjects, inbound(sid, "before"))
        await wait_for(lambda: replies.messages, timeout_s=30, what="the reply before the pause")

        nats_server.process.send_signal(signal.SIGSTOP)  # connections stay open, nothing answers
        paused_at = time.monotonic()
        try:
            await wait_for(
                lambda: "fenced" in proc.log_text() or (proc.proc is not None and proc.proc.returncode is not None),
                timeout_s=30, what="the process to fence itself",
            )
            await wait_for(lambda: time.monotonic() - paused_at >= PAUSE_S, timeout_s=PAUSE_S + 5, what="the pause")
        finally:
            nats_server.process.send_signal(signal.SIGCONT)
        assert proc.proc is not None and proc.proc.returncode is None, proc.log_text()[-2000:]

        after = [inbound(sid, f"after {i}") for i in range(3)]
        await wait_for(lambda: _published(nc, subjects, after[0]), timeout_s=30, what="publishing after the pause")
        for body in after[1:]:
            await publish_inbound(nc, subjects, body)
        await wait_for(lambda: len(replies.messages) >= 4, timeout_s=60, what="the replies after the pause")
        assert [r["text"] for r in replies.json()] == ["echo: before", "echo: after 0", "echo: after 1", "echo: after 2"]
        assert await outbound_count(nc, subjects) == 4
        assert proc.proc.returncode is None
    finally:
        await proc.stop()


@pytest.mark.timeout(60)
async def test_start_without_a_broker_exits_with_one_clear_line_after_bounded_retries(tmp_path: Path) -> None:
    settings = Settings(
        nats_url=f"nats://127.0.0.1:{free_port()}",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
    )
    proc = ConfiguredProcess(settings, tmp_path / "service.log", TURNSTILE_CONNECT_TIMEOUT_S="3")
    await proc.start()
    code = await proc.wait_exit(timeout_s=40)
    log = proc.log_text()
    assert code == 4, log[-2000:]
    assert "not reachable" in log  # each retry is logged
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "TURNSTILE_NATS_URL" in errors[0], log[-2000:]
    assert "Traceback" not in log


@pytest.mark.timeout(90)
async def test_start_before_the_broker_connects_once_it_comes_up(tmp_path: Path) -> None:
    server = NatsServer(store_dir=tmp_path / "nats", port=free_port())
    settings = Settings(
        nats_url=server.url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
    )
    subjects = Subjects(settings.prefix)
    proc = ConfiguredProcess(settings, tmp_path / "service.log")
    try:
        await proc.start()
        await wait_for(lambda: "not reachable" in proc.log_text(), timeout_s=30, what="a logged retry")
        await server.start()
        nc = await nats.connect(server.url)
        try:
            await proc.wait_ready(nc)
            sid = f"late-{uuid.uuid4().hex[:6]}"
            replies = await Collector().attach(nc, subjects.outbound("cli", sid))
            await publish_inbound(nc, subjects, inbound(sid, "hello"))
            await wait_for(lambda: replies.messages, timeout_s=30, what="the reply")
            assert [r["text"] for r in replies.json()] == ["echo: hello"]
        finally:
            await nc.close()
    finally:
        await proc.stop()
        await server.stop()
