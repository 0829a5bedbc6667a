"""A ``turnstile run`` that cannot work says why in one line naming the variable, exits non-zero,
and never takes the ownership lease (real processes, a real nats-server)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from aiohttp import web
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from consumers.nats_server import NatsServer, free_port
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.lifecycle_procs import ConfiguredProcess


def _settings(nats_server: NatsServer, tmp_path: Path, database_url: str | None = None) -> Settings:
    return Settings(
        nats_url=nats_server.url,
        database_url=database_url or f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
    )


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test: bound, never listening, so no
    other process (the service's own HTTP endpoint once took a ``free_port()``) can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


async def _refused(proc: ConfiguredProcess, code: int, variable: str) -> str:
    await proc.start()
    try:
        exit_code = await proc.wait_exit(timeout_s=40)
    finally:
        await proc.stop()  # a service that did not exit is not left running past its test (no-op once exited)
    log = proc.log_text()
    assert exit_code == code, log[-3000:]
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and variable in errors[0], log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    return errors[0]


async def _lease_untouched(nats_server: NatsServer, prefix: str) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        try:
            kv = await nc.jetstream().key_value(f"{Subjects(prefix).stream_prefix}_LEASES")
        except (BucketNotFoundError, NotFoundError):
            return  # the bucket was never even created
        with pytest.raises(KeyNotFoundError):  # no process ever took the lease
            await kv.get("owner")
    finally:
        await nc.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:////nonexistent-turnstile-dir/sub/turnstile.db",
        "postgresql+asyncpg://turnstile:secret@127.0.0.1:{port}/turnstile",
        "mysql://nobody@127.0.0.1/none",
    ],
    ids=["sqlite-missing-dir", "postgres-refused", "unknown-driver"],
)
async def test_a_bad_database_url_is_refused_before_the_lease(
    nats_server: NatsServer, tmp_path: Path, url: str, refused_port: int
) -> None:
    settings = _settings(nats_server, tmp_path, url.format(port=refused_port))
    proc = ConfiguredProcess(settings, tmp_path / "service.log")
    line = await _refused(proc, 3, "TURNSTILE_DATABASE_URL")
    assert "secret" not in proc.log_text()  # the password is masked
    await _lease_untouched(nats_server, settings.prefix)
    assert "cannot" in line


@pytest.fixture
async def fake_openai() -> AsyncIterator[str]:
    """An OpenAI-compatible server that accepts only the key ``good-key``."""

    async def models(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer good-key":
            return web.json_response({"error": {"message": "Incorrect API key provided"}}, status=401)
        return web.json_response({"data": [{"id": "m"}]})

    app = web.Application()
    app.add_routes([web.get("/v1/models", models)])
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


@pytest.mark.timeout(60)
async def test_a_bad_openai_key_is_refused_before_the_lease(
    nats_server: NatsServer, tmp_path: Path, fake_openai: str
) -> None:
    settings = _settings(nats_server, tmp_path)
    proc = ConfiguredProcess(
        settings, tmp_path / "service.log",
        TURNSTILE_PROVIDER="openai", TURNSTILE_OPENAI_BASE_URL=fake_openai, TURNSTILE_OPENAI_API_KEY="bad-key",
    )
    line = await _refused(proc, 5, "TURNSTILE_OPENAI_API_KEY")
    assert "bad-key" not in proc.log_text()
    assert "401" in line
    await _lease_untouched(nats_server, settings.prefix)


@pytest.mark.timeout(60)
async def test_an_unreachable_openai_base_url_is_refused_before_the_lease(
    nats_server: NatsServer, tmp_path: Path, refused_port: int
) -> None:
    settings = _settings(nats_server, tmp_path)
    proc = ConfiguredProcess(
        settings, tmp_path / "service.log",
        TURNSTILE_PROVIDER="openai", TURNSTILE_OPENAI_BASE_URL=f"http://127.0.0.1:{refused_port}/v1",
        TURNSTILE_OPENAI_API_KEY="some-key",
    )
    await _refused(proc, 5, "TURNSTILE_OPENAI_BASE_URL")
    await _lease_untouched(nats_server, settings.prefix)


@pytest.mark.timeout(60)
async def test_an_unknown_provider_is_refused_before_the_lease(nats_server: NatsServer, tmp_path: Path) -> None:
    settings = _settings(nats_server, tmp_path)
    proc = ConfiguredProcess(settings, tmp_path / "service.log", TURNSTILE_PROVIDER="anthropic")
    await _refused(proc, 5, "TURNSTILE_PROVIDER")
    await _lease_untouched(nats_server, settings.prefix)


@pytest.mark.timeout(60)
async def test_a_good_openai_key_starts(nats_server: NatsServer, tmp_path: Path, fake_openai: str) -> None:
    settings = _settings(nats_server, tmp_path)
    proc = ConfiguredProcess(
        settings, tmp_path / "service.log",
        TURNSTILE_PROVIDER="openai", TURNSTILE_OPENAI_BASE_URL=fake_openai, TURNSTILE_OPENAI_API_KEY="good-key",
    )
    nc = await nats.connect(nats_server.url)
    try:
        await proc.start()
        await proc.wait_ready(nc)
    finally:
        await proc.stop()
        await nc.close()


@pytest.mark.timeout(60)
async def test_an_invalid_setting_value_names_its_variable(nats_server: NatsServer, tmp_path: Path) -> None:
    settings = _settings(nats_server, tmp_path)
    proc = ConfiguredProcess(settings, tmp_path / "service.log", TURNSTILE_LEASE_TTL_S="soon")
    await proc.start()
    assert await proc.wait_exit(timeout_s=40) == 2
    log = proc.log_text()
    assert "TURNSTILE_LEASE_TTL_S" in log and "Traceback" not in log and len(log.strip().splitlines()) == 1, log
