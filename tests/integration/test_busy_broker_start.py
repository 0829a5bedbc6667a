"""A start while the broker cannot answer now (a cluster electing stream leaders, as when a second worker
starts on a loaded 3-node cluster: it exited once with ``TimeoutError: nats: timeout``) waits and
starts; an answer that is a refusal still ends the start at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import nats.errors
import orjson
import pytest
from nats.aio.client import Client
from nats.js.errors import BadRequestError

import consumers.connect
import consumers.service
from consumers.connect import patiently
from consumers.lease import OwnershipLease
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import wait_for

pytestmark = pytest.mark.timeout(60)


def _not_now_first(times: int, step: Callable[..., Awaitable[object]]) -> tuple[Callable[..., Awaitable[object]], list[int]]:
    calls = [0]

    async def flaky(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] <= times:
            raise nats.errors.TimeoutError
        return await step(*args, **kwargs)

    return flaky, calls


async def test_a_standby_whose_lease_request_times_out_asks_again(nc: Client) -> None:
    lease = OwnershipLease(nc.jetstream(), f"L{uuid.uuid4().hex[:8]}", ttl_s=2.0, owner_id="patient")
    kv = await lease._bucket_kv()
    flaky, calls = _not_now_first(2, kv.create)
    kv.create = flaky  # type: ignore[method-assign]
    await asyncio.wait_for(lease.acquire(on_lost=lambda: None, poll_s=0.05), 10)
    assert lease.held and calls[0] == 3
    assert await lease.holder() == "patient"
    await lease.release()


async def test_a_start_whose_stream_setup_times_out_retries_and_serves(
    settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky, calls = _not_now_first(2, consumers.service.ensure_streams)
    monkeypatch.setattr(consumers.service, "ensure_streams", flaky)
    svc = TurnstileService(settings)
    await svc.start()
    try:
        assert calls[0] == 3
        reply = await wait_for(
            lambda: nc.request(subjects.api("session", "list"), b"{}", timeout=2), what="the control API"
        )
        assert orjson.loads(reply.data)["ok"] is True
    finally:
        await svc.stop()


async def test_a_refusal_is_an_answer_and_not_retried() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise BadRequestError(code=400, description="stream name already in use with a different configuration")

    with pytest.raises(BadRequestError):
        await patiently(refused, "setting up the streams", timeout_s=30)
    assert calls == 1


async def test_a_broker_that_never_answers_ends_the_start_naming_the_step_and_the_setting() -> None:
    async def silent() -> None:
        raise nats.errors.TimeoutError

    with pytest.raises(consumers.connect.BrokerUnreachable, match=r"setting up the streams.*TURNSTILE_CONNECT_TIMEOUT_S"):
        await patiently(silent, "setting up the streams", timeout_s=0.5)
