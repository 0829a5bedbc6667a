"""A backlog over many sessions drains completely under a small admission bound (TURNSTILE_MAX_SESSIONS_WITH_WORK)."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from consumers.admission import WorkAdmission
from consumers.service import TurnstileService
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

SESSIONS = 40
PER_SESSION = 3
BOUND = 2


async def test_a_backlog_over_many_sessions_drains_in_order_with_few_sessions_holding_work(
    settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    most = 0
    real_working = WorkAdmission.working

    def counted(self: WorkAdmission, session_id: str) -> None:
        nonlocal most
        real_working(self, session_id)
        most = max(most, len(self))

    monkeypatch.setattr(WorkAdmission, "working", counted)
    await ensure_streams(nc.jetstream(), settings, subjects)
    run = uuid.uuid4().hex[:6]
    sessions = [f"adm-{run}-{i}" for i in range(SESSIONS)]
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.cli.>")
    for k in range(PER_SESSION):  # the whole backlog is in the stream before the service starts
        for sid in sessions:
            await publish_inbound(nc, subjects, inbound(sid, f"n{k}"))
    service = TurnstileService(settings.model_copy(update={
        "max_sessions_with_work": BOUND, "max_loaded_sessions": BOUND, "max_inbound_in_flight": 16, "fetch_batch": 8,
    }))
    await service.start()
    try:
        total = SESSIONS * PER_SESSION
        await wait_for(lambda: len(replies.messages) >= total, timeout_s=120, what=f"{total} replies")
        by_session: dict[str, list[str]] = {}
        for r in replies.json():
            by_session.setdefault(r["session_id"], []).append(r["text"])
        for sid in sessions:
            assert by_session[sid] == [f"echo: n{k}" for k in range(PER_SESSION)]
        assert service.actors is not None
        admission = service.actors.admission
        assert admission.waited_out == 0  # the bound never had to give way: no stall
        assert most <= BOUND
        await wait_for(lambda: len(admission) == 0, what="no session left holding work")
    finally:
        await service.stop()
