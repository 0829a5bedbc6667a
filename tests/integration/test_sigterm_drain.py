"""10.3: SIGTERM under load drains within TURNSTILE_DRAIN_TIMEOUT_S and hands over at once (MQ-2, MQ-8)."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.lifecycle_procs import ConfiguredProcess, outbound_count, stored_replies_by_session

DRAIN_S = 2.0
EXIT_BOUND_S = 6.0  # beyond the drain timeout: stop fetching, flush, release, close connections
SHORT_SESSIONS = 10
LONG_SESSIONS = 3


@pytest.mark.rule("MQ-8")
@pytest.mark.timeout(150)
async def test_sigterm_under_load_hands_over_within_the_drain_timeout_and_everything_is_answered_once(
    settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects
) -> None:
    env = {"TURNSTILE_DRAIN_TIMEOUT_S": str(DRAIN_S)}
    owner = ConfiguredProcess(settings, tmp_path / "owner.log", **env)
    standby = ConfiguredProcess(settings, tmp_path / "standby.log", **env)
    replies = await Collector().attach(nc, subjects.outbound_all)
    events = await Collector().attach(nc, subjects.events_all)
    published: dict[str, list[str]] = {}

    async def send(sid: str, text: str) -> None:
        body = inbound(sid, text)
        published.setdefault(sid, []).append(body["id"])
        await publish_inbound(nc, subjects, body)

    try:
        await owner.start()
        await owner.wait_ready(nc)
        await standby.start()
        await wait_for(lambda: "standing by" in standby.log_text(), timeout_s=30, what="the standby")
        # Turns longer than the drain timeout (handed back) and a queue of short ones per session.
        for i in range(LONG_SESSIONS):
            await send(f"long-{i}-{uuid.uuid4().hex[:4]}", "/stall 6\nlong")
        for n in range(4):
            for i in range(SHORT_SESSIONS):
                await send(f"short-{i}", f"/stall 0.2\nshort {n}")
        for sid in [s for s in published if s.startswith("long")]:
            await send(sid, "after long")
        total = sum(len(ids) for ids in published.values())
        started = lambda: sum(e["type"] == "turn.started" for e in events.json()) >= LONG_SESSIONS + 5  # noqa: E731
        await wait_for(started, timeout_s=30, what="turns running")
        await wait_for(lambda: len(replies.messages) >= 5, timeout_s=30, what="some replies")

        assert owner.proc is not None
        owner.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = await owner.wait_exit(timeout_s=60)
        took = time.monotonic() - t0
        assert code == 0, owner.log_text()[-2000:]
        assert took < DRAIN_S + EXIT_BOUND_S, f"exit took {took:.1f} s"
        assert "draining" in owner.log_text()

        await wait_for(lambda: _count_at_least(nc, subjects, total),
                       timeout_s=90, what="the standby to answer everything")
        assert await stored_replies_by_session(nc, subjects) == published
        assert await outbound_count(nc, subjects) == total
    finally:
        await standby.stop()
        await owner.stop()


async def _count_at_least(nc: Client, subjects: Subjects, n: int) -> bool:
    return await outbound_count(nc, subjects) >= n
