"""Secrets (the provider's API key, the NATS password) never reach logs, the wire, the database or errors."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from pydantic import SecretStr

from consumers.nats_connect import connect_options
from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.unit.engine.fake_openai import FakeOpenAI

NATS_PASSWORD = "natspw" + uuid.uuid4().hex
API_KEY = "sk-canary-" + uuid.uuid4().hex


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[NatsServer]:
    config = tmp_path / "auth.conf"
    config.write_text(f'jetstream {{}}\nauthorization {{ user: "svc", password: "{NATS_PASSWORD}" }}\n')
    server = NatsServer(store_dir=tmp_path / "nats", config=config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_provider_that_echoes_the_api_key_leaks_it_nowhere(
    secured: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAI() as fake:
        # A provider that repeats the key it was given in its refusal (as some do, in part or whole).
        fake.replies = [(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}, {})] * 4
        settings = Settings(
            nats_url=secured.url, nats_user="svc", nats_password=SecretStr(NATS_PASSWORD),
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}", prefix="t" + uuid.uuid4().hex[:8],
            fetch_timeout_s=0.2, provider="openai", openai_base_url=fake.url, openai_api_key=SecretStr(API_KEY),
            model="gpt-test", turn_retry_attempts=1, provider_timeout_s=10.0,
            provider_check=False,  # this fake refuses every key; the turn is what leaks, not the start
        )
        service = TurnstileService(settings)
        await service.start()
        client = await nats.connect(secured.url, **connect_options(settings))
        try:
            subjects = Subjects(settings.prefix)
            everything = await Collector().attach(client, f"{settings.prefix}.>")
            sid = f"secret-{uuid.uuid4().hex[:6]}"
            await publish_inbound(client, subjects, inbound(sid, "hello"))
            await wait_for(
                lambda: subjects.event(sid, "turn.ended") in everything.subjects(), what="the failed turn's end"
            )
            assert fake.requests and fake.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
            reply = await client.request(subjects.api("session", "get"), b'{"session_id": "%s"}' % sid.encode())
            assert b'"ok":true' in reply.data
            written_reply = reply.data
        finally:
            await client.close()
            await service.stop()
    written = {
        "logs": caplog.text,
        "wire": b"\n".join(m.data for m in everything.messages).decode(errors="replace"),
        "settings": repr(settings) + str(settings),
        "control reply": written_reply.decode(errors="replace"),
        "database": b"".join(p.read_bytes() for p in tmp_path.glob("turnstile.db*")).decode(errors="replace"),  # noqa: ASYNC240 (the test's own SQLite files, read once the service has stopped)
    }
    assert "Incorrect API key" in written["wire"] + written["logs"], "the refusal itself is reported"
    for where, text in written.items():
        assert API_KEY not in text, f"the API key reached the {where}"
        assert API_KEY[:20] not in text, f"a prefix of the API key reached the {where}"
        assert NATS_PASSWORD not in text, f"the NATS password reached the {where}"
