"""The CLI's credential options reach the connection: a password-protected server lets it in only with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from tests.integration.cli_process import turnstile
from tests.integration.test_nats_credentials import PASSWORD, secured, settings_for

pytestmark = pytest.mark.integration
__all__ = ["secured"]


async def test_user_and_password_options(secured: NatsServer, tmp_path: Path) -> None:
    settings = settings_for(secured, tmp_path, nats_user="svc", nats_password=SecretStr(PASSWORD))
    service = TurnstileService(settings)
    await service.start()
    try:
        base = ["--server", secured.url, "--prefix", settings.prefix]
        ran = await turnstile(*base, "--user", "svc", "--password", PASSWORD, "send", "-s", "cred-1", "hi")
        assert ran.code == 0 and ran.lines == ["echo: hi"], ran.stderr
        refused = await turnstile(*base, "sessions")
        assert refused.code == 1 and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "cannot connect to NATS" in refused.stderr
        assert PASSWORD not in refused.stderr
    finally:
        await service.stop()
