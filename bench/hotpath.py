"""``python -m bench.hotpath`` (``make bench-profile``): where one plain message's time and writes go.

One nats-server and one service process (bench/profiled_service.py: the unmodified
``turnstile run`` under cProfile with SQLAlchemy counters), ``--sessions`` sessions
that have each had a first turn (``--turns``: that many), then ``--messages`` plain messages published at
once (``--rate R``: paced, one every 1/R s, as the load phase's paced window); the window opens
(SIGUSR1) before they are published and closes (SIGUSR2) after the last reply. Counted per message over that window:

- JetStream publishes by stream and kind, from a core subscription on the prefix's
  subjects (checkpoints with their fencing header, events by type, replies) and
  the streams' sequence deltas (which count every publish, a discarded one too);
- JetStream API requests and acks of the service (``$JS.API.>``, ``$JS.ACK.>``);
- SQL statements by verb and table, and commits (SQLAlchemy events in the process);
- CPU of the event-loop thread and of the other threads (psutil, per thread);
- the event loop's CPU split by area (cProfile self time by module: encoding,
  SQL, NATS client, FastStream, turn engine, …).

``--store postgres`` runs the service on a fresh PostgreSQL database instead of a SQLite file.
Prints a table and writes ``var/bench/hotpath-<store>-latest.json`` (+ the pstats file).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import shutil
import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import orjson
import psutil
from nats.aio.msg import Msg

from bench.ablation import PARTS
from bench.common import ROOT, Child, delete_streams, open_nats_server, settled_stream_states, wait_until
from bench.driver import Driver, Meters, message_plan, session_ids
from bench.pg import fresh_database, pg_url
from bench.scenarios import plain_text
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix
from consumers.nats_flush import flush
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

SIZES = {"quick": (50, 600), "full": (100, 3000)}  # (sessions, messages)

# cProfile self time by where the function lives; first match wins.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("idle (epoll wait)", ("select.epoll", "method 'poll' of 'select")),
    ("the bench's own SQL counter", ("profiled_service",)),
    ("socket writes", ("_socket.socket",)),
    ("metrics (prometheus_client)", ("prometheus_client",)),
    ("encoding (orjson, pydantic, json)", ("orjson", "pydantic", "/json/", "model_dump", "model_validate", "validate_json")),
    ("SQL (SQLAlchemy, aiosqlite/asyncpg front)", ("sqlalchemy", "aiosqlite", "asyncpg", "sqlite3")),
    ("NATS client (nats-py)", ("/nats/",)),
    ("FastStream", ("faststream",)),
    ("turn engine (core/engine, providers)", ("/core/engine", "/core/providers")),
    ("sessions and store (core/sessions, core/store)", ("/core/sessions", "/core/store")),
    ("service shell (consumers/)", ("/consumers/",)),
    ("wire models (schemas/)", ("/schemas/",)),
    ("asyncio and event loop", ("asyncio", "uvloop", "_asyncio", "selectors")),
    ("logging", ("logging",)),
)


# asyncio objects made per message, counted from the profile's call counts (plain functions
# of the event loop, so cProfile counts each call once): every task goes through
# ``loop.create_task``, every loop callback (call_soon, call_later, call_at: a done-callback,
# a task step, a timer) is a ``Handle``.
ASYNCIO_COUNTS: dict[str, tuple[str, str]] = {
    "tasks created": ("asyncio/base_events.py", "create_task"),
    "futures created (loop.create_future)": ("asyncio/base_events.py", "create_future"),
    "loop callbacks (Handle objects)": ("asyncio/events.py", "__init__"),
    "timers (call_at)": ("asyncio/base_events.py", "call_at"),
}


def _area(filename: str, funcname: str) -> str:
    where = f"{filename} {funcname}"
    for name, needles in AREAS:
        if any(n in where for n in needles):
            return name
    return "other (stdlib, builtins)"


def profile_breakdown(path: Path, messages: int) -> dict[str, Any]:
    """Self time per area (µs per message) and the project's top functions by cumulative time."""
    stats = pstats.Stats(str(path))
    by_area: Counter[str] = Counter()
    top: list[tuple[float, str]] = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    machinery: Counter[str] = Counter()
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in raw.items():
        by_area[_area(filename, func)] += tt
        for name, (where, what) in ASYNCIO_COUNTS.items():
            if filename.endswith(where) and func == what:
                machinery[name] = max(machinery[name], nc)  # Handle.__init__, not TimerHandle's (also there)
        if "/consumers/" in filename or "/core/" in filename:
            short = filename.split("/turnstile/")[-1].split(str(ROOT) + "/")[-1]
            top.append((ct, f"{short}:{line} {func}"))
    top.sort(reverse=True)
    busy = sum(v for k, v in by_area.items() if not k.startswith("idle"))
    return {
        "self_us_per_msg": {k: v / messages * 1e6 for k, v in by_area.most_common()},
        "busy_us_per_msg": busy / messages * 1e6,
        "top_cumulative_us_per_msg": [(name, ct / messages * 1e6) for ct, name in top[:25]],
        "asyncio_per_msg": {name: machinery[name] / messages for name in ASYNCIO_COUNTS},
    }


