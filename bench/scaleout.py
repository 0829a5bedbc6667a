"""Phase ``scaleout``: 1 vs 2 ``turnstile run`` workers on one PostgreSQL database at 1,000 sessions.

Each run gets a fresh prefix and a fresh PostgreSQL database (created on ``TURNSTILE_BENCH_PG_URL``'s
server, default ``postgresql+asyncpg://postgres@127.0.0.1:5432``, dropped afterwards). A backlog
over 1,000 sessions is published once the workers run and share the partitions, the drain is timed
from its first publish to the last reply (every reply counted), then the paced open-loop phase (the
profile's rate) gives the p99. Until 2026-12-04 the backlog was published before the workers started
and the window opened only once the partitions were shared, so with 2 workers most of the backlog was
served before the window (by one worker, during the hand-over) and the ratio measured a drain's tail. Reported:
both rows and the ratios 2-workers / 1-worker (throughput, paced p99), with how many of the
workers actually served (``owners``) and how many stood by: without partitioned ownership one
process owns every session and the other waits for the lease, so the ratio measures the cost of
a standby, not scale-out. Runs alone with ``python -m bench.run --only scaleout``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from typing import Any

from sqlalchemy.engine import make_url

from bench.common import Child, MeterGroup, delete_streams, wait_until
from bench.driver import Driver, Meters, message_plan, session_ids
from bench.partition_shares import PARTITIONS, shared_evenly
from bench.scenarios import TURN_TEXTS, BenchContext, _phase_error
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

SESSIONS = 1000
WORKER_COUNTS = (1, 2)
STANDBY_MARKER = "standing by"
PG_URL = os.environ.get("TURNSTILE_BENCH_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")


async def _admin(sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    admin = make_url(PG_URL).set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _shared_by(ctx: BenchContext, subjects: Subjects, workers: int, timeout_s: float) -> list[int] | None:
    """Wait until ``workers`` processes hold every partition lease, each its fair share; the partitions each
    holds (sorted), or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owners: dict[int, bytes] = {}
        try:
            kv = await ctx.js.key_value(f"{subjects.stream_prefix}_PARTITIONS")
            for p in range(PARTITIONS):
                try:
                    entry = await kv.get(f"p.{p}")
                except Exception:
                    continue
                if entry.value:
                    owners[p] = entry.value
        except Exception:
            pass
        if shared_evenly(owners, workers):
            return sorted(Counter(owners.values()).values())
        await asyncio.sleep(0.1)
    return None


