"""``turnstile run`` as a child process, for tests that kill it (crash tests, the soak)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """``turnstile run`` as a child process with the test's settings (``extra_env`` overrides more;
    ``module`` is the entry point run as ``python -m <module> run``)."""

    def __init__(
        self, settings: Settings, log_path: Path, extra_env: Mapping[str, str] | None = None,
        module: str = "consumers.cli",
    ) -> None:
        self.settings = settings
        self.log_path = log_path
        self.extra_env = dict(extra_env or {})
        self.module = module
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = dict(os.environ)
        env.update(
            TURNSTILE_NATS_URL=self.settings.nats_url,
            TURNSTILE_DATABASE_URL=self.settings.database_url,
            TURNSTILE_PREFIX=self.settings.prefix,
            TURNSTILE_FETCH_TIMEOUT_S="0.2",
            TURNSTILE_ACK_WAIT_S="5",
            TURNSTILE_LEASE_TTL_S="1.5",
        )
        env.update(self.extra_env)
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.module, "run", cwd=ROOT, env=env, stdout=log, stderr=log
            )

    async def wait_ready(self, nc: Client, timeout_s: float = 30.0) -> None:
        """Poll the control API until the service answers (streams exist by then)."""
        subjects = Subjects(self.settings.prefix)

        async def answers() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"service exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                await nc.request(subjects.api("session", "list"), b"{}", timeout=0.5)
            except Exception:
                return False
            return True

        await wait_for(answers, timeout_s=timeout_s, what="the service to answer")

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
