"""SIGKILL while lazy writes wait for company (``TURNSTILE_LAZY_WRITE_WAIT_S``): the inbox mark of an
answered message is not written yet; the restarted service answers nothing twice and counts the
turn's tokens once (MQ-8, SM-15)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from core.store.db import create_db_engine
from core.store.inbox import STAGED
from schemas.subjects import Subjects
from tests.inbox_rows import inbox_status_in_table
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.service_process import ServiceProcess


@pytest.fixture
async def service_process(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    # Lazy writes wait a long time for company: nothing else writes after the turn's end, so the
    # answered message's inbox mark is still waiting when the process is killed.
    proc = ServiceProcess(settings, tmp_path / "service.log", extra_env={"TURNSTILE_LAZY_WRITE_WAIT_S": "600"})
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.rule("MQ-8", "SM-15")
@pytest.mark.timeout(120)
async def test_a_service_killed_before_its_lazy_inbox_mark_answers_once_and_counts_tokens_once(
    service_process: ServiceProcess, nc: Client, subjects: Subjects, settings: Settings
) -> None:
    sid = f"lazy-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await service_process.start()
    await service_process.wait_ready(nc)
    body = inbound(sid, "/usage 10 3\n/say answered once")
    await publish_inbound(nc, subjects, body)
    await wait_for(lambda: replies.messages, timeout_s=30, what="the reply")

    async def tokens() -> dict[str, int] | None:
        got = await api(nc, subjects, "session", "get", {"session_id": sid})
        value = got["result"]["tokens"] if got.get("ok") else None
        return value if value and value.get("input") else None

    # The turn's end (with its tokens) is written eagerly; the inbox mark waits for company.
    assert await wait_for(tokens, what="the turn's tokens") == {"input": 10, "output": 3}
    db = create_db_engine(settings.database_url)
    try:
        assert await inbox_status_in_table(db, "cli", body["id"]) == STAGED
        await service_process.kill()
        service_process.extra_env.pop("TURNSTILE_LAZY_WRITE_WAIT_S")  # the default from here on
        await service_process.start()
        await service_process.wait_ready(nc)

        # The staged message is served again from the inbox: its event is answered (KS-14) and the
        # outbound stream holds the reply, so nothing is published; the message is marked done.
        async def marked() -> bool:
            return await inbox_status_in_table(db, "cli", body["id"]) not in (STAGED, None)

        await wait_for(marked, timeout_s=30, what="the inbox mark after the restart")
    finally:
        await db.dispose()
    assert [r["text"] for r in replies.json()] == ["answered once"]
    js = nc.jetstream()
    info = await js.stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 1
    assert await tokens() == {"input": 10, "output": 3}
