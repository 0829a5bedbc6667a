"""Exactly-once answers whatever the downtime: a service killed right after publishing a reply and
kept down longer than the outbound stream's duplicate window never publishes that reply again (MQ-8)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from sqlalchemy import select

from consumers import message_finisher as finisher
from consumers.nats_flush import flush
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.store.db import create_db_engine
from core.store.inbox import STAGED, inbox
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.service_process import ServiceProcess

DUPLICATE_WINDOW_S = 2.0
KILL_ATTEMPTS = 5


async def stored_replies(nc: Client, subjects: Subjects, sid: str) -> list[dict[str, Any]]:
    """Every reply the outbound stream holds for the session (cli platform), in stream order."""
    js = nc.jetstream()
    subject = subjects.outbound("cli", sid)
    found: list[dict[str, Any]] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(subjects.outbound_stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return found
        found.append(orjson.loads(msg.data or b"{}"))
        seq = int(msg.seq or 0) + 1


async def inbox_status(settings: Settings, message_id: str) -> str | None:
    engine = create_db_engine(settings.database_url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(select(inbox.c.status).where(inbox.c.message_id == message_id))).first()
    finally:
        await engine.dispose()
    return None if row is None else str(row[0])


class KillOnReply:
    """SIGKILLs the service the moment the first reply of a session is seen on its outbound subject."""

    def __init__(self, service: ServiceProcess) -> None:
        self.service = service
        self.seen: list[Msg] = []

    async def attach(self, nc: Client, subject: str) -> KillOnReply:
        async def _cb(msg: Msg) -> None:
            if not self.seen and self.service.proc is not None and self.service.proc.returncode is None:
                os.kill(self.service.proc.pid, signal.SIGKILL)  # now, in the callback: before the done mark
            self.seen.append(msg)

        await nc.subscribe(subject, cb=_cb)
        await flush(nc)
        return self


async def _killed_before_done_mark(
    service: ServiceProcess, nc: Client, subjects: Subjects, text: str
) -> tuple[str, dict[str, Any]]:
    """A session whose reply was published and whose message the inbox still holds as staged."""
    for _ in range(KILL_ATTEMPTS):
        sid = f"once-{uuid.uuid4().hex[:6]}"
        killer = await KillOnReply(service).attach(nc, subjects.outbound("cli", sid))
        await service.start()
        await service.wait_ready(nc)
        body = inbound(sid, text)
        await publish_inbound(nc, subjects, body)
        await wait_for(lambda killer=killer: killer.seen, timeout_s=30, what="the reply")
        assert service.proc is not None
        await service.proc.wait()
        if await inbox_status(service.settings, body["id"]) == STAGED:
            return sid, body
    pytest.fail(f"the done mark landed before SIGKILL in {KILL_ATTEMPTS} attempts")


async def _outlive_the_duplicate_window() -> None:
    # The one inherently time-based wait: the broker forgets Nats-Msg-Ids after the window.
    deadline = time.monotonic() + DUPLICATE_WINDOW_S + 0.5
    await wait_for(lambda: time.monotonic() > deadline, timeout_s=DUPLICATE_WINDOW_S + 5, what="the window to pass")


@pytest.fixture
def windowed(monkeypatch: pytest.MonkeyPatch, settings: Settings, tmp_path: Path) -> ServiceProcess:
    monkeypatch.setenv("TURNSTILE_DUPLICATE_WINDOW_S", str(DUPLICATE_WINDOW_S))
    return ServiceProcess(settings, tmp_path / "service.log")


async def _answer_after_restart(service: ServiceProcess, nc: Client, subjects: Subjects, sid: str) -> None:
    """Restart, then wait until a later message of the session is answered: the actor served the
    recovered message first, and the outbound stream stores replies in the order they were sent."""
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await service.start()
    await service.wait_ready(nc)
    await publish_inbound(nc, subjects, inbound(sid, "and later"))
    await wait_for(lambda: "echo: and later" in [r["text"] for r in replies.json()], timeout_s=60,
                   what="the later message's answer")


@pytest.mark.rule("MQ-8")
@pytest.mark.timeout(180)
async def test_a_reply_is_not_published_again_after_a_restart_later_than_the_duplicate_window(
    windowed: ServiceProcess, nc: Client, subjects: Subjects
) -> None:
    try:
        sid, body = await _killed_before_done_mark(windowed, nc, subjects, "answer me once")
        await _outlive_the_duplicate_window()
        await _answer_after_restart(windowed, nc, subjects, sid)
        stored = await stored_replies(nc, subjects, sid)
        assert [r["text"] for r in stored] == ["echo: answer me once", "echo: and later"]
        assert await inbox_status(windowed.settings, body["id"]) == "done"
    finally:
        await windowed.stop()


@pytest.mark.rule("MQ-8")
@pytest.mark.timeout(180)
async def test_a_turn_killed_between_its_replies_publishes_only_the_missing_one_after_the_window(
    windowed: ServiceProcess, nc: Client, subjects: Subjects
) -> None:
    try:
        sid, _ = await _killed_before_done_mark(windowed, nc, subjects, '/tool reply {"text": "first"}\n/say second')
        # Killed between the two replies: when the second had been stored already, remove it, so
        # the stream holds exactly what a kill between the two publishes leaves behind.
        js = nc.jetstream()
        subject = subjects.outbound("cli", sid)
        last = await js.get_last_msg(subjects.outbound_stream, subject)
        if orjson.loads(last.data or b"{}")["text"] == "second":
            await js.delete_msg(subjects.outbound_stream, int(last.seq or 0))
        assert [r["text"] for r in await stored_replies(nc, subjects, sid)] == ["first"]
        await _outlive_the_duplicate_window()
        await _answer_after_restart(windowed, nc, subjects, sid)
        stored = await stored_replies(nc, subjects, sid)
        assert [r["text"] for r in stored] == ["first", "second", "echo: and later"]
        ids = Counter((r["turn_id"], r["seq"]) for r in stored)
        assert set(ids.values()) == {1}
    finally:
        await windowed.stop()


@pytest.mark.rule("MQ-8")
@pytest.mark.timeout(60)
async def test_the_finishers_retry_later_than_the_duplicate_window_does_not_store_a_reply_twice(
    settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The acks of a turn's publishes "do not come" once (the reply was stored all the same); the
    # finisher's retry runs only after the duplicate window, so Nats-Msg-Id cannot catch it.
    monkeypatch.setattr(finisher, "RETRY_BASE_DELAY_S", DUPLICATE_WINDOW_S + 0.5)
    svc = TurnstileService(settings.model_copy(update={"duplicate_window_s": DUPLICATE_WINDOW_S}))
    await svc.start()
    try:
        assert svc.publisher is not None and svc.inbox is not None
        publisher, box = svc.publisher, svc.inbox
        outbound = publisher.outbound
        failed: list[str] = []

        async def first_ack_lost(platform: str, reply: Any) -> asyncio.Future[Any]:
            acked = await outbound(platform, reply)  # sent and stored all the same
            if failed:
                return acked
            failed.append(reply.session_id)
            lost: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            lost.cancel()  # what ``settle`` leaves of an ack that did not come in time
            return lost

        monkeypatch.setattr(publisher, "outbound", first_ack_lost)
        sid = f"retry-{uuid.uuid4().hex[:6]}"
        body = inbound(sid, "answer me once")
        await publish_inbound(nc, subjects, body)
        async def finished() -> bool:
            return await box.status_of("cli", body["id"]) == "done"

        await wait_for(finished, timeout_s=30, what="the done mark after the retry")
        assert failed
        assert [r["text"] for r in await stored_replies(nc, subjects, sid)] == ["echo: answer me once"]
    finally:
        await svc.stop()
