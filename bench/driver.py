"""The load driver shared by turnstile and baseline A: publish inbound, time the replies.

A core-NATS subscriber on ``<prefix>.outbound.>`` matches each reply to its
inbound message by ``reply_to``; latency is reply arrival minus the moment the
inbound publish was issued (``sent_at`` in the message carries the wall-clock
time of that moment too). Drain throughput is counted from the first to the
last reply, so worker start-up is not part of it; CPU is sampled at the same
two moments.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client.parser import text_string_to_metric_families

from bench.common import LatencyStats, MachineCpu, MeterGroup, ProcessMeter, wait_until
from bench.shape import STORE_HEADER_OVERHEAD, STORE_RECORD_OVERHEAD
from consumers.nats_flush import flush
from consumers.publisher import FENCE_HEADER
from schemas.subjects import Subjects

PLATFORM = "cli"
PUBLISH_CHUNK = 500
SLOWEST_KEPT = 10  # paced replies listed with their send offset (extra["slowest"])


def session_ids(run: str, count: int) -> list[str]:
    return [f"bench-{run}-{i}" for i in range(count)]


def message_plan(sessions: list[str], count: int, text: Callable[[int], str]) -> list[tuple[str, str]]:
    """(session id, text) for ``count`` messages spread round-robin over the sessions."""
    return [(sessions[i % len(sessions)], text(i)) for i in range(count)]


@dataclass
class Meters:
    """Processes whose CPU we charge to the messages (the worker and the nats-server)."""

    worker: ProcessMeter | MeterGroup
    server: ProcessMeter

    def sample(self) -> tuple[float, float]:
        return self.worker.cpu_s(), self.server.cpu_s()

    def moment(self) -> Moment:
        """Now: the clock, the worker's and the server's CPU, and the whole machine's."""
        return Moment(time.perf_counter(), *self.sample(), MachineCpu.now())


@dataclass(frozen=True)
class Moment:
    """One sample of a phase's window: ``at`` (perf_counter), CPU seconds of the worker and the server, the machine."""

    at: float
    worker_cpu_s: float
    server_cpu_s: float
    machine: MachineCpu

    def machine_until(self, later: Moment) -> dict[str, float]:
        """The machine's shares between the two (``MachineCpu.share_until``), the worker and server charged."""
        charged = (later.worker_cpu_s - self.worker_cpu_s) + (later.server_cpu_s - self.server_cpu_s)
        return self.machine.share_until(later.machine, charged)


@dataclass
class PhaseResult:
    """One measured phase (drain or paced) of one worker at one session count."""

    kind: str
    sessions: int
    sent: int
    answered: int
    window_s: float
    msgs_per_s: float
    latency: LatencyStats
    worker_cpu_us_per_msg: float
    server_cpu_us_per_msg: float
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["latency"] = self.latency.as_dict()
        return d


class ReplyTimer:
    """Records send and first-reply times per inbound id; samples CPU at first and last reply."""

    def __init__(self, meters: Meters) -> None:
        self.meters = meters
        self.sent: dict[str, float] = {}
        self.got: dict[str, float] = {}
        self.acked: dict[str, float] = {}  # the inbound publish's stream ack
        self.expected = 0
        self.start: Moment | None = None  # the window opened
        self.first: Moment | None = None  # the first reply
        self.last: Moment | None = None
        self.replies_total = 0

    def reset(self, expected: int) -> None:
        self.sent.clear()
        self.got.clear()
        self.acked.clear()
        self.expected = expected
        self.start = self.first = self.last = None
        self.replies_total = 0

    async def on_reply(self, msg: Msg) -> None:
        self.replies_total += 1
        try:
            reply_to = orjson.loads(msg.data).get("reply_to")
        except orjson.JSONDecodeError:
            return
        if reply_to not in self.sent or reply_to in self.got:
            return
        moment = self.meters.moment()
        self.got[reply_to] = moment.at
        if self.first is None:
            self.first = moment
        if len(self.got) == self.expected:
            self.last = moment

    def done(self) -> bool:
        return len(self.got) >= self.expected


# The fence header a checkpoint after a session's first carries, for a 4-digit sequence.
FENCED_HEADER_BYTES = len(FENCE_HEADER % 1234)


def checkpoint_bytes_metric(text: str) -> tuple[int, float]:
    """(count, sum) of the ``turnstile_checkpoint_bytes`` histogram in a Prometheus text exposition."""
    samples = {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}
    return int(samples.get("turnstile_checkpoint_bytes_count", 0)), samples.get("turnstile_checkpoint_bytes_sum", 0.0)


