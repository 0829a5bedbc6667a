"""Connections authenticate with the configured credentials; without them a secured server refuses them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from pydantic import SecretStr

from consumers.nats_connect import connect_options, redacted_url
from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.errors import InvalidInput
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

PASSWORD = "s3cret-" + uuid.uuid4().hex


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[NatsServer]:
    config = tmp_path / "auth.conf"
    config.write_text(f'jetstream {{}}\nauthorization {{ user: "svc", password: "{PASSWORD}" }}\n')
    server = NatsServer(store_dir=tmp_path / "nats", config=config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def settings_for(server: NatsServer, tmp_path: Path, **changes: object) -> Settings:
    base = Settings(
        nats_url=server.url, database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8], fetch_timeout_s=0.2,
    )
    return base.model_copy(update=changes)


async def test_the_service_and_the_cli_connect_with_user_and_password(secured: NatsServer, tmp_path: Path) -> None:
    settings = settings_for(secured, tmp_path, nats_user="svc", nats_password=SecretStr(PASSWORD))
    service = TurnstileService(settings)
    await service.start()
    client: Client = await nats.connect(secured.url, **connect_options(settings))
    try:
        subjects = Subjects(settings.prefix)
        replies = await Collector().attach(client, subjects.outbound("cli", "auth-1"))
        await publish_inbound(client, subjects, inbound("auth-1", "over an authenticated connection"))
        await wait_for(lambda: replies.messages, what="the reply")
        assert replies.json()[0]["text"] == "echo: over an authenticated connection"
    finally:
        await client.close()
        await service.stop()


async def test_a_connection_without_credentials_is_refused(secured: NatsServer, tmp_path: Path) -> None:
    client = Client()
    with pytest.raises(Exception, match=r"(?i)authorization"):
        await client.connect(secured.url, allow_reconnect=False, max_reconnect_attempts=0)
    await client.close()  # the refused connection's transport


def test_a_missing_credentials_file_names_its_setting_and_no_secret_is_echoed(tmp_path: Path) -> None:
    settings = Settings(nats_creds_file=str(tmp_path / "absent.creds"))
    with pytest.raises(InvalidInput, match="TURNSTILE_NATS_CREDS_FILE"):
        connect_options(settings)
    half = Settings(nats_user="svc")
    with pytest.raises(InvalidInput, match="TURNSTILE_NATS_PASSWORD"):
        connect_options(half)
    only_password = Settings(nats_password=SecretStr(PASSWORD))
    with pytest.raises(InvalidInput) as refused:
        connect_options(only_password)
    assert PASSWORD not in str(refused.value)
    assert PASSWORD not in repr(only_password)


def test_a_password_or_token_written_into_the_url_is_redacted_for_logs() -> None:
    assert redacted_url(f"nats://svc:{PASSWORD}@127.0.0.1:4222") == "nats://svc:***@127.0.0.1:4222"
    assert redacted_url(f"tls://{PASSWORD}@nats.example:4443") == "tls://***@nats.example:4443"
    assert redacted_url("nats://127.0.0.1:4333") == "nats://127.0.0.1:4333"
