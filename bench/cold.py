"""``python -m bench.cold``: what a cold session's first message costs over a warm one's.

At 10,000 sessions almost every paced message of the load phase goes to a session that the
drain phase touched and that has since been unloaded (``max_loaded_sessions``), so its turn
first restores it: last checkpoint (a JetStream direct get), journal rows newer than it,
engine ``Session.open``, actor. This measures exactly that, one message at a time.

One nats-server, one service (bench/profiled_service.py: the unmodified ``turnstile run``)
with ``TURNSTILE_MAX_LOADED_SESSIONS=1``. ``--sessions`` sessions get ``--turns`` turns each
(as the drain phase does); then, per session in turn: one message (**cold**: the session was
unloaded when the next one was loaded) and, once answered, a second one (**warm**). Each is
published alone and its reply awaited, so the figures are latency, not queueing. ``--db pg``
runs the service on a fresh PostgreSQL database (127.0.0.1:5432). With ``--profile`` the
window is under cProfile (slower; for the breakdown, not for the figures) and the top
functions by cumulative time are printed. Writes ``var/bench/cold-<db>-latest.json`` (and ``cold-<db>-cap<n>.pstats`` when profiled).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import shutil
import signal
import statistics
import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import orjson

from bench.common import ROOT, Child, delete_streams, open_nats_server, wait_until
from bench.driver import Driver, Meters, session_ids
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects


def _stats(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {
        "n": len(v),
        "p50_ms": statistics.median(v) * 1000,
        "p90_ms": v[min(len(v) - 1, int(0.9 * len(v)))] * 1000,
        "mean_ms": statistics.fmean(v) * 1000,
    }


async def measure(sessions: int, turns: int, db: str, work: Path, profile: bool, cap: int = 1) -> dict[str, Any]:
    from bench.scenarios import plain_text  # imports LangGraph (the bench extra)

    server, meter = await open_nats_server(work)
    nc = await nats.connect(server.url)
    prefix = new_prefix("cd")
    subjects = Subjects(prefix)
    js = nc.jetstream()
    await ensure_streams(js, Settings(nats_url=server.url, prefix=prefix), subjects)
    profile_out = work / "service.pstats"
    async with AsyncExitStack() as stack:
        extra = {"TURNSTILE_MAX_LOADED_SESSIONS": str(cap)}
        if db == "pg":
            from bench.pg import fresh_database, pg_url

            name = await stack.enter_async_context(fresh_database("cold"))
            extra["TURNSTILE_DATABASE_URL"] = pg_url(name, "postgresql+asyncpg")
        config = ServiceConfig(server.url, prefix, work / f"{prefix}.db", extra)
        env = {**config.env(), "BENCH_PROFILE_OUT": str(profile_out), "BENCH_TIME_OPENS": "1"}
        if not profile:
            env["BENCH_PROFILE_OFF"] = "1"
        child = Child(["-m", "bench.profiled_service"], env, work / "service.log")
        driver = Driver(nc, subjects, Meters(meter, meter))
        counters: dict[str, Any] = {"sql_statements": {}}
        cold: list[float] = []
        warm: list[float] = []
        try:
            await child.wait_ready(READY_MARKER, READY_TIMEOUT_S)
            await driver.attach()
            sids = session_ids(uuid.uuid4().hex[:8], sessions)
            await driver.rounds(sids, turns, plain_text, 120)
            # the last primed session is still loaded: touch another one first
            await driver.one_turn(sids[0], plain_text(0), 30)
            os.kill(child.pid, signal.SIGUSR1)
            await asyncio.sleep(0.2)  # the handler has run (a bound: the window only needs to open first)
            for i, sid in enumerate(sids[1:] + sids[:1]):
                for into in (cold, warm):
                    latency = await driver.one_turn(sid, plain_text(i), 30)
                    if latency is not None:
                        into.append(latency)
            os.kill(child.pid, signal.SIGUSR2)
            done = Path(str(profile_out) + ".json")
            if not await wait_until(done.exists, 60, 0.1):
                raise RuntimeError("the service wrote no profile")
            await asyncio.sleep(0.2)
            counters = orjson.loads(await asyncio.to_thread(done.read_bytes))
        finally:
            await child.stop()
            await driver.detach()
            await delete_streams(js, subjects)
            await nc.close()
            await server.stop()
    result: dict[str, Any] = {
        "db": db,
        "sessions": sessions,
        "priming_turns": turns,
        "profiled": profile,
        "max_loaded_sessions": cap,
        "cold": _stats(cold),
        "warm": _stats(warm),
        "cold_minus_warm_p50_ms": (statistics.median(cold) - statistics.median(warm)) * 1000,
        # per session: its cold message's latency minus its warm one's (the machine's load swings less
        # within a pair than across the run)
        "paired_diff_p50_ms": statistics.median(c - w for c, w in zip(cold, warm, strict=False)) * 1000,
        # in the service: wall ms of each cold open (TurnRunner.load) and of the reads in it
        "open_ms_p50": {
            kind: statistics.median(values) if values else None for kind, values in counters.get("open_ms", {}).items()
        },
        "open_counts": {kind: len(values) for kind, values in counters.get("open_ms", {}).items()},
        "sql_statements_per_pair": {k: v / max(len(cold), 1) for k, v in sorted(counters["sql_statements"].items())},
        # PostgreSQL round trips per cold + warm pair by kind (bench/profiled_service.py's PgTrips)
        "pg_round_trips_per_pair": {
            k: v / max(len(cold), 1) for k, v in sorted(counters.get("pg_round_trips", {}).items())
        },
        "load_average": os.getloadavg(),
    }
    if profile:
        shutil.copy(profile_out, work.parent / f"cold-{db}-cap{cap}.pstats")
        stats = pstats.Stats(str(profile_out))
        rows = []
        for (file, line, fn), (_cc, nc_, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            rows.append((ct, nc_, f"{Path(file).name}:{line}({fn})"))
        rows.sort(reverse=True)
        result["top_cumulative"] = [
            {"cum_ms_per_pair": ct * 1000 / max(len(cold), 1), "calls": n, "fn": fn} for ct, n, fn in rows[:60]
        ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=1, help="turns per session before the window (drain-phase-like)")
    parser.add_argument("--db", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--profile", action="store_true", help="cProfile the window (figures then include its overhead)")
    parser.add_argument(
        "--cap", type=int, default=1, help="max_loaded_sessions (above --sessions: no session is ever cold, a control)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.out / f"work-cold-{stamp}-{uuid.uuid4().hex[:4]}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(asyncio.wait_for(measure(args.sessions, args.turns, args.db, work, args.profile, args.cap), 900))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["started_at"] = stamp
    (args.out / f"cold-{args.db}-latest.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    c, w = result["cold"], result["warm"]
    print(
        f"{args.db}: {c['n']} cold / {w['n']} warm first messages (one at a time); cold p50 {c['p50_ms']:.2f} ms"
        f" p90 {c['p90_ms']:.2f}; warm p50 {w['p50_ms']:.2f} ms p90 {w['p90_ms']:.2f}; cold − warm p50"
        f" {result['cold_minus_warm_p50_ms']:.2f} ms (paired {result['paired_diff_p50_ms']:.2f}); in the service, p50 ms:"
        f" {' '.join(f'{k} {v:.2f}' for k, v in result['open_ms_p50'].items() if v is not None)};"
        f" load {result['load_average'][0]:.1f}",
        flush=True,
    )
    if trips := result["pg_round_trips_per_pair"]:
        print(f"PostgreSQL round trips per cold + warm pair: {sum(trips.values()):.2f} ("
              + ", ".join(f"{k} {v:.2f}" for k, v in trips.items()) + ")", flush=True)
    for row in result.get("top_cumulative", []):
        print(f"{row['cum_ms_per_pair']:9.3f} ms/pair {row['calls']:8d}  {row['fn']}")


if __name__ == "__main__":
    main()
