"""Small shared pieces: latency statistics, bounded waiting, process meters, stream state, child processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from consumers.nats_server import NatsServer
from schemas.nats_roles import without_roles
from schemas.subjects import Subjects

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LatencyStats:
    """Latency percentiles in milliseconds."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    @staticmethod
    def of(latencies_s: Sequence[float]) -> LatencyStats:
        if not latencies_s:
            return LatencyStats(0, float("nan"), float("nan"), float("nan"), float("nan"))
        xs = sorted(latencies_s)
        n = len(xs)

        def pct(q: float) -> float:
            return xs[min(n - 1, max(0, round(q * (n - 1))))] * 1000

        return LatencyStats(n, pct(0.50), pct(0.99), xs[-1] * 1000, sum(xs) / n * 1000)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Poll until ``predicate()`` holds or the timeout passes; True when it held."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval_s)
    return True


class ProcessMeter:
    """CPU seconds (user + system, children included) and RSS of one process."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)

    def cpu_s(self) -> float:
        try:
            t = self.proc.cpu_times()
        except psutil.Error:
            return float("nan")
        return float(t.user + t.system + t.children_user + t.children_system)

    def rss_bytes(self) -> int:
        try:
            return int(self.proc.memory_info().rss)
        except psutil.Error:
            return 0

    def written_bytes(self) -> int:
        """Bytes the process made dirty for storage (``/proc/<pid>/io`` write_bytes; 0 if unreadable)."""
        try:
            return int(self.proc.io_counters().write_bytes)
        except (psutil.Error, AttributeError):
            return 0


@dataclass(frozen=True)
class MachineCpu:
    """The whole machine's CPU seconds so far, summed over its CPUs (``psutil.cpu_times``): what every
    process ran (``busy``: user, nice, system, irq, softirq), what the hypervisor took from this VM
    (``steal``), and everything counted (``total``, idle and iowait included)."""

    busy: float
    steal: float
    total: float

    @staticmethod
    def now() -> MachineCpu:
        t = psutil.cpu_times()
        busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        steal = getattr(t, "steal", 0.0)
        return MachineCpu(busy, steal, busy + steal + t.idle + getattr(t, "iowait", 0.0))

    def share_until(self, later: MachineCpu, charged_s: float) -> dict[str, float]:
        """What the machine did between this sample and ``later``, in % of its capacity (all CPUs):
        ``steal_pct`` (taken by the hypervisor), ``busy_pct`` (every process), ``others_pct`` (every
        process but the ``charged_s`` CPU seconds of the measured ones: the driver, PostgreSQL, anything
        else running). A row that ran slower than its neighbours with more steal or others lost the
        machine, not its code."""
        total = later.total - self.total
        if total <= 0:
            return {"steal_pct": 0.0, "busy_pct": 0.0, "others_pct": 0.0}
        busy = later.busy - self.busy
        return {
            "steal_pct": round((later.steal - self.steal) / total * 100, 2),
            "busy_pct": round(busy / total * 100, 2),
            "others_pct": round(max(busy - charged_s, 0.0) / total * 100, 2),
        }


class MeterGroup:
    """Several processes metered as one (the scale-out phase's workers): CPU, RSS and bytes written, summed."""

    def __init__(self, meters: list[ProcessMeter]) -> None:
        self.meters = meters

    def cpu_s(self) -> float:
        return sum(m.cpu_s() for m in self.meters)

    def rss_bytes(self) -> int:
        return sum(m.rss_bytes() for m in self.meters)

    def written_bytes(self) -> int:
        return sum(m.written_bytes() for m in self.meters)


@dataclass(frozen=True)
class StreamState:
    """What one stream holds: messages kept, bytes kept and the last sequence (= publishes ever)."""

    messages: int
    bytes: int
    last_seq: int


async def settled_stream_states(
    js: JetStreamContext, subjects: Subjects, quiet_s: float = 0.25, timeout_s: float = 30.0
) -> dict[str, StreamState]:
    """``stream_states`` once no stream's last sequence moved for ``quiet_s`` (at most ``timeout_s``).

    After the last reply a service still publishes what follows it (``turn.ended``, ``usage``, the
    written-behind ``session.updated``); read at once, a phase boundary would count those of the
    phase before into the next one."""
    deadline = time.monotonic() + timeout_s
    last = await stream_states(js, subjects)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)  # the polling interval of a wait for an outcome (no new sequence)
        now = await stream_states(js, subjects)
        if all(now[k].last_seq == last[k].last_seq for k in now):
            return now
        last = now
    return last


async def stream_states(js: JetStreamContext, subjects: Subjects) -> dict[str, StreamState]:
    """State of the checkpoint, events, outbound and inbound streams of a prefix (missing → zeros)."""
    out: dict[str, StreamState] = {}
    for key, name in (
        ("inbound", subjects.inbound_stream),
        ("checkpoint", subjects.checkpoint_stream),
        ("events", subjects.events_stream),
        ("outbound", subjects.outbound_stream),
    ):
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            out[key] = StreamState(0, 0, 0)
            continue
        out[key] = StreamState(int(info.state.messages), int(info.state.bytes), int(info.state.last_seq))
    return out


async def delete_streams(js: JetStreamContext, subjects: Subjects) -> None:
    """Remove a finished phase's streams so later phases run on an uncluttered server."""
    for spec in subjects.streams():
        with contextlib.suppress(Exception):  # already gone, or the server is: nothing to clean up
            await js.delete_stream(spec.name)


def file_bytes(path: Path) -> int:
    """Size of a SQLite database with its -wal and -shm files."""
    total = 0
    for p in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
        if p.exists():
            total += p.stat().st_size
    return total


class Child:
    """A Python child process of the bench (service, baseline worker, LangGraph peer).

    Output goes to a log file; readiness is a line in that file. ``stop()`` sends
    SIGTERM, waits (bounded), then kills.
    """

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed by stop(): the child writes to it until then)
        full_env = {**os.environ, **env}
        full_env.setdefault("PYTHONPATH", str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.meter = ProcessMeter(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    async def wait_ready(self, marker: str, timeout_s: float) -> None:
        ok = await wait_until(lambda: marker in self.log_text() or self.proc.poll() is not None, timeout_s, 0.005)
        if not ok or self.proc.poll() is not None:
            tail = "\n".join(self.log_text().splitlines()[-25:])
            self.kill()
            raise RuntimeError(f"{' '.join(self.proc.args[1:3])} did not become ready (rc={self.proc.poll()}):\n{tail}")

    async def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            await wait_until(lambda: self.proc.poll() is not None, timeout_s, 0.05)
        if self.proc.poll() is None:
            self.kill()
        self._log.close()
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


async def open_nats_server(work: Path) -> tuple[NatsServer, ProcessMeter]:
    """A nats-server with the repository's ``nats.conf`` but its login roles (the bench's clients are open),
    its store under ``work/nats``; started. Returns it and the meter of its process."""
    conf = work / "nats-open.conf"
    conf.write_text(without_roles((ROOT / "nats.conf").read_text()))
    server = NatsServer(store_dir=work / "nats", config=conf)
    await server.start()
    assert server.process is not None
    return server, ProcessMeter(server.process.pid)
