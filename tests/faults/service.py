"""``turnstile run`` (or a test entry point wrapping it) as a child the fault suite can kill and pause."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from consumers.settings import Settings
from tests.integration.service_process import ROOT, ServiceProcess


class FaultService(ServiceProcess):
    """``ServiceProcess`` started from ``module`` (default the real CLI), with SIGSTOP/SIGCONT."""

    def __init__(
        self, settings: Settings, log_path: Path, extra_env: dict[str, str], module: str = "consumers.cli"
    ) -> None:
        super().__init__(settings, log_path, extra_env=extra_env)
        self.module = module

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

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