class SubjectTally:
    """Core-NATS copies of what the service sends, by kind (stream subjects, API requests, acks)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.counts: Counter[str] = Counter()
        self.active = False

    def kind(self, msg: Msg) -> str:
        s = msg.subject
        if s.startswith("$JS.ACK."):
            return "inbound ack ($JS.ACK)"
        if s.startswith("$JS.API."):
            parts = s.split(".")
            return "JS API " + ".".join(p for p in parts[2:4] if not p.startswith(self.prefix.upper()))
        rest = s[len(self.prefix) + 1 :]
        head = rest.split(".", 1)[0]
        if head == "checkpoint":
            fenced = bool(msg.headers and "Nats-Expected-Last-Subject-Sequence" in msg.headers)
            return f"checkpoint publish ({'fenced' if fenced else 'unfenced'})"
        if head == "events":
            return "event " + ".".join(rest.split(".")[2:])
        if head == "outbound":
            return "reply (outbound)"
        if head == "inbound":
            return "inbound (the bench's)"
        return f"{head} (core NATS)"

    async def on_msg(self, msg: Msg) -> None:
        if self.active:
            self.counts[self.kind(msg)] += 1


def _thread_cpu(pid: int) -> tuple[float, float]:
    """(event-loop thread, all other threads) CPU seconds of a process; the main thread's id is the pid."""
    main = other = 0.0
    for t in psutil.Process(pid).threads():
        if t.id == pid:
            main += t.user_time + t.system_time
        else:
            other += t.user_time + t.system_time
    return main, other


