"""``turnstile run`` (or a test entry point wrapping it) as a child the fault suite can kill and pause."""

from __future__ import annotations

import signal
from pathlib import Path

from consumers.settings import Settings
from tests.integration.service_process import ServiceProcess


class FaultService(ServiceProcess):
    """``ServiceProcess`` started from ``module`` (default the real CLI), with SIGSTOP/SIGCONT."""

    def __init__(
        self, settings: Settings, log_path: Path, extra_env: dict[str, str], module: str = "consumers.cli"
    ) -> None:
        super().__init__(settings, log_path, extra_env=extra_env, module=module)

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
