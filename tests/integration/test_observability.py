"""/metrics, /healthz and /readyz on the operator HTTP endpoint of a real service over a real nats-server."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(service: TurnstileService) -> Samples:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{service.http.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_after_a_turn_with_a_tool_call_and_a_dead_letter(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"m-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    script = '/usage 7 3\n/tool knowledge_search {"query": "q"}\n/tool no_such_tool {}\n/say done'
    await publish_inbound(nc, subjects, inbound(sid, script))
    await nc.jetstream().publish(subjects.inbound("cli", sid), b"{not json")
    await wait_for(lambda: replies.messages, timeout_s=20, what="the reply")

    async def counted() -> bool:
        s = await scrape(service)
        return value(s, "turnstile_turns_total", outcome="replied") >= 1 and value(
            s, "turnstile_inbound_dead_lettered_total", code="bad_json"
        ) >= 1

    await wait_for(counted, timeout_s=10, what="the turn and the dead letter in /metrics")
    s = await scrape(service)
    assert value(s, "turnstile_inbound_received_total") >= 2
    assert value(s, "turnstile_inbound_staged_total") >= 1
    assert value(s, "turnstile_tool_calls_total", tool="knowledge_search", outcome="ok") == 1
    assert value(s, "turnstile_tool_calls_total", tool="(unknown)", outcome="refused") == 1
    assert value(s, "turnstile_model_tokens_total", direction="input") >= 7
    assert value(s, "turnstile_model_tokens_total", direction="output") >= 3
    assert value(s, "turnstile_turn_duration_seconds_count") >= 1
    assert value(s, "turnstile_reply_latency_seconds_count") >= 1
    assert value(s, "turnstile_checkpoint_bytes_count") >= 3
    assert value(s, "turnstile_checkpoint_bytes_sum") > 0
    assert value(s, "turnstile_checkpoint_publish_seconds_count") >= 3
    assert value(s, "turnstile_active_actors") >= 1
    assert value(s, "turnstile_session_opens_total", journal="skipped") >= 1  # created here: nothing to read
    assert ("turnstile_mailbox_depth", ()) in s
    assert ("turnstile_consumer_pending", ()) in s and ("turnstile_consumer_redelivered", ()) in s
    assert value(s, "turnstile_ownership", state="owner") == 1
    assert value(s, "turnstile_ownership", state="standby") == 0
    # The process's own figures, as an operator watching memory and the collector over hours reads them.
    assert value(s, "process_resident_memory_bytes") > 10_000_000
    assert value(s, "process_cpu_seconds_total") > 0
    assert value(s, "process_open_fds") > 0
    assert all(("python_gc_collections_total", (("generation", g),)) in s for g in ("0", "1", "2"))
    assert value(s, "python_gc_collections_total", generation="0") > 0


async def test_healthz_and_readyz_for_the_owner_and_a_standby(service: TurnstileService, settings: Settings) -> None:
    async with httpx.AsyncClient() as client:
        health = await client.get(f"{service.http.url}/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok", "role": "owner"}
        ready = await client.get(f"{service.http.url}/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True, "role": "owner"}

        standby = TurnstileService(settings)  # same prefix: waits for the lease
        starting = asyncio.create_task(standby.start())
        try:
            await wait_for(lambda: standby.role == "standby", timeout_s=20, what="the standby")
            ready = await client.get(f"{standby.http.url}/readyz")
            assert ready.status_code == 200 and ready.json() == {"ready": True, "role": "standby"}
            metrics = await scrape(standby)
            assert value(metrics, "turnstile_ownership", state="standby") == 1
            # The owner's registry is its own: the standby's scrape did not touch it.
            assert value(await scrape(service), "turnstile_ownership", state="owner") == 1
        finally:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await standby.stop()

        await service.stop()  # stopping: no longer ready (the endpoint closes at the end of stop)
        assert service.role == "stopping"


async def test_readyz_is_503_with_its_reasons_before_the_broker_is_reached(settings: Settings) -> None:
    never = TurnstileService(settings.model_copy(update={"nats_url": "nats://127.0.0.1:1", "connect_timeout_s": 30}))
    starting = asyncio.create_task(never.start())
    try:
        await wait_for(lambda: never.http.port is not None, timeout_s=10, what="the HTTP endpoint")
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"{never.http.url}/readyz")
            health = await client.get(f"{never.http.url}/healthz")
        assert ready.status_code == 503
        assert ready.json() == {"ready": False, "role": "starting", "reasons": ["role is starting", "broker not connected"]}
        assert health.status_code == 200 and health.json()["role"] == "starting"
    finally:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await never.stop()