class CheckpointBytesMetric:
    """The checkpoints a turnstile process published and their file-store size, read from its own
    ``turnstile_checkpoint_bytes`` histogram (``/metrics``) between the timed windows.

    A core subscription to the checkpoint subjects (what the bench used before) makes the nats-server send
    the bench a copy of every checkpoint during the windows, and the bench parse it in the loop that
    times the replies, on the same two cores: load the rows turnstile is compared with do not carry
    (measured 2026-12-04, 1 session, 3 alternated pairs: drain 4-7 % higher and paced p50 3-6 % lower
    without it). Every record is counted as fenced (a session's first checkpoint is not: ~60 B over).
    """

    def __init__(self, metrics_url: str, subject_bytes: int) -> None:
        self.metrics_url = metrics_url
        self.record_overhead = STORE_RECORD_OVERHEAD + subject_bytes + STORE_HEADER_OVERHEAD + FENCED_HEADER_BYTES

    async def snapshot(self) -> tuple[int, int]:
        """(records, stored bytes) published so far."""
        text = await asyncio.to_thread(self._read)
        count, total = checkpoint_bytes_metric(text)
        return count, int(total + count * self.record_overhead)

    def _read(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            body: bytes = response.read()
            return body.decode()


class Driver:
    """Publishes inbound messages for one prefix and times their replies."""

    def __init__(self, nc: Client, subjects: Subjects, meters: Meters) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.subjects = subjects
        self.timer = ReplyTimer(meters)
        self._sub: Any = None
        self._reply_nc: Client | None = None

    async def attach(self) -> None:
        # Replies get a connection of their own: nothing else the bench receives can queue ahead of them.
        url = self.nc.connected_url
        assert url is not None
        self._reply_nc = await nats.connect(f"nats://{url.netloc}")
        self._sub = await self._reply_nc.subscribe(
            self.subjects.outbound_all, cb=self.timer.on_reply, pending_msgs_limit=10_000_000
        )
        await flush(self._reply_nc)

    async def detach(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if self._reply_nc is not None:
            await self._reply_nc.close()
            self._reply_nc = None

    def _body(self, session_id: str, text: str) -> tuple[str, bytes, str]:
        msg_id = uuid.uuid4().hex
        body = {
            "id": msg_id,
            "session_id": session_id,
            "platform": PLATFORM,
            "text": text,
            "sent_at": time.time(),
        }
        return msg_id, orjson.dumps(body), self.subjects.inbound(PLATFORM, session_id)

    async def _publish(self, msg_id: str, data: bytes, subject: str) -> None:
        await self.js.publish(subject, data, headers={"Nats-Msg-Id": msg_id}, timeout=30)
        self.timer.acked[msg_id] = time.perf_counter()

    def start_publish(self, session_id: str, text: str) -> tuple[str, asyncio.Task[None]]:
        """Stamp the send time of one message and publish it in the background: (message id, task)."""
        msg_id, data, subject = self._body(session_id, text)
        self.timer.sent[msg_id] = time.perf_counter()
        return msg_id, asyncio.create_task(self._publish(msg_id, data, subject))

    async def preload(self, plan: list[tuple[str, str]], *, open_window: bool = False) -> None:
        """Publish a backlog (before the worker runs), awaiting acks per chunk. ``open_window``: the
        workers already run, and the drain window opens at the first publish."""
        self.timer.reset(len(plan))
        if open_window:
            self.open_window()
        for start in range(0, len(plan), PUBLISH_CHUNK):
            batch = [self._body(sid, text) for sid, text in plan[start : start + PUBLISH_CHUNK]]
            now = time.perf_counter()
            for msg_id, _, _ in batch:
                self.timer.sent[msg_id] = now
            await asyncio.gather(*(self._publish(*b) for b in batch))

    def open_window(self) -> None:
        """The worker starts consuming now: drain time and CPU are counted from here."""
        self.timer.start = self.timer.meters.moment()

    async def measure_drain(self, sessions: int, timeout_s: float) -> PhaseResult:
        """Wait for the preloaded backlog to be answered; capacity = replies in the window / window.

        The window opens at ``open_window()`` (worker ready / told to go) and closes at the
        last reply; replies that came before it opened are not counted.
        """
        await wait_until(self.timer.done, timeout_s)
        t = self.timer
        last = t.last or t.meters.moment()
        first = t.start or t.first or last
        window = max(last.at - first.at, 1e-9)
        n = sum(1 for at in t.got.values() if at >= first.at)
        rate = n / window
        lat = LatencyStats.of([t.got[k] - t.sent[k] for k in t.got])
        per = max(n, 1)
        return PhaseResult(
            kind="drain",
            sessions=sessions,
            sent=len(t.sent),
            answered=len(t.got),
            window_s=window,
            msgs_per_s=rate,
            latency=lat,
            worker_cpu_us_per_msg=(last.worker_cpu_s - first.worker_cpu_s) / per * 1e6,
            server_cpu_us_per_msg=(last.server_cpu_s - first.server_cpu_s) / per * 1e6,
            extra={"replies_total": t.replies_total, "replies_in_window": n, "machine": first.machine_until(last)},
        )

    async def paced(self, plan: list[tuple[str, str]], rate_per_s: float, sessions: int, timeout_s: float) -> PhaseResult:
        """Open-loop load: message i is published at t0 + i/rate whether or not earlier ones were answered."""
        t = self.timer
        t.reset(len(plan))
        loop = asyncio.get_running_loop()
        m0 = t.meters.moment()
        written0 = t.meters.worker.written_bytes(), t.meters.server.written_bytes()
        t0 = loop.time()
        p0 = time.perf_counter()
        started_wall = time.time()
        pending: list[asyncio.Task[None]] = []
        late_max_s = 0.0
        for i, (sid, text) in enumerate(plan):
            target = t0 + i / rate_per_s
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late_max_s = max(late_max_s, -delay)
            msg_id, data, subject = self._body(sid, text)
            t.sent[msg_id] = time.perf_counter()
            pending.append(asyncio.create_task(self._publish(msg_id, data, subject)))
        await asyncio.gather(*pending)
        await wait_until(t.done, timeout_s)
        p1 = time.perf_counter()
        m1 = t.meters.moment()
        written1 = t.meters.worker.written_bytes(), t.meters.server.written_bytes()
        n = len(t.got)
        lat = LatencyStats.of([t.got[k] - t.sent[k] for k in t.got])
        per = max(n, 1)
        # Per message [sent s after the phase's first publish, latency ms, its publish ack ms], in
        # send order: where the slow ones lie (right after the drain, or periodic) and whether the
        # nats-server was slow to store the inbound message too are read from these.
        timed = [
            [round(t.sent[k] - p0, 4), round((t.got[k] - t.sent[k]) * 1000, 2), round((t.acked.get(k, p0) - t.sent[k]) * 1000, 2)]
            for k in t.sent
            if k in t.got
        ]
        return PhaseResult(
            kind="paced",
            sessions=sessions,
            sent=len(plan),
            answered=n,
            window_s=p1 - p0,
            msgs_per_s=n / (p1 - p0),
            latency=lat,
            worker_cpu_us_per_msg=(m1.worker_cpu_s - m0.worker_cpu_s) / per * 1e6,
            server_cpu_us_per_msg=(m1.server_cpu_s - m0.server_cpu_s) / per * 1e6,
            extra={
                "rate_per_s": rate_per_s,
                "publisher_late_max_ms": late_max_s * 1000,
                "replies_total": t.replies_total,
                "started_wall": started_wall,
                # the machine over the window: steal, every process, every process but these two
                "machine": m0.machine_until(m1),
                # storage bytes made dirty per message answered (worker, nats-server): the write-back
                # the server's per-message fsyncs share the disk with
                "worker_written_bytes_per_msg": (written1[0] - written0[0]) / per,
                "server_written_bytes_per_msg": (written1[1] - written0[1]) / per,
                "slowest": sorted(timed, key=lambda x: -x[1])[:SLOWEST_KEPT],
                "messages": timed,
            },
        )

    async def one_turn(self, session_id: str, text: str, timeout_s: float) -> float | None:
        """Publish one message and wait for its reply; the latency in seconds, or None on timeout."""
        t = self.timer
        t.reset(1)
        msg_id, data, subject = self._body(session_id, text)
        t.sent[msg_id] = time.perf_counter()
        await self._publish(msg_id, data, subject)
        if not await wait_until(t.done, timeout_s, 0.001):
            return None
        return t.got[msg_id] - t.sent[msg_id]

    async def rounds(self, sessions: list[str], turns: int, text: Callable[[int], str], timeout_s: float) -> int:
        """``turns`` rounds: one message to every session, then wait for all replies. Returns replies."""
        answered = 0
        for r in range(turns):
            t = self.timer
            t.reset(len(sessions))
            for sid in sessions:
                msg_id, data, subject = self._body(sid, text(r))
                t.sent[msg_id] = time.perf_counter()
                await self._publish(msg_id, data, subject)
            await wait_until(t.done, timeout_s)
            answered += len(t.got)
        return answered
