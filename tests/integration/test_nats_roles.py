"""The shipped nats.conf's roles on a real nats-server: each role can do its job and is refused the rest."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import orjson
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig
from pydantic import SecretStr

from consumers.dev_credentials import ensure_dev_credentials, read_env_file
from consumers.nats_connect import connect_options
from consumers.nats_server import NatsServer
from consumers.replay import replay
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.nats_roles import dev_roles
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

ROOT = Path(__file__).resolve().parents[2]
SUBJECTS = Subjects()  # nats.conf's roles are written for the default prefix


@dataclass
class RoleServer:
    server: NatsServer
    credentials: Path
    tmp: Path
    clients: list[Client] = field(default_factory=list)

    def settings(self, user: str) -> Settings:
        env = read_env_file(self.credentials / f"{user}.env")
        return Settings(
            nats_url=self.server.url, nats_user=env["TURNSTILE_NATS_USER"],
            nats_password=SecretStr(env["TURNSTILE_NATS_PASSWORD"]),
            nats_inbox_prefix=env["TURNSTILE_NATS_INBOX_PREFIX"],
            database_url=f"sqlite+aiosqlite:///{self.tmp / 'turnstile.db'}", fetch_timeout_s=0.2,
        )

    async def connect(self, user: str) -> tuple[Client, list[str]]:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        client = await nats.connect(
            self.server.url, error_cb=on_error, allow_reconnect=False, **connect_options(self.settings(user))
        )
        self.clients.append(client)
        return client, errors


@pytest.fixture
async def roles(tmp_path: Path) -> AsyncIterator[RoleServer]:
    credentials = tmp_path / "credentials"
    passwords = ensure_dev_credentials(dev_roles(SUBJECTS), credentials)
    server = NatsServer(store_dir=tmp_path / "nats", config=ROOT / "nats.conf", env=passwords)
    await server.start()
    box = RoleServer(server, credentials, tmp_path)
    try:
        yield box
    finally:
        for client in box.clients:
            await client.close()
        await server.stop()


@pytest.fixture
async def service(roles: RoleServer) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(roles.settings("turnstile-service"))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def refused(errors: list[str], subject: str) -> None:
    """Wait for the server's permissions violation naming ``subject`` (nats-py lower-cases the text)."""
    await wait_for(
        lambda: any("permissions violation" in e.lower() and subject.lower() in e.lower() for e in errors),
        what=f"a permissions violation for {subject}",
    )


async def test_the_service_works_under_its_own_user_and_each_role_does_its_job(
    roles: RoleServer, service: TurnstileService
) -> None:
    adapter, adapter_errors = await roles.connect("adapter-cli")
    sid = f"roles-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(adapter, SUBJECTS.outbound("cli", sid))
    await publish_inbound(adapter, SUBJECTS, inbound(sid, "through the roles"))
    await wait_for(lambda: replies.messages, what="the reply on the adapter's outbound subject")
    assert replies.json()[0]["text"] == "echo: through the roles"
    # The adapter may also read its outbound from JetStream, through a consumer named after its platform.
    js = adapter.jetstream()
    psub = await js.pull_subscribe(
        "turnstile.outbound.cli.>", durable="cli", stream=SUBJECTS.outbound_stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
    )
    [stored] = await psub.fetch(1, timeout=5)
    await stored.ack()
    assert orjson.loads(stored.data)["text"] == "echo: through the roles"
    assert adapter_errors == []

    observer, observer_errors = await roles.connect("observer")
    got = await observer.request(SUBJECTS.api("session", "get"), orjson.dumps({"session_id": sid}), timeout=10)
    assert orjson.loads(got.data)["result"]["id"] == sid
    events = [item.data["type"] async for item in replay(observer.jetstream(), SUBJECTS, sid, "events")]
    assert "turn.ended" in events
    checkpoints = [item async for item in replay(observer.jetstream(), SUBJECTS, sid, "checkpoints")]
    assert checkpoints
    # Time travel is a read: the observer gets the state at a kept checkpoint's version, equal to it.
    version = checkpoints[-1].data["state_version"]
    state = await observer.request(SUBJECTS.api("session", "state_at"),
                                   orjson.dumps({"session_id": sid, "state_version": version}), timeout=10)
    assert orjson.loads(state.data)["result"]["snapshot"] == checkpoints[-1].data["snapshot"]
    assert observer_errors == []


async def test_an_adapter_is_refused_checkpoints_deletion_other_platforms_and_events(
    roles: RoleServer, service: TurnstileService
) -> None:
    adapter, errors = await roles.connect("adapter-cli")
    await adapter.publish(SUBJECTS.checkpoint("victim"), b"{}")
    await refused(errors, SUBJECTS.checkpoint("victim"))
    with pytest.raises(nats.errors.Error):
        await adapter.request(SUBJECTS.api("session", "delete"), b'{"session_id": "victim"}', timeout=1)
    await refused(errors, SUBJECTS.api("session", "delete"))
    await adapter.publish(SUBJECTS.inbound("telegram", "victim"), b"{}")
    await refused(errors, SUBJECTS.inbound("telegram", "victim"))
    for subject in ("turnstile.outbound.telegram.>", SUBJECTS.events_all, "_INBOX.>"):
        await adapter.subscribe(subject)
        await refused(errors, subject)
    await adapter.publish(f"$JS.API.STREAM.PURGE.{SUBJECTS.outbound_stream}", b"{}")
    await refused(errors, f"$JS.API.STREAM.PURGE.{SUBJECTS.outbound_stream}")


async def test_an_observer_reads_but_cannot_mutate(roles: RoleServer, service: TurnstileService) -> None:
    observer, errors = await roles.connect("observer")
    for resource, verb in (("session", "delete"), ("session", "update"), ("memory", "clear"), ("platform", "register")):
        with pytest.raises(nats.errors.Error):
            await observer.request(SUBJECTS.api(resource, verb), b"{}", timeout=1)
        await refused(errors, SUBJECTS.api(resource, verb))
    for subject in (SUBJECTS.inbound("cli", "x"), SUBJECTS.checkpoint("x"), f"$JS.API.STREAM.PURGE.{SUBJECTS.events_stream}"):
        await observer.publish(subject, b"{}")
        await refused(errors, subject)


async def test_a_connection_without_credentials_or_with_a_wrong_password_is_refused(roles: RoleServer) -> None:
    for credentials in ({}, {"user": "admin", "password": "guessed"}):
        client = Client()
        with pytest.raises(Exception, match=r"(?i)authorization"):
            await client.connect(roles.server.url, allow_reconnect=False, max_reconnect_attempts=0, **credentials)
        await client.close()  # the refused connection's transport
