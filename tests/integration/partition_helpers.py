"""Helpers for the partitioned-ownership tests: PostgreSQL workers, who owns what, sessions per partition."""

from __future__ import annotations

import uuid
from pathlib import Path

from nats.aio.client import Client
from nats.js.errors import NotFoundError

from consumers.partitions import partition_of
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector
from tests.integration.service_process import ServiceProcess

PARTITIONS = 8


def worker(settings: Settings, tmp_path: Path, name: str, ttl_s: float = 1.5, **env: str) -> ServiceProcess:
    extra = {"TURNSTILE_PARTITIONS": str(PARTITIONS), "TURNSTILE_LEASE_TTL_S": str(ttl_s), **env}
    return ServiceProcess(settings, tmp_path / f"{name}.log", extra_env=extra)


async def partition_owners(nc: Client, subjects: Subjects) -> dict[int, int]:
    """Partition → pid of the process whose lease names it (partitions nobody holds are absent)."""
    try:
        kv = await nc.jetstream().key_value(f"{subjects.stream_prefix}_PARTITIONS")
    except NotFoundError:  # no worker has joined yet
        return {}
    except Exception:  # a cluster electing a bucket leader (the lookup times out): ask again at the next poll
        return {}
    owners: dict[int, int] = {}
    for p in range(PARTITIONS):
        try:
            entry = await kv.get(f"p.{p}")
        except NotFoundError:
            continue
        except Exception:  # a cluster electing a bucket leader: ask again at the next poll
            return {}
        if entry.value:
            owners[p] = int(entry.value.decode().split(":")[1])
    return owners


def pid(proc: ServiceProcess) -> int:
    assert proc.proc is not None
    return proc.proc.pid


def sessions_in(partitions: set[int], count: int, tag: str) -> list[str]:
    """``count`` fresh session ids that fall into ``partitions``."""
    out: list[str] = []
    while len(out) < count:
        sid = f"{tag}-{uuid.uuid4().hex[:8]}"
        if partition_of(sid, PARTITIONS) in partitions:
            out.append(sid)
    return out


async def outbound_count(nc: Client, subjects: Subjects, sid: str) -> int:
    subject = subjects.outbound("cli", sid)
    info = await nc.jetstream().stream_info(subjects.outbound_stream, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0) if info.state is not None else 0


async def reply_collectors(nc: Client, subjects: Subjects, sids: list[str]) -> dict[str, Collector]:
    return {sid: await Collector().attach(nc, subjects.outbound("cli", sid)) for sid in sids}
