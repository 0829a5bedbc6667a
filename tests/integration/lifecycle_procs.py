"""Helpers for the process-lifecycle tests: a ``turnstile run`` child with extra settings, reply checks."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, wait_for
from tests.integration.service_process import ServiceProcess


class ConfiguredProcess(ServiceProcess):
    """``ServiceProcess`` with extra ``TURNSTILE_*`` variables (they win over the defaults)."""

    def __init__(self, settings: Settings, log_path: Path, **env: str) -> None:
        super().__init__(settings, log_path, extra_env=env)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_exit(self, timeout_s: float) -> int:
        assert self.proc is not None
        await wait_for(lambda: self.proc is not None and self.proc.returncode is not None,
                       timeout_s=timeout_s, what="the service to exit")
        return int(self.proc.returncode or 0)


def replies_by_session(collector: Collector) -> dict[str, list[str]]:
    """``reply_to`` ids in arrival order, per session."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in collector.json():
        out[r["session_id"]].append(r["reply_to"])
    return dict(out)


async def outbound_count(nc: Client, subjects: Subjects) -> int:
    info = await nc.jetstream().stream_info(subjects.outbound_stream)
    return int(info.state.messages)


async def consumer_settled(nc: Client, subjects: Subjects, consumer: str) -> bool:
    info = await nc.jetstream().consumer_info(subjects.inbound_stream, consumer)
    return not info.num_pending and not info.num_ack_pending


async def stored_replies_by_session(nc: Client, subjects: Subjects) -> dict[str, list[str]]:
    """``reply_to`` ids per session in the outbound stream's order (the stream is the authority:
    a resumed turn may publish again on the wire, the stream's ``Nats-Msg-Id`` dedup keeps one)."""
    js = nc.jetstream()
    last = (await js.stream_info(subjects.outbound_stream)).state.last_seq
    out: dict[str, list[str]] = defaultdict(list)
    for seq in range(1, last + 1):
        try:
            raw = await js.get_msg(subjects.outbound_stream, seq)
        except Exception:
            continue
        body = orjson.loads(raw.data or b"{}")
        out[body["session_id"]].append(body["reply_to"])
    return dict(out)
