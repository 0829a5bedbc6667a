"""Running the ``turnstile`` CLI as a real subprocess against a test's nats-server and prefix."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from consumers.settings import Settings
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """The environment without TURNSTILE_* (the options name server and prefix)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}


def global_args(settings: Settings) -> list[str]:
    return ["--server", settings.nats_url, "--prefix", settings.prefix]


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


async def turnstile(*args: str, settings: Settings | None = None, timeout_s: float = 60.0) -> Ran:
    """Run ``python -m consumers.cli [global options] ARGS`` to its end."""
    argv = [*(global_args(settings) if settings else []), *args]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "consumers.cli", *argv, cwd=ROOT, env=clean_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return Ran(proc.returncode, stdout.decode(), stderr.decode())


@dataclass
class Live:
    """A long-running command (tail, replay --follow, the example adapter): its lines as they come."""

    proc: asyncio.subprocess.Process
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def start(cls, *argv: str) -> Live:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, cwd=ROOT, env=clean_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        live = cls(proc)
        assert proc.stdout is not None and proc.stderr is not None
        live.readers = [asyncio.create_task(_read(proc.stdout, live.stdout)),
                        asyncio.create_task(_read(proc.stderr, live.stderr))]
        return live

    async def wait_line(self, needle: str, *, stream: str = "stdout", count: int = 1) -> list[str]:
        lines = self.stdout if stream == "stdout" else self.stderr

        def found() -> list[str]:
            hits = [line for line in lines if needle in line]
            return hits if len(hits) >= count else []

        hits: list[str] = await wait_for(found, timeout_s=30, what=f"{needle!r} on {stream}: {lines!r}")
        return hits

    async def stop(self) -> int:
        """SIGINT (Ctrl-C), then its exit status."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(self.proc.wait(), 20)
        await asyncio.gather(*self.readers)
        return code

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


async def _read(stream: asyncio.StreamReader, into: list[str]) -> None:
    while line := await stream.readline():
        into.append(line.decode().rstrip("\n"))