async def measure(
    sessions: int, messages: int, work: Path, store: str, profiled: bool = True, turns: int = 1,
    rate: float | None = None, ablated: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One (profiled) window on SQLite (a temp file) or PostgreSQL (a fresh database), after ``turns``
    first turns of every session; ``rate``: the messages paced at that many a second; ``ablated``: parts of the
    service shell switched off (bench/ablation.py)."""
    if store == "postgres":
        async with fresh_database("hp") as name:
            db_env = {"TURNSTILE_DATABASE_URL": pg_url(name, "postgresql+asyncpg")}
            return await _measure(sessions, messages, work, db_env, profiled, turns, rate, ablated)
    return await _measure(sessions, messages, work, None, profiled, turns, rate, ablated)


async def _measure(
    sessions: int, messages: int, work: Path, db_env: dict[str, str] | None, profiled: bool, turns: int = 1,
    rate: float | None = None, ablated: tuple[str, ...] = (),
) -> dict[str, Any]:
    server, server_meter = await open_nats_server(work)
    nc = await nats.connect(server.url)
    tap = await nats.connect(server.url)
    prefix = new_prefix("hp")
    subjects = Subjects(prefix)
    js = nc.jetstream()
    await ensure_streams(js, Settings(nats_url=server.url, prefix=prefix), subjects)
    tally = SubjectTally(prefix)
    for subject in (f"{prefix}.>", "$JS.API.>", "$JS.ACK.>"):
        await tap.subscribe(subject, cb=tally.on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=2**34)
    await flush(tap)
    pstats_path = work / "service.pstats"
    config = ServiceConfig(server.url, prefix, work / f"{prefix}.db", db_env)
    env = {**config.env(), "BENCH_PROFILE_OUT": str(pstats_path)}
    if not profiled:
        env["BENCH_PROFILE_OFF"] = "1"
    if ablated:
        env["BENCH_ABLATE"] = ",".join(ablated)
    child = Child(["-m", "bench.profiled_service"], env, work / "service.log")
    driver = Driver(nc, subjects, Meters(server_meter, server_meter))
    out: dict[str, Any] = {
        "sessions": sessions, "messages": messages, "turns": turns, "store": "postgres" if db_env else "sqlite",
        "rate_per_s": rate, "ablated": list(ablated),
    }
    try:
        await child.wait_ready(READY_MARKER, READY_TIMEOUT_S)
        await driver.attach()
        sids = session_ids(uuid.uuid4().hex[:8], sessions)
        await driver.rounds(sids, turns, lambda r: "first turn", 60)  # every session exists: later turns are plain
        before = await settled_stream_states(js, subjects)  # the setup turns' trailing publishes are not the window's
        os.kill(child.pid, signal.SIGUSR1)
        tally.active = True
        cpu0, (main0, other0), srv0, t0 = child.meter.cpu_s(), _thread_cpu(child.pid), server_meter.cpu_s(), time.perf_counter()
        plan = message_plan(sids, messages, plain_text)
        if rate is None:
            await driver.preload(plan)
        else:
            paced = await driver.paced(plan, rate, sessions, 120)
            out["paced_latency_ms"] = {"p50": paced.latency.p50_ms, "p99": paced.latency.p99_ms}
        if not await wait_until(driver.timer.done, 120 + messages * 0.05):
            raise RuntimeError(f"only {len(driver.timer.got)}/{messages} replies")
        wall = time.perf_counter() - t0
        cpu1, (main1, other1), srv1 = child.meter.cpu_s(), _thread_cpu(child.pid), server_meter.cpu_s()
        after = await settled_stream_states(js, subjects)  # the last checkpoints and events after the last reply
        await flush(tap)
        tally.active = False
        os.kill(child.pid, signal.SIGUSR2)
        if not await wait_until(lambda: Path(str(pstats_path) + ".json").exists(), 60, 0.1):
            raise RuntimeError("the profiled service wrote no profile")
        counters = orjson.loads(await asyncio.to_thread(Path(str(pstats_path) + ".json").read_bytes))
        n = messages
        out.update(
            {
                "wall_s": wall,
                "msgs_per_s_profiled": n / wall,
                "worker_cpu_us_per_msg": (cpu1 - cpu0) / n * 1e6,
                "event_loop_thread_cpu_us_per_msg": (main1 - main0) / n * 1e6,
                "other_threads_cpu_us_per_msg": (other1 - other0) / n * 1e6,
                "nats_server_cpu_us_per_msg": (srv1 - srv0) / n * 1e6,
                "stream_publishes_per_msg": {
                    k: (after[k].last_seq - before[k].last_seq) / n for k in ("checkpoint", "events", "outbound")
                },
                "seen_per_msg": {k: v / n for k, v in sorted(tally.counts.items())},
                "sql_statements_per_msg": {k: v / n for k, v in sorted(counters["sql_statements"].items())},
                "sql_statements_total_per_msg": sum(counters["sql_statements"].values()) / n,
                "sql_commits_per_msg": counters["sql_commits"] / n,
                "profile": profile_breakdown(pstats_path, n) if profiled else None,
            }
        )
    finally:
        await child.stop()
        await driver.detach()
        await delete_streams(js, subjects)
        await tap.close()
        await nc.close()
        await server.stop()
    return out


def table(r: dict[str, Any]) -> str:
    lines = [
        f"hot path of a plain message on {r['store']}: {r['messages']} messages over {r['sessions']} sessions (each had a turn),"
        + (f" paced at {r['rate_per_s']:g}/s (reply p50 {r['paced_latency_ms']['p50']:.2f} ms),"
           if r.get("rate_per_s") else " published at once,")
        + (f" under cProfile ({r['msgs_per_s_profiled']:.0f} msg/s profiled; slower than unprofiled)" if r["profile"]
           else f" without the profiler ({r['msgs_per_s_profiled']:.0f} msg/s)")
        + (f"; switched off (bench/ablation.py): {', '.join(r['ablated'])}" if r.get("ablated") else ""),
        f"  worker CPU {r['worker_cpu_us_per_msg']:,.0f} µs/msg = event loop {r['event_loop_thread_cpu_us_per_msg']:,.0f}"
        f" + other threads {r['other_threads_cpu_us_per_msg']:,.0f}; nats-server {r['nats_server_cpu_us_per_msg']:,.0f} µs/msg",
        "  JetStream publishes per message (stream sequences): "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["stream_publishes_per_msg"].items())
        + f" = {sum(r['stream_publishes_per_msg'].values()):.2f}",
        "  seen per message (core copies of what was sent):",
    ]
    lines += [f"    {v:6.2f}  {k}" for k, v in r["seen_per_msg"].items()]
    lines.append(f"  SQL per message: {r['sql_statements_total_per_msg']:.2f} statements, {r['sql_commits_per_msg']:.2f} commits")
    lines += [f"    {v:6.2f}  {k}" for k, v in r["sql_statements_per_msg"].items()]
    prof = r["profile"]
    if prof is None:
        return "\n".join(lines)
    lines.append(f"  event-loop thread wall time by area (µs/msg, cProfile self time; a blocking call counts whole; busy {prof['busy_us_per_msg']:,.0f}):")
    lines += [f"    {v:8,.0f}  {k}" for k, v in prof["self_us_per_msg"].items()]
    lines.append("  asyncio per message: " + ", ".join(f"{k} {v:.2f}" for k, v in prof["asyncio_per_msg"].items()))
    lines.append("  project functions by cumulative time (µs/msg; coroutines: time per resumption, summed):")
    lines += [f"    {v:8,.0f}  {k}" for k, v in prof["top_cumulative_us_per_msg"][:15]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(SIZES), default="quick")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=1,
                        help="first turns per session before the window (the load phase's 100-session drain leaves ~15)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    parser.add_argument("--no-profile", action="store_true",
                        help="counters and CPU of the unprofiled service (no cProfile, no split by area)")
    parser.add_argument("--rate", type=float, default=None,
                        help="publish the messages paced at this many a second (the load phase's paced window: 50)")
    parser.add_argument("--ablate", default="",
                        help=f"switch these parts of the service shell off (bench/ablation.py: {', '.join(PARTS)}); "
                        "a measurement aid: the process no longer keeps the rules they implement")
    args = parser.parse_args()
    sessions, messages = SIZES[args.profile]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.out / f"work-hotpath-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(asyncio.wait_for(measure(
        args.sessions or sessions, args.messages or messages, work, args.store, not args.no_profile, args.turns,
        args.rate, tuple(p.strip() for p in args.ablate.split(",") if p.strip()),
    ), 900))
    result["started_at"] = stamp
    name = f"hotpath-{args.store}{'-unprofiled' if args.no_profile else ''}{'-paced' if args.rate else ''}-latest"
    (args.out / f"{name}.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    pst = work / "service.pstats"
    if pst.exists():
        pst.replace(args.out / f"{name}.pstats")
    shutil.rmtree(work, ignore_errors=True)
    print(table(result), flush=True)
    print(f"JSON: {args.out / (name + '.json')}; pstats: {args.out / (name + '.pstats')}", flush=True)


if __name__ == "__main__":
    main()