async def _workers_run(ctx: BenchContext, workers: int, sessions: int) -> dict[str, Any]:
    p = ctx.profile
    prefix = new_prefix("so")
    subjects = Subjects(prefix)
    database = f"turnstile_bench_{uuid.uuid4().hex[:10]}"
    out: dict[str, Any] = {"worker": "turnstile", "turn": "plain", "sessions": sessions, "workers": workers,
                           "database": "postgresql"}
    children: list[Child] = []
    # Partitioned (consumers/partitions.py): every worker serves a share of the sessions.
    await ensure_streams(ctx.js, Settings(nats_url=ctx.nats_url, prefix=prefix, partitions=PARTITIONS), subjects)
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    await driver.attach()
    try:
        await _admin(f'CREATE DATABASE "{database}"')
        url = make_url(PG_URL).set(database=database).render_as_string(hide_password=False)
        sids = session_ids(uuid.uuid4().hex[:8], sessions)
        backlog = max(p.drain_messages, sessions)
        env = ServiceConfig(ctx.nats_url, prefix, ctx.work / f"{prefix}.unused.db").env()
        env.update(TURNSTILE_DATABASE_URL=url, TURNSTILE_HTTP_PORT="0", TURNSTILE_PARTITIONS=str(PARTITIONS))
        # Together: the database schema is migrated by whichever worker starts first.
        children = [Child(["-m", "consumers.cli", "run"], env, ctx.work / f"{prefix}-w{i + 1}.log") for i in range(workers)]
        ready = await wait_until(
            lambda: any(READY_MARKER in c.log_text() for c in children) or any(c.proc.poll() is not None for c in children),
            READY_TIMEOUT_S,
        )
        if not ready or any(c.proc.poll() is not None for c in children):
            raise RuntimeError("a worker exited or none became ready: " + children[0].log_text()[-1500:])
        # Measured once every worker holds its fair share: the hand-over of a joining worker is not in the figures.
        split = await _shared_by(ctx, subjects, workers, READY_TIMEOUT_S)
        if split is None:
            raise RuntimeError(f"the partitions were not shared evenly by {workers} workers in time")
        out["partitions_held"] = split
        # Every worker's CPU (until 2026-12-06 the first worker's alone, over all the messages).
        driver.timer.meters = Meters(MeterGroup([c.meter for c in children]), ctx.server_meter)
        # The backlog is published only now, into running workers, and the window opens at its first
        # publish: all of it is served inside the window by the workers that will serve it.
        await driver.preload(message_plan(sids, backlog, TURN_TEXTS["plain"]), open_window=True)
        drain = await driver.measure_drain(sessions, p.drain_timeout_s(backlog))
        out["drain"] = drain.as_dict()
        paced = await driver.paced(
            message_plan(sids, p.paced_count(sessions), TURN_TEXTS["plain"]), p.paced_rate_per_s, sessions,
            p.reply_timeout_s,
        )
        out["paced"] = paced.as_dict()
        out["owners"] = sum(READY_MARKER in c.log_text() for c in children)
        out["standby"] = sum(STANDBY_MARKER in c.log_text() and READY_MARKER not in c.log_text() for c in children)
        out["rss_bytes"] = [c.meter.rss_bytes() for c in children]
    except Exception as exc:
        out.update(_phase_error(ctx, f"scaleout with {workers} worker(s)", exc))
        if children:
            out["log_tail"] = children[0].log_text()[-3000:]
    finally:
        await asyncio.gather(*(c.stop() for c in children))
        await driver.detach()
        await delete_streams(ctx.js, subjects)
        try:
            await _admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        except Exception as exc:
            ctx.errors.append(f"scaleout: dropping {database}: {exc!r}")
    return out


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """2-workers / 1-worker: drain throughput and paced p99 (None where a row has no figure)."""
    by = {r.get("workers"): r for r in rows if "drain" in r}
    one, two = by.get(1), by.get(2)
    if one is None or two is None:
        return {"throughput_ratio": None, "paced_p99_ratio": None}
    t1, t2 = one["drain"]["msgs_per_s"], two["drain"]["msgs_per_s"]
    p1 = (one.get("paced") or {}).get("latency", {}).get("p99_ms")
    p2 = (two.get("paced") or {}).get("latency", {}).get("p99_ms")
    return {
        "throughput_ratio": round(t2 / t1, 3) if t1 else None,
        "paced_p99_ratio": round(p2 / p1, 3) if p1 and p2 else None,
        "owners_with_two_workers": two.get("owners"),
    }


async def turnstile_scaleout(ctx: BenchContext, sessions: int = SESSIONS) -> dict[str, Any]:
    """Both runs in one phase (same server, minutes apart) and their ratios."""
    rows = [await _workers_run(ctx, workers, sessions) for workers in WORKER_COUNTS]
    result: dict[str, Any] = {"sessions": sessions, "rows": rows, **ratios(rows), "cpus": os.cpu_count()}
    if result.get("owners_with_two_workers") == 1:
        result["note"] = ("one owner + one standby: sessions are not partitioned among workers yet, so the "
                          "second worker adds no capacity; the ratio is the cost of a standby on the lease")
    return result


def summary(result: dict[str, Any]) -> str:
    """One line for the console."""
    parts = []
    for row in result.get("rows", []):
        if "drain" not in row:
            parts.append(f"{row.get('workers')} worker(s): error")
            continue
        lat = (row.get("paced") or {}).get("latency") or {}
        parts.append(f"{row['workers']} worker(s) ({row.get('owners')} serving): "
                     f"{row['drain']['msgs_per_s']:,.0f} msg/s, paced p99 {lat.get('p99_ms', float('nan')):.1f} ms")
    parts.append(f"ratios 2/1: throughput {result.get('throughput_ratio')}, p99 {result.get('paced_p99_ratio')}")
    return "; ".join(parts)
